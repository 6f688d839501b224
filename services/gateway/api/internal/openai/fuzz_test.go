package openai

import (
	"strings"
	"testing"
)

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}],"stream":true}`,
		`{"messages":[{"role":"user","content":null}]}`,
		`{"messages":[{"role":"tool","content":"r"},{"role":"user","content":"q"},{"role":"assistant","content":"prefill"}]}`,
		`{"messages":[]}`, `[]`, `null`, `{"messages":[{"role":"user","content":12}]}`, `{} {}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := Parse(body)
		if err != nil {
			if _, ok := err.(*InvalidError); !ok {
				t.Fatalf("error %T is not errInvalid", err)
			}
			return
		}
		if strings.TrimSpace(req.Text) == "" && len(req.Attachments) == 0 {
			t.Fatal("accepted a request without input")
		}
		for _, c := range req.Context {
			if c.Role != "system" && c.Role != "user" && c.Role != "assistant" {
				t.Fatalf("context role %q", c.Role)
			}
		}
	})
}
