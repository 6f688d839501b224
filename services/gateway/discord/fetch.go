package discord

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

var _ platform.Fetcher = (*Platform)(nil)

// errNotHTTP is an attachment URL that Fetch refuses: not http(s).
var errNotHTTP = errors.New("discord attachment url is not http(s)")

// errNotCDN is an attachment URL on a host that is not Discord's: a fetch
// request on the bus cannot make the gateway read an internal address.
var errNotCDN = errors.New("discord attachment url is not on Discord's CDN")

// cdnHost reports whether u is on Discord's CDN (cdn.discordapp.com,
// media.discordapp.net) or on the configured api_base_url's host (a proxy,
// or the fake in tests).
func (p *Platform) cdnHost(u *url.URL) bool {
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if u.Scheme == "https" && (host == "discordapp.com" || host == "discordapp.net" ||
		strings.HasSuffix(host, ".discordapp.com") || strings.HasSuffix(host, ".discordapp.net")) {
		return true
	}
	base, err := url.Parse(p.cfg.APIBaseURL)
	return p.cfg.APIBaseURL != "" && err == nil && strings.EqualFold(base.Host, u.Host)
}

// cdnClient is the session's HTTP client (its transport, and in tests the
// fake's rewrite) without its 20 s bound on a whole request, which suits
// REST calls but not a 20 MiB image: the Runner bounds each download.
func cdnClient(c *http.Client) *http.Client {
	if c == nil {
		return &http.Client{}
	}
	cdn := *c
	cdn.Timeout = 0
	return &cdn
}

// Fetch downloads an attachment from Discord's CDN (platform.Fetcher): the
// URL of the MESSAGE_CREATE, which came over the authenticated gateway
// connection. The Runner calls it when a turn asks for the attachment (a
// worker's AttachmentFetchRequested, served by any replica), not as the
// message is published. Discord signs its CDN URLs (ex, is, hm), so the
// request carries no token; the signature expires (ex, about a day), after
// which the CDN answers 404 and the attachment could not be downloaded.
// Anything but an http(s) URL is refused. Errors name the attachment, not
// its URL: the signature in it lets anyone read the file.
func (p *Platform) Fetch(ctx context.Context, a *eventsv1.Attachment) (io.ReadCloser, string, error) {
	u, err := url.Parse(a.GetUrl())
	if err != nil {
		return nil, "", fmt.Errorf("discord attachment %s: %w", a.GetPlatformFileId(), errNotHTTP)
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, "", fmt.Errorf("discord attachment %s (scheme %q): %w", a.GetPlatformFileId(), u.Scheme, errNotHTTP)
	}
	if !p.cdnHost(u) {
		return nil, "", fmt.Errorf("discord attachment %s on %s: %w", a.GetPlatformFileId(), u.Host, errNotCDN)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, "", fmt.Errorf("discord attachment %s: %w", a.GetPlatformFileId(), err)
	}
	resp, err := p.cdn.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the signed URL
		}
		return nil, "", fmt.Errorf("discord attachment %s from %s: %w", a.GetPlatformFileId(), u.Host, err)
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
		return nil, "", fmt.Errorf("discord attachment %s from %s: %s", a.GetPlatformFileId(), u.Host, resp.Status)
	}
	return resp.Body, resp.Header.Get("Content-Type"), nil
}
