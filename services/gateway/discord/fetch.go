package discord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/bwmarrin/discordgo"

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
// which the CDN answers 404: the URL is then refreshed (refreshURL) and
// the download tried once more, so a turn that waited longer than a day
// still reads the file. A 429 or a 5xx is asked again, after its
// Retry-After, else 1.5 s then 3 s, three attempts in all within ctx, as
// Hermes retries media downloads; before, the first such answer lost the
// file to the turn. Anything but an http(s) URL is refused. Errors name
// the attachment, not its URL: the signature in it lets anyone read the
// file.
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
	resp, err := p.download(ctx, u)
	if se := (*platform.StatusError)(nil); errors.As(err, &se) && se.Code == http.StatusNotFound {
		// Expired, most likely: a fresh signature, and once more.
		fresh, rerr := p.refreshURL(ctx, u)
		if rerr != nil {
			return nil, "", fmt.Errorf("discord attachment %s from %s: %s, and %w", a.GetPlatformFileId(), u.Host, se.Status, rerr)
		}
		if fresh == nil {
			return nil, "", fmt.Errorf("discord attachment %s from %s: %s", a.GetPlatformFileId(), u.Host, se.Status)
		}
		u = fresh
		resp, err = p.download(ctx, u)
	}
	if err != nil {
		return nil, "", fmt.Errorf("discord attachment %s from %s: %w", a.GetPlatformFileId(), u.Host, err)
	}
	return resp.Body, resp.Header.Get("Content-Type"), nil
}

// download GETs u from the CDN (platform.Download: a 429 or a 5xx is
// asked again); its error does not carry the signed URL.
func (p *Platform) download(ctx context.Context, u *url.URL) (*http.Response, error) {
	resp, err := platform.Download(ctx, p.cdn, func(ctx context.Context) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return nil, errors.New("bad request")
		}
		return req, nil
	})
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the signed URL
		}
		return nil, err
	}
	return resp, nil
}

// refreshURL asks Discord (POST /attachments/refresh-urls, with the bot
// token) for a freshly signed URL of the attachment at u. nil when Discord
// has none other (a deleted message's file) or gives one off its CDN.
func (p *Platform) refreshURL(ctx context.Context, u *url.URL) (*url.URL, error) {
	endpoint := discordgo.EndpointAPI + "attachments/refresh-urls"
	body, err := p.s.RequestWithBucketID(http.MethodPost, endpoint, map[string][]string{"attachment_urls": {u.String()}}, endpoint, opts(ctx)...)
	if err != nil {
		var re *discordgo.RESTError
		if errors.As(err, &re) && re.Response != nil {
			return nil, fmt.Errorf("refreshing its url: %s", re.Response.Status) // the body may quote the URL
		}
		return nil, fmt.Errorf("refreshing its url: %w", err)
	}
	var out struct {
		RefreshedURLs []struct {
			Original  string `json:"original"`
			Refreshed string `json:"refreshed"`
		} `json:"refreshed_urls"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("refreshing its url: %w", err)
	}
	for _, r := range out.RefreshedURLs {
		if r.Refreshed == "" || r.Refreshed == u.String() {
			continue
		}
		fresh, err := url.Parse(r.Refreshed)
		if err == nil && (fresh.Scheme == "https" || fresh.Scheme == "http") && p.cdnHost(fresh) {
			return fresh, nil
		}
	}
	return nil, nil
}
