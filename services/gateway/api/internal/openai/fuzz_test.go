package openai

import (
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}],"stream":true}`,
		`{"messages":[{"role":"user","content":null}]}`,
		`{"messages":[{"role":"tool","content":"r"},{"role":"user","content":"q"},{"role":"assistant","content":"prefill"}]}`,
		`{"messages":[]}`, `[]`,
		"{\"messages\":[{\"role\":\"user\",\"content\":\"bad \xff\xfe utf-8\"}],\"user\":\"\xc3\"}", `null`, `{"messages":[{"role":"user","content":12}]}`, `{} {}`,
		`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]}]}`,
		`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:text/html;base64,PGI+"}}]}]}`,
		`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/gif;base64,@@"}}]}]}`,
		`{"n":2,"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"file","file":{"file_id":"f"}},{"type":"input_image","image_url":"https://x/y.png"}]}]}`,
		`{"messages":[{"role":"system","content":[{"type":"input_audio"}]},{"role":"assistant","content":[{"type":"refusal","refusal":"no"}]},{"role":"user","content":"q"}]}`,
		`{"temperature":NaN,"messages":[{"role":"system","content":[{"type":"text","text":-Infinity}]},{"role":"user","content":{"a":[Infinity,"NaN\"]"]}}]}`,
		`{"messages":[{"role":"user","content":NaN1}]}`, `{"messages":[{"role":"user","content":[{"Type":"text","TEXT":"a","text":"b"}]}]}`,
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
		if len(req.Context) > maxContext {
			t.Fatalf("%d context messages", len(req.Context))
		}
		checkPictures(t, req.Attachments)
		// Whatever is accepted can go on the bus: every string is UTF-8
		// (invalid bytes in the JSON became U+FFFD).
		ev := &eventsv1.MessageReceived{Text: req.Text, Attachments: req.Attachments, Context: req.Context,
			Source: &eventsv1.SessionSource{UserName: req.User}}
		if _, err := proto.Marshal(ev); err != nil {
			t.Fatalf("accepted request does not encode: %v", err)
		}
		if !utf8.ValidString(req.Model) {
			t.Fatalf("model %q is not UTF-8", req.Model)
		}
	})
}

