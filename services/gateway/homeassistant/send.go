package homeassistant

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// sendTimeout bounds one notification call, as Hermes's 10 s.
const sendTimeout = 10 * time.Second

// Send posts the answer as a persistent notification
// (POST /api/services/persistent_notification/create with the bearer
// token), whatever chat it names, as Hermes does. Each answer is a
// notification of its own, as in Hermes (which sends no id, so Home
// Assistant makes one), with an id made from its idempotency key, so a
// retried send replaces its own notification instead of adding a
// second; with a notification id configured every answer replaces that
// one instead. The id is the returned message id.
//
// A notification carries text only: an attachment's http(s) URL (and
// its caption) goes as a line of the message, as Hermes sends an image
// by its URL; one kept as bytes is named. A send of attachments alone
// (delivery sends an answer's media after its text) is a notification
// of its own even with a notification id, so it does not replace the
// answer it belongs to.
func (p *Platform) Send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	if req.GetTarget().GetChatId() == "" {
		return "", platform.Permanent(errors.New("homeassistant: send without a target chat"))
	}
	text, files := platform.LinkedText(req)
	for _, i := range files {
		a := req.GetAttachments()[i]
		text += "\n[" + platform.FileName(a, a.GetMimeType()) + ": a file a notification cannot show]"
	}
	if strings.TrimSpace(text) == "" {
		return "", platform.Permanent(errors.New("homeassistant: a notification needs text"))
	}
	id := p.cfg.NotificationID
	if id == "" || (strings.TrimSpace(req.GetText()) == "" && len(req.GetAttachments()) > 0) {
		sum := sha256.Sum256([]byte(req.GetIdempotencyKey()))
		id = "switchboard_" + hex.EncodeToString(sum[:8])
	}
	body := map[string]string{"title": p.cfg.NotificationTitle, "message": text, "notification_id": id}
	if err := p.callService(ctx, "persistent_notification", "create", body); err != nil {
		return "", err
	}
	return id, nil
}

// callService calls a Home Assistant service over REST and classifies a
// failure for delivery: a refused token or a bad request is permanent,
// 429 waits for Retry-After, 5xx and network errors are retried.
func (p *Platform) callService(ctx context.Context, domain, service string, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return platform.Permanent(fmt.Errorf("homeassistant: encode %s.%s: %w", domain, service, err))
	}
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.base+"/api/services/"+domain+"/"+service, bytes.NewReader(b))
	if err != nil {
		return platform.Permanent(fmt.Errorf("homeassistant: %s.%s request: %w", domain, service, err))
	}
	req.Header.Set("Authorization", "Bearer "+p.cfg.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.hc.Do(req)
	if err != nil {
		return fmt.Errorf("homeassistant: %s.%s: %w", domain, service, err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode < 300 {
		return nil
	}
	err = fmt.Errorf("homeassistant: %s.%s: HTTP %d: %s", domain, service, resp.StatusCode, strings.TrimSpace(string(text)))
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return platform.RateLimited(err, time.Duration(max(secs, 1))*time.Second)
	case resp.StatusCode >= 500:
		return err
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return platform.Permanent(fmt.Errorf("%w (check HASS_TOKEN)", err))
	}
	return platform.Permanent(err)
}

// Edit is not offered: a notification is replaced by the next answer,
// not edited.
func (p *Platform) Edit(context.Context, *deliveryv1.SendRequested) error {
	return platform.ErrUnsupported
}

// Delete is not offered (Hermes dismisses nothing).
func (p *Platform) Delete(context.Context, *deliveryv1.SendRequested) error {
	return platform.ErrUnsupported
}

// Typing: Home Assistant has no typing indicator.
func (p *Platform) Typing(context.Context, *deliveryv1.SendRequested) error {
	return platform.ErrUnsupported
}
