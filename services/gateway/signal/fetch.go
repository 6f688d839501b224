package signal

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"strings"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

var _ platform.Fetcher = (*Platform)(nil)

// Fetch reads a received attachment from the daemon with the getAttachment
// RPC (base64 in the answer), as Hermes does; the Runner calls it when a
// turn asks for the attachment, on any replica. The id is checked first:
// signal-cli reads the file of that name from its attachments directory,
// and a fetch request on the bus must not name another file.
func (p *Platform) Fetch(ctx context.Context, a *eventsv1.Attachment) (io.ReadCloser, string, error) {
	id := a.GetPlatformFileId()
	if id == "" {
		return nil, "", platform.ErrNotFetched
	}
	if !attachmentID(id) {
		return nil, "", fmt.Errorf("signal attachment id %q: not an attachment id", id)
	}
	var res struct {
		Data string `json:"data"`
	}
	if err := p.client.call(ctx, "getAttachment", map[string]any{"id": id}, &res); err != nil {
		return nil, "", fmt.Errorf("signal attachment %s: %w", id, err)
	}
	if res.Data == "" {
		return nil, "", fmt.Errorf("signal attachment %s: empty answer", id)
	}
	return io.NopCloser(base64.NewDecoder(base64.StdEncoding, strings.NewReader(res.Data))), "", nil
}

// attachmentID reports whether id looks like signal-cli's attachment ids
// (a base64url name, maybe with an extension): no path, no "..".
func attachmentID(id string) bool {
	if len(id) > 200 || id[0] == '.' || strings.Contains(id, "..") {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
