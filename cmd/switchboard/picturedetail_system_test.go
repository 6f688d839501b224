package main

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPictureDetailReachesTheModel runs every service with a fake model
// that records what it is asked. A picture's detail, as a client gives it
// on the chat completions, Responses and runs APIs (the image_url
// object's, or the part's beside a Responses image_url string), reaches
// the model in the picture's image_url part stripped, as Hermes's
// _normalize_multimodal_content passes it on; for a picture sent inline
// (kept by the gateway, sent to the model as its bytes) too. A picture
// without one is sent without, and so is one OpenAI's API does not take.
func TestPictureDetailReachesTheModel(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole system")
	}
	t.Parallel()
	fake, d := startWithFakeModel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// A PNG of one pixel.
	inline := "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
	post := func(path, body string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+d.apiAddr+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
			t.Fatalf("%s %s: %d\nlog:\n%s", path, body, resp.StatusCode, d.logs.String())
		}
	}
	// details is what the model was shown of the pictures of the message
	// that starts with text: each one's detail, "-" for none.
	details := func(text string) []string {
		t.Helper()
		for ctx.Err() == nil {
			for _, req := range fake.Requests() {
				if !strings.HasPrefix(req.LastUserText(), text) {
					continue
				}
				var out []string
				for i := len(req.Messages) - 1; i >= 0; i-- {
					if req.Messages[i].Role != "user" {
						continue
					}
					for _, img := range req.Messages[i].Images {
						out = append(out, cmp.Or(img.Detail, "-"))
					}
					return out
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("the model was never asked %q\nlog:\n%s", text, d.logs.String())
		return nil
	}
	for _, c := range []struct {
		name, path, body, text string
		want                   []string
	}{
		{"chat completion", "/v1/chat/completions", `{"model":"switchboard","messages":[{"role":"user","content":[` +
			`{"type":"text","text":"chat pictures"},` +
			`{"type":"image_url","image_url":{"url":"https://example.test/a.png","detail":" low "}},` +
			`{"type":"image_url","image_url":{"url":"` + inline + `","detail":"high"}},` +
			`{"type":"image_url","image_url":{"url":"https://example.test/b.png"}}]}]}`,
			"chat pictures", []string{"low", "high", "-"}},
		{"Responses", "/v1/responses", `{"model":"switchboard","input":[{"role":"user","content":[` +
			`{"type":"input_text","text":"responses pictures"},` +
			`{"type":"input_image","image_url":"https://example.test/c.png","detail":"\tauto"},` +
			`{"type":"input_image","image_url":"` + inline + `","detail":null}]}]}`,
			"responses pictures", []string{"auto", "-"}},
		{"run", "/v1/runs", `{"input":[{"role":"user","content":[` +
			`{"type":"input_text","text":"run pictures"},` +
			`{"type":"input_image","image_url":"` + inline + `","detail":"low"}]}]}`,
			"run pictures", []string{"low"}},
		// A detail OpenAI's API refuses is not passed on, one in capitals
		// is passed on in lower case, and a web address's scheme in
		// capitals still has its picture shown.
		{"details the provider refuses", "/v1/chat/completions", `{"model":"switchboard","messages":[{"role":"user","content":[` +
			`{"type":"text","text":"odd details"},` +
			`{"type":"image_url","image_url":{"url":"HTTPS://example.test/d.png","detail":"medium"}},` +
			`{"type":"image_url","image_url":{"url":"https://example.test/e.png","detail":"HIGH"}}]}]}`,
			"odd details", []string{"-", "high"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			post(c.path, c.body)
			if got := details(c.text); !slices.Equal(got, c.want) {
				t.Fatalf("the model was shown pictures of detail %q, want %q", got, c.want)
			}
		})
	}
}
