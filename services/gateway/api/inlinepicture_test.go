package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// An inline picture is kept in the attachment store decoded, whichever
// way its data: URL holds it, as Hermes takes any data:image/... URL with
// a comma: base64 (with a parameter before it too) or percent-encoded
// (RFC 2397), which no provider would take as a URL but the model is sent
// the kept bytes.
func TestInlinePictureKeptDecoded(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	store := attachment.New(b.JetStream(), b.Topology(), attachment.Config{})
	pic := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR %,+")
	r.answer = func(ev *eventsv1.MessageReceived, _ int) []string {
		var out []string
		for _, a := range ev.GetAttachments() {
			data, mime, err := store.Get(context.Background(), a.GetBytesRef(), 0)
			out = append(out, fmt.Sprintf("%s same=%v err=%v", mime, bytes.Equal(data, pic), err))
		}
		return out
	}
	for _, c := range []struct{ name, url string }{
		{"base64", "data:image/png;base64," + base64.StdEncoding.EncodeToString(pic)},
		{"base64 after a parameter", "data:image/png;name=a.png;base64," + base64.StdEncoding.EncodeToString(pic)},
		{"percent-encoded", "data:image/png," + url.PathEscape(string(pic))},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			body := `{"messages":[{"role":"user","content":[{"type":"text","text":"q"},{"type":"image_url","image_url":{"url":"` + c.url + `"}}]}]}`
			res := do(t, "POST", "http://"+s.Addr()+"/v1/chat/completions", testKey, body, nil)
			var answer struct {
				Choices []struct{ Message struct{ Content string } }
			}
			_ = json.Unmarshal(res.body, &answer)
			if want := "image/png same=true err=<nil>"; res.code != http.StatusOK || len(answer.Choices) != 1 || answer.Choices[0].Message.Content != want {
				t.Fatalf("%d %s; want the picture kept: %s", res.code, res.body, want)
			}
		})
	}
}
