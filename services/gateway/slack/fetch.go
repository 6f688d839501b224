package slack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	slackapi "github.com/slack-go/slack"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

var _ platform.Fetcher = (*Platform)(nil)

// errTokenRefused is a file URL the bot token must not be sent to.
var errTokenRefused = errors.New("not an https Slack URL nor the API URL: the bot token is not sent there")

// errSignIn is Slack's answer to a request it does not authorize: a
// redirect to the workspace's sign-in page, an HTML page with status 200.
var errSignIn = errors.New("slack answered its sign-in page: the bot token cannot read the file (files:read scope?)")

// Fetch downloads a file shared in a message (platform.Fetcher): its
// url_private_download, or url_private (fileURL), which Slack serves to
// the bot token (files:read). The Runner calls it when a turn asks for
// the file (a worker's AttachmentFetchRequested, served by any replica),
// not as the message is published. The token goes only to Slack
// (tokenMayGo). Slack answers a token it does not accept with its
// sign-in page and status 200, which Fetch takes for the failure it is
// (signInPage) rather than the file. A 429 (Slack's rate limit) or a 5xx
// is asked again after its Retry-After, else 1.5 s then 3 s, three
// attempts in all, as Hermes's _download_slack_file, within ctx (the
// fetch's bound): a wait that would outlast it fails at once
// (platform.Download). So is a connection lost, before the answer or in
// the middle of the file: the body the caller reads asks again and reads
// on where it broke.
func (p *Platform) Fetch(ctx context.Context, a *eventsv1.Attachment) (io.ReadCloser, string, error) {
	id := a.GetPlatformFileId()
	u, err := url.Parse(a.GetUrl())
	if err != nil {
		return nil, "", fmt.Errorf("slack file %s: %w", id, errTokenRefused)
	}
	if !tokenMayGo(p.cfg.APIBaseURL, u) {
		return nil, "", fmt.Errorf("slack file %s at %s://%s: %w", id, u.Scheme, u.Host, errTokenRefused)
	}
	resp, err := platform.Download(ctx, p.hc, func(ctx context.Context) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err == nil {
			req.Header.Set("Authorization", "Bearer "+p.cfg.BotToken)
		}
		return req, err
	})
	if err != nil {
		return nil, "", fmt.Errorf("slack file %s: %w", id, err)
	}
	if signInPage(a, u, resp) {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
		return nil, "", fmt.Errorf("slack file %s: %w", id, errSignIn)
	}
	return resp.Body, resp.Header.Get("Content-Type"), nil
}

// signInPage reports whether resp, Slack's answer for the file a at u, is
// its sign-in page rather than the file. Slack redirects a request it does
// not authorize to the workspace's sign-in page (/?redir=<the file's
// path>), which it answers with status 200. So an HTML answer is the
// sign-in page for a file that is not HTML itself; for an HTML file (text
// documents are read, .html included) it is only when the client was
// redirected away from the file's URL.
func signInPage(a *eventsv1.Attachment, u *url.URL, resp *http.Response) bool {
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/html" {
		return false
	}
	if !declaredHTML(a) {
		return true
	}
	got := u
	if resp.Request != nil && resp.Request.URL != nil {
		got = resp.Request.URL // the last request, after any redirect
	}
	return !strings.EqualFold(got.Host, u.Host) || got.Path != u.Path || got.Query().Has("redir")
}

// declaredHTML reports whether Slack declared a to be an HTML file: by its
// media type or, when Slack gives a generic one, its file name.
func declaredHTML(a *eventsv1.Attachment) bool {
	mt, _, _ := mime.ParseMediaType(a.GetMimeType())
	switch mt {
	case "text/html":
		return true
	case "", "application/octet-stream":
		ext := strings.ToLower(path.Ext(a.GetFileName()))
		return ext == ".html" || ext == ".htm"
	}
	return false
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

// fileInfoTimeout bounds the files.info calls of one message: the event
// is acknowledged after them, and Slack wants that within 3 s.
const fileInfoTimeout = 2 * time.Second

// needsFileInfo reports whether ev has a file completeFiles looks up.
func needsFileInfo(ev *eventsv1.MessageReceived) bool {
	for _, a := range ev.GetAttachments() {
		if needsInfo(a) {
			return true
		}
	}
	return false
}

// needsInfo: a file Slack sent without a URL, as a stub.
func needsInfo(a *eventsv1.Attachment) bool {
	return a.GetUrl() == "" && a.GetPlatformFileId() != "" && a.GetUnavailable() == ""
}

// completeFiles fills in the files of ev that Slack sent without a URL:
// a Slack Connect channel's files come as stubs (file_access:
// check_file_info, the id and nothing else), whose URL, type, name and
// size files.info gives, as Hermes asks it. Without them the agent would
// be told of a nameless document it cannot read. A file files.info does
// not give (deleted, no files:read scope) is marked unavailable with
// Slack's error, which the model reads.
func (p *Platform) completeFiles(ctx context.Context, ev *eventsv1.MessageReceived) {
	var cancel context.CancelFunc
	for _, a := range ev.GetAttachments() {
		if !needsInfo(a) {
			continue
		}
		if cancel == nil {
			ctx, cancel = context.WithTimeout(ctx, fileInfoTimeout)
			defer cancel()
		}
		f, _, _, err := p.api.GetFileInfoContext(ctx, a.GetPlatformFileId(), 0, 0)
		if err == nil && fileURL(f.URLPrivate, f.URLPrivateDownload) == "" {
			err = errors.New("no url_private")
		}
		if err != nil {
			p.log.Warn("slack files.info failed; the file is published as unavailable", "file", a.GetPlatformFileId(), "err", err)
			reason := "it could not be looked up"
			var se slackapi.SlackErrorResponse
			if errors.As(err, &se) && se.Err != "" {
				reason = "Slack did not give the bot the file: " + se.Err
			}
			a.Unavailable = reason
			continue
		}
		a.Location = &eventsv1.Attachment_Url{Url: fileURL(f.URLPrivate, f.URLPrivateDownload)}
		a.Kind, a.MimeType, a.FileName, a.SizeBytes = kindOf(f.Mimetype), f.Mimetype, f.Name, int64(f.Size)
	}
	if cancel != nil {
		// The kinds files.info gave decide, with the others', whether
		// the message is a voice message; its text is the one left
		// after the bot's mention, which keeps a leading /.
		ev.VoiceByDownload = voiceMessage(ev.GetAttachments(), ev.GetText())
	}
}
