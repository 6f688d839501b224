package slack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

var _ platform.Fetcher = (*Platform)(nil)

// errTokenRefused is a file URL the bot token must not be sent to.
var errTokenRefused = errors.New("not an https Slack URL nor the API URL: the bot token is not sent there")

// errSignIn is Slack's answer to a request it does not authorize: its
// sign-in page, an HTML page with status 200.
var errSignIn = errors.New("slack answered its sign-in page: the bot token cannot read the file (files:read scope?)")

// Fetch downloads a file shared in a message (platform.Fetcher): its
// url_private, which Slack serves to the bot token (files:read). The token
// goes only to Slack (tokenMayGo). Slack answers a token it does not
// accept with its sign-in page and status 200, so an HTML answer is an
// error; the Runner fetches only images, never an HTML file.
func (p *Platform) Fetch(ctx context.Context, a *eventsv1.Attachment) (io.ReadCloser, string, error) {
	id := a.GetPlatformFileId()
	u, err := url.Parse(a.GetUrl())
	if err != nil {
		return nil, "", fmt.Errorf("slack file %s: %w", id, errTokenRefused)
	}
	if !tokenMayGo(p.cfg.APIBaseURL, u) {
		return nil, "", fmt.Errorf("slack file %s at %s://%s: %w", id, u.Scheme, u.Host, errTokenRefused)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, "", fmt.Errorf("slack file %s: %w", id, err)
	}
	req.Header.Set("Authorization", "Bearer "+p.cfg.BotToken)
	resp, err := p.hc.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("slack file %s: %w", id, err)
	}
	fail := func(err error) (io.ReadCloser, string, error) {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
		return nil, "", fmt.Errorf("slack file %s: %w", id, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fail(fmt.Errorf("download: %s", resp.Status))
	}
	ct := resp.Header.Get("Content-Type")
	if mt, _, _ := mime.ParseMediaType(ct); mt == "text/html" {
		return fail(errSignIn)
	}
	return resp.Body, ct, nil
}

// tokenMayGo reports whether the bot token may be sent to u: an https URL
// on Slack's domains (files.slack.com), or the scheme and host of the API
// URL, which gets the token with every call (a local Slack in tests). A
// remote file's url_private is whatever URL its creator chose, so the
// token is sent nowhere else; slack-go's GetFile has the same rule.
func tokenMayGo(apiURL string, u *url.URL) bool {
	if u.Scheme == "https" {
		host := strings.ToLower(u.Hostname())
		for _, d := range []string{"slack.com", "slack-gov.com"} {
			if host == d || strings.HasSuffix(host, "."+d) {
				return true
			}
		}
	}
	api, err := url.Parse(apiURL)
	return err == nil && api.Host != "" && u.Scheme == api.Scheme && strings.EqualFold(u.Host, api.Host)
}
