package teams

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

var _ platform.Fetcher = (*Platform)(nil)

// ErrDownload is an attachment download answered with a status other
// than 200.
var ErrDownload = errors.New("teams attachment download failed")

// connectorHosts are Microsoft's connector hosts, of the public cloud
// and the government clouds (GCC, GCC High, DoD: the Teams service URLs
// of Microsoft's Agents SDK): the pictures users send are there, behind
// the bot's token.
var connectorHosts = map[string]bool{"smba.trafficmanager.net": true, "smba.infra.gcc.teams.microsoft.com": true,
	"smba.infra.gov.teams.microsoft.us": true, "smba.infra.dod.teams.microsoft.us": true}

// Fetch downloads a user's attachment when a turn reads it: a file's
// pre-authorized download URL as it is, a picture on the connector (its
// host, or the configured service URL's) with the bot's token. The token
// goes to no other host, and a download from any other host reaches only
// public addresses (egress.Guard): the URL is the activity's, which
// anyone in the conversation can shape. A 429 (the connector's rate
// limit) or a 5xx is asked again after its Retry-After, else 1.5 s then
// 3 s, three attempts in all, as Hermes's cache_image_from_url, within
// ctx (the fetch's bound): a wait that would outlast it fails at once.
func (p *Platform) Fetch(ctx context.Context, a *eventsv1.Attachment) (io.ReadCloser, string, error) {
	u, err := url.Parse(a.GetPlatformFileId())
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, "", platform.ErrNotFetched
	}
	hc, authorized := p.anon, p.connectorHost(u)
	if authorized {
		hc = p.hc
	}
	var resp *http.Response
	for try := 1; ; try++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return nil, "", platform.ErrNotFetched
		}
		if authorized {
			tok, err := p.tokens.Token(ctx)
			if err != nil {
				return nil, "", fmt.Errorf("token for an attachment: %w", err)
			}
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		if resp, err = hc.Do(req); err != nil {
			// Without the URL: a file's downloadUrl is pre-authorized
			// (its tempauth lets anyone read the file) and the error is
			// logged.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return nil, "", fmt.Errorf("download teams attachment from %s: %w", u.Host, err)
		}
		if resp.StatusCode == http.StatusOK {
			break
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
		status := fmt.Errorf("%w: HTTP %d", ErrDownload, resp.StatusCode)
		if !downloadRetried(resp.StatusCode) || try == downloadTries {
			return nil, "", status
		}
		wait := downloadWait(resp.Header, try, time.Now())
		if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
			// The fetch's bound ends before the wait: fail now, with
			// the connector's answer, rather than at the bound.
			return nil, "", fmt.Errorf("%w, asked to wait %s", status, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, "", fmt.Errorf("%w: %w", status, ctx.Err())
		case <-t.C:
		}
	}
	mt := a.GetMimeType()
	if mt == "" {
		mt, _, _ = mime.ParseMediaType(resp.Header.Get("Content-Type"))
	}
	return resp.Body, mt, nil
}

// downloadTries is how many times Fetch asks for an attachment answered
// 429 or 5xx: three, as Hermes's cache_image_from_url (two retries).
const downloadTries = 3

// downloadRetried: a download answered with status is tried again (a
// rate limit or a server error, as Hermes retries any status from 429
// on); a 404, a 403 or the like is final.
func downloadRetried(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

// downloadWait is the wait before attempt try+1 of a download answered
// with h: its Retry-After (seconds or a date), else Hermes's 1.5 s times
// the attempts made.
func downloadWait(h http.Header, try int, now time.Time) time.Duration {
	if d, ok := platform.ParseRetryAfter(h.Get("Retry-After"), now); ok {
		return d
	}
	return time.Duration(try) * 1500 * time.Millisecond
}

func (p *Platform) connectorHost(u *url.URL) bool {
	if u.Scheme == "https" && connectorHosts[strings.ToLower(u.Hostname())] && (u.Port() == "" || u.Port() == "443") {
		return true
	}
	svc, err := url.Parse(p.cfg.ServiceURL)
	return err == nil && strings.EqualFold(svc.Host, u.Host) && svc.Scheme == u.Scheme
}