// FuzzParseResponses checks the Responses API request parser: whatever it
// takes has an input, a context of known roles and pictures the gateway
// can use, and can go on the bus; whatever it refuses is a client error.
func FuzzParseResponses(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","input":"hi"}`,
		`{"input":"hi","instructions":"be brief","stream":true,"store":false}`,
		`{"input":[{"role":"developer","content":"d"},{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"output_text","text":"b"}]},{"type":"message","role":"user","content":[{"type":"input_text","text":"c"},{"type":"input_image","image_url":"https://x/y.png"}]}]}`,
		`{"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgo="}]}]}`,
		`{"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:text/html;base64,PGI+"}]}]}`,
		`{"input":[{"role":"user","content":[{"type":"input_image","file_id":"file-1"}]}]}`,
		`{"input":[{"role":"user","content":[{"type":"input_file","file_id":"file-1"}]}]}`,
		`{"input":[{"type":"function_call_output","call_id":"c","output":"4"}]}`,
		`{"input":["bare"],"conversation":{"id":"conv-1"},"metadata":{"k":"v"}}`,
		`{"input":"a","conversation":"c","previous_response_id":"resp_1"}`,
		`{"input":"a","tools":[{"type":"function","name":"f"}],"tool_choice":"required"}`,
		`{"input":"a","background":true,"text":{"format":{"type":"json_schema"}},"prompt":{"id":"p"}}`,
		"{\"input\":\"bad \xff utf-8\",\"user\":\"\xc3\",\"instructions\":\"\xfe\"}",
		`{"input":[]}`, `{"input":""}`, `{"input":12}`, `null`, `{} {}`, `{"input":[{"role":"system","content":"s"}]}`,
		`{"input":"a","truncation":"auto","conversation_history":[{"role":"tool","content":1.5e300},{"role":5,"content":null},{"role":"user","content":[true,{"type":"input_image","image_url":"https://x/y.png"}]}]}`,
		`{"input":[{"role":"user","content":[{"type":"input_text","text":-0.0},{"type":"text","text":false},{"type":"output_text","text":[1]}]}]}`,
		`{"input":"a","conversation_history":{}}`, `{"input":"a","conversation_history":0}`, `{"input":"a","conversation_history":[{"role":"user","content":{"a":1}}]}`,
		`{"input":[{"Role":"assistant","content":[{"type":"input_text","text":NaN}]},"q"],"top_p":-Infinity,"conversation_history":[{"role":"user","content":Infinity}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := ParseResponses(body)
		if err != nil {
			if _, ok := err.(*InvalidError); !ok {
				t.Fatalf("error %T is not an InvalidError", err)
			}
			return
		}
		if strings.TrimSpace(req.Text) == "" && len(req.Attachments) == 0 {
			t.Fatal("accepted a request without input")
		}
		if req.Conversation != "" && req.PreviousResponseID != "" {
			t.Fatal("accepted a conversation and a previous response")
		}
		for i, c := range req.Context {
			if c.Role != "system" && c.Role != "user" && c.Role != "assistant" {
				t.Fatalf("context role %q", c.Role)
			}
			if i == 0 && req.Instructions != "" && (c.Role != "system" || c.Content != req.Instructions) {
				t.Fatalf("context %v does not start with the instructions", c)
			}
		}
		if len(req.Context) > maxContext+1 {
			t.Fatalf("%d context messages", len(req.Context))
		}
		checkPictures(t, req.Attachments)
		ev := &eventsv1.MessageReceived{Text: req.Text, Attachments: req.Attachments, Context: req.Context,
			Source: &eventsv1.SessionSource{UserName: req.User}}
		if _, err := proto.Marshal(ev); err != nil {
			t.Fatalf("accepted request does not encode: %v", err)
		}
		for _, s := range []string{req.Model, req.Conversation, req.PreviousResponseID} {
			if !utf8.ValidString(s) {
				t.Fatalf("%q is not UTF-8", s)
			}
		}
	})
}

// checkPictures checks a request's pictures: at most maxImages taken,
// each a web address or an inline picture, then at most one that is not
// taken and says so.
func checkPictures(t *testing.T, atts []*eventsv1.Attachment) {
	t.Helper()
	for i, a := range atts {
		if i == maxImages {
			if len(atts) != maxImages+1 || a.GetLocation() != nil || a.GetUnavailable() == "" {
				t.Fatalf("%d pictures, the one past %d %v", len(atts), maxImages, a)
			}
			return
		}
		if u := a.GetUrl(); !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") && checkDataURL(u) != nil {
			t.Fatalf("attachment url %q", u)
		}
	}
}

func TestImageParts(t *testing.T) {
	t.Parallel()
	body := func(url string) []byte {
		return []byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"` + url + `"}}]}]}`)
	}
	tests := []struct {
		name   string
		url    string
		images int
		err    string
	}{
		{"web address", "https://example.com/cat.png", 1, ""},
		{"inline png", "data:image/png;base64,iVBORw0KGgo=", 1, ""},
		{"inline unpadded", "data:image/webp;base64,UklGRg", 1, ""},
		{"web address, scheme in capitals", "HTTPS://example.com/cat.png", 1, ""},
		{"another scheme is refused", "ftp://example.com/cat.png", 0, "http(s) URL"},
		{"a local file is refused", "file:///etc/cat.png", 0, "http(s) URL"},
		{"not a picture", "data:text/html;base64,PGI+", 0, "PNG, JPEG, GIF or WebP"},
		{"not base64", "data:image/png,rawbytes", 0, "must be base64"},
		{"broken base64", "data:image/png;base64,@@@@", 0, "base64 is invalid"},
		{"empty", "data:image/png;base64,", 0, "base64 is invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := Parse(body(tt.url))
			if tt.err != "" {
				inv, ok := err.(*InvalidError)
				if !ok || !strings.Contains(err.Error(), tt.err) || inv.Param != "messages[0].content" {
					t.Fatalf("error %v, want an invalid request saying %q about messages[0].content", err, tt.err)
				}
				if strings.Contains(tt.url, "://") && inv.Code != CodeInvalidImageURL {
					t.Fatalf("code %q, want %s", inv.Code, CodeInvalidImageURL)
				}
				return
			}
			if err != nil || len(req.Attachments) != tt.images {
				t.Fatalf("%d attachments, %v; want %d", attachmentsOf(req), err, tt.images)
			}
		})
	}
}

func attachmentsOf(c *Chat) int {
	if c == nil {
		return 0
	}
	return len(c.Attachments)
}

// A picture's URL is stripped as Hermes's _normalize_multimodal_content
// strips it (url_value.strip()) before it checks it and passes it on: a
// web address or a data: URL with blanks around it is taken, without
// them; one of blanks alone has no URL.
func TestImageURLStrippedAsHermes(t *testing.T) {
	t.Parallel()
	const png = "data:image/png;base64,iVBORw0KGgo="
	for _, c := range []struct {
		name, body, url string
	}{
		{"a chat picture", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":" https://x/a.png\n"}}]}]}`, "https://x/a.png"},
		{"an input picture", `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"\thttps://x/b.png \u001f"}]}]}`, "https://x/b.png"},
		{"an inline picture", `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"  ` + png + ` "}]}]}`, png},
		{"blanks alone", `{"input":[{"role":"user","content":[{"type":"input_text","text":"q"},{"type":"input_image","image_url":" \n "}]}]}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var in Input
			var err error
			if strings.Contains(c.body, `"messages"`) {
				var req *Chat
				if req, err = Parse([]byte(c.body)); req != nil {
					in = req.Input
				}
			} else {
				var req *Responses
				if req, err = ParseResponses([]byte(c.body)); req != nil {
					in = req.Input
				}
			}
			if c.url == "" {
				if _, ok := err.(*InvalidError); !ok {
					t.Fatalf("error %v, want a refusal", err)
				}
				return
			}
			if err != nil || len(in.Attachments) != 1 || in.Attachments[0].GetUrl() != c.url {
				t.Fatalf("%v, %v; want the picture %q", in.Attachments, err, c.url)
			}
		})
	}
}
