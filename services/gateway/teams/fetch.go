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
// limit) or a 5xx is asked again (platform.Download), as Hermes's
// cache_image_from_url.
func (p *Platform) Fetch(ctx context.Context, a *eventsv1.Attachment) (io.ReadCloser, string, error) {
	u, err := url.Parse(a.GetPlatformFileId())
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, "", platform.ErrNotFetched
	}
	hc, authorized := p.anon, p.connectorHost(u)
	if authorized {
		hc = p.hc
	}
	resp, err := platform.Download(ctx, hc, func(ctx context.Context) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return nil, platform.ErrNotFetched
		}
		if !authorized {
			return req, nil
		}
		tok, err := p.tokens.Token(ctx)
		if err != nil {
			return nil, fmt.Errorf("token for an attachment: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		return req, nil
	})
	var status *platform.StatusError
	switch {
	case errors.As(err, &status):
		return nil, "", fmt.Errorf("%w: %w", ErrDownload, err)
	case err != nil:
		// Without the URL: a file's downloadUrl is pre-authorized (its
		// tempauth lets anyone read the file) and the error is logged.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, "", fmt.Errorf("download teams attachment from %s: %w", u.Host, err)
	}
	mt := a.GetMimeType()
	if mt == "" {
		mt, _, _ = mime.ParseMediaType(resp.Header.Get("Content-Type"))
	}
	return resp.Body, mt, nil
}

func (p *Platform) connectorHost(u *url.URL) bool {
	if u.Scheme == "https" && connectorHosts[strings.ToLower(u.Hostname())] && (u.Port() == "" || u.Port() == "443") {
		return true
	}
	svc, err := url.Parse(p.cfg.ServiceURL)
	return err == nil && strings.EqualFold(svc.Host, u.Host) && svc.Scheme == u.Scheme
}
