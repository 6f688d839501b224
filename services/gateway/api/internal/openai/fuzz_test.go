package openai

import (
	"errors"
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
		`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"HTTPS://x/y.png","detail":"LOW"}},{"type":"input_image","image_url":"Http://x/z.png","detail":"medium"}]}]}`,
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
		// The model is given no detail its provider refuses.
		switch d := a.GetDetail(); d {
		case "", "auto", "low", "high", "original":
		default:
			t.Fatalf("picture detail %q", d)
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
		{"not a picture", "data:text/html;base64,PGI+", 0, "Only image data URLs are supported."},
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

// A web address whose scheme is in capitals (HTTPS://, Http://), which
// Hermes takes as it lowercases the URL to read its scheme, is passed on
// with its scheme in lower case (the same address: a scheme has no case),
// as the worker shows the model the web addresses an API client sends by
// their https:// or http:// prefix; passed on as it came, the picture
// would be taken and never shown. The rest of the URL is left as it came.
func TestImageURLSchemeInAnyCase(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, api, url, want string
	}{
		{name: "HTTPS", url: "HTTPS://Example.com/Cat.PNG", want: "https://Example.com/Cat.PNG"},
		{name: "Http", api: "responses", url: "Http://x/A.png?Q=1", want: "http://x/A.png?Q=1"},
		{name: "hTTps, stripped", api: "run", url: " hTTps://x/a.png ", want: "https://x/a.png"},
		{name: "in lower case", api: "responses", url: "https://X/a.png", want: "https://X/a.png"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			body, _ := pictureBody(c.api, c.url)
			in, err := parseInput(c.api, body)
			if err != nil || len(in.Attachments) != 1 || in.Attachments[0].GetUrl() != c.want {
				t.Fatalf("%v, %v; want the picture %q", in.Attachments, err, c.want)
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

// A picture Hermes's _normalize_multimodal_content refuses is refused
// with its code and message (its _multimodal_validation_error): no URL,
// or one of blanks or no string, is invalid_image_url "Image parts must
// include a non-empty image URL."; a URL of another scheme
// invalid_image_url too; a detail (the image_url object's, else the
// part's) that is given and is no non-empty string invalid_content_part,
// checked after the URL. A detail that is null is none; one taken is
// passed on stripped, as Hermes passes it on to the model.
func TestPictureRefusalsAsHermes(t *testing.T) {
	t.Parallel()
	const (
		noURL     = "Image parts must include a non-empty image URL."
		badScheme = "Image inputs must use http(s) URLs or data:image/... URLs."
		badDetail = "Image detail must be a non-empty string when provided."
		// Hermes's code of a malformed part.
		contentPart = "invalid_content_part"
	)
	chat := func(part string) string {
		return `{"messages":[{"role":"user","content":[{"type":"text","text":"q"},` + part + `]}]}`
	}
	input := func(part string) string {
		return `{"input":[{"role":"user","content":[{"type":"input_text","text":"q"},` + part + `]}]}`
	}
	for _, c := range []struct {
		name, api, body  string
		code, msg, param string // the refusal's; none: taken
		detail           string // a picture taken: its detail, as the model gets it
	}{
		{name: "an image_url object without url", body: chat(`{"type":"image_url","image_url":{}}`), code: CodeInvalidImageURL, msg: noURL},
		{name: "an empty url", body: chat(`{"type":"image_url","image_url":{"url":""}}`), code: CodeInvalidImageURL, msg: noURL},
		{name: "a url of blanks", body: chat(`{"type":"image_url","image_url":{"url":" \u001f "}}`), code: CodeInvalidImageURL, msg: noURL},
		{name: "a url that is no string", body: chat(`{"type":"image_url","image_url":{"url":5}}`), code: CodeInvalidImageURL, msg: noURL},
		{name: "an image_url that is a number", body: chat(`{"type":"image_url","image_url":5}`), code: CodeInvalidImageURL, msg: noURL},
		{name: "an image_url that is an array", body: chat(`{"type":"image_url","image_url":["https://x/a.png"]}`), code: CodeInvalidImageURL, msg: noURL},
		{name: "a part without image_url", body: chat(`{"type":"image_url"}`), code: CodeInvalidImageURL, msg: noURL},
		{name: "an input_image without image_url", api: "responses", body: input(`{"type":"input_image"}`), code: CodeInvalidImageURL, msg: noURL, param: "input[0].content"},
		{name: "an input_image with a null image_url", api: "responses", body: input(`{"type":"input_image","image_url":null}`), code: CodeInvalidImageURL, msg: noURL, param: "input[0].content"},
		{name: "an ftp URL", body: chat(`{"type":"image_url","image_url":{"url":"ftp://x/a.png"}}`), code: CodeInvalidImageURL, msg: badScheme},
		{name: "no scheme", api: "run", body: input(`{"type":"input_image","image_url":"a.png"}`), code: CodeInvalidImageURL, msg: badScheme, param: "input[0].content"},
		{name: "an empty detail", body: chat(`{"type":"image_url","image_url":{"url":"https://x/a.png","detail":""}}`), code: contentPart, msg: badDetail},
		{name: "a detail of blanks", body: chat(`{"type":"image_url","image_url":{"url":"https://x/a.png","detail":" \u001c"}}`), code: contentPart, msg: badDetail},
		{name: "a detail that is no string", body: chat(`{"type":"image_url","image_url":{"url":"https://x/a.png","detail":1}}`), code: contentPart, msg: badDetail},
		{name: "a part's detail", api: "responses", body: input(`{"type":"input_image","image_url":"https://x/a.png","detail":false}`), code: contentPart, msg: badDetail, param: "input[0].content"},
		{name: "a part's detail beside an image_url object", body: chat(`{"type":"image_url","image_url":{"url":"https://x/a.png"},"detail":[]}`), code: contentPart, msg: badDetail},
		{name: "a history entry's detail", api: "responses", body: `{"input":"q","conversation_history":[{"role":"user","content":[{"type":"input_image","image_url":"https://x/a.png","detail":""}]}]}`,
			code: contentPart, msg: badDetail, param: "conversation_history[0].content"},
		{name: "the URL is checked before the detail", body: chat(`{"type":"image_url","image_url":{"url":"","detail":""}}`), code: CodeInvalidImageURL, msg: noURL},
		{name: "a detail", body: chat(`{"type":"image_url","image_url":{"url":"https://x/a.png","detail":"low"}}`), detail: "low"},
		{name: "a null detail", body: chat(`{"type":"image_url","image_url":{"url":"https://x/a.png","detail":null}}`)},
		{name: "the object's null detail hides the part's", body: chat(`{"type":"image_url","image_url":{"url":"https://x/a.png","detail":null},"detail":""}`)},
		{name: "a part's good detail", api: "responses", body: input(`{"type":"input_image","image_url":"https://x/a.png","detail":" auto "}`), detail: "auto"},
		{name: "the object's detail over the part's", api: "run", body: input(`{"type":"input_image","image_url":{"url":"https://x/a.png","detail":"high\u001f"},"detail":"low"}`), detail: "high"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			in, err := parseInput(c.api, c.body)
			if c.code == "" {
				if err != nil || len(in.Attachments) != 1 || in.Attachments[0].GetDetail() != c.detail {
					t.Fatalf("%v, %v; want one picture of detail %q", in.Attachments, err, c.detail)
				}
				return
			}
			param := c.param
			if param == "" {
				param = "messages[0].content"
			}
			var inv *InvalidError
			if !errors.As(err, &inv) || inv.Code != c.code || inv.Msg != c.msg || inv.Param != param {
				t.Fatalf("error %#v, want %s %q at %s", err, c.code, c.msg, param)
			}
		})
	}
}

// A picture's detail that Hermes takes (a string not blank) is passed on
// to the model only when it is one OpenAI's API takes — auto, low, high
// or original, in any case and spacing, passed on in lower case. Another
// one (medium, a typo, a long text) Hermes passes on and OpenAI refuses,
// and with it the whole turn: the worker would then ask again without
// the pictures, and the agent answer without the picture the client
// sent. It is taken, as Hermes takes it, and not passed on: the model
// looks at the picture as it does without a detail (auto).
func TestPictureDetailPassedOn(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, api, part, detail string
	}{
		{name: "low", part: `{"type":"image_url","image_url":{"url":"https://x/a.png","detail":"low"}}`, detail: "low"},
		{name: "high, spaced", api: "responses", part: `{"type":"input_image","image_url":"https://x/a.png","detail":" high\n"}`, detail: "high"},
		{name: "auto", api: "run", part: `{"type":"input_image","image_url":"https://x/a.png","detail":"auto"}`, detail: "auto"},
		{name: "original", api: "responses", part: `{"type":"input_image","image_url":"https://x/a.png","detail":"original"}`, detail: "original"},
		{name: "in capitals", part: `{"type":"image_url","image_url":{"url":"https://x/a.png","detail":"LOW"}}`, detail: "low"},
		{name: "medium", api: "responses", part: `{"type":"input_image","image_url":"https://x/a.png","detail":"medium"}`},
		{name: "a typo", api: "run", part: `{"type":"image_url","image_url":{"url":"https://x/a.png","detail":"hgih"}}`},
		{name: "a sentence", part: `{"type":"image_url","image_url":{"url":"https://x/a.png"},"detail":"look at the cat closely"}`},
		{name: "long", api: "responses", part: `{"type":"input_image","image_url":"https://x/a.png","detail":"` + strings.Repeat("high", 10000) + `"}`},
		{name: "a word that holds one", part: `{"type":"image_url","image_url":{"url":"https://x/a.png","detail":"highest"}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			body := `{"input":[{"role":"user","content":[{"type":"input_text","text":"q"},` + c.part + `]}]}`
			if c.api == "" {
				body = `{"messages":[{"role":"user","content":[{"type":"text","text":"q"},` + c.part + `]}]}`
			}
			in, err := parseInput(c.api, body)
			if err != nil || len(in.Attachments) != 1 || in.Attachments[0].GetDetail() != c.detail {
				t.Fatalf("%v, %v; want one picture of detail %q", in.Attachments, err, c.detail)
			}
		})
	}
}

// A content part's file_id, a string or not, is answered as Hermes's
// _normalize_multimodal_content answers its part, which never reads
// file_id: a picture without a URL is invalid_image_url "Image parts
// must include a non-empty image URL.", one with a URL is taken, a text
// part is its text, a file part is refused as a file part is; not the
// invalid_request of a malformed part, nor, for a picture by a file's
// id, a refusal of uploaded files in other words than Hermes's.
func TestFileIDAsHermes(t *testing.T) {
	t.Parallel()
	const noURL = "Image parts must include a non-empty image URL."
	for _, c := range []struct {
		name, api, part string
		// code, msg: the refusal's (param: the content's); none: taken,
		// with text and pictures.
		code, msg string
		text      string
		pictures  int
	}{
		{name: "a number beside no URL", part: `{"type":"image_url","file_id":5}`, code: CodeInvalidImageURL, msg: noURL},
		{name: "an object beside no URL", api: "responses", part: `{"type":"input_image","file_id":{"id":"file-1"}}`, code: CodeInvalidImageURL, msg: noURL},
		{name: "null beside no URL", api: "run", part: `{"type":"input_image","file_id":null}`, code: CodeInvalidImageURL, msg: noURL},
		{name: "a file's id, no URL", part: `{"type":"image_url","file_id":"file-1"}`, code: CodeInvalidImageURL, msg: noURL},
		{name: "a file's id, no URL, in a Responses request", api: "responses", part: `{"type":"input_image","file_id":"file-1","detail":"low"}`, code: CodeInvalidImageURL, msg: noURL},
		{name: "a file's id, an empty URL", api: "run", part: `{"type":"input_image","image_url":"","file_id":"file-1"}`, code: CodeInvalidImageURL, msg: noURL},
		{name: "a file's id beside a URL", api: "responses", part: `{"type":"input_image","image_url":"https://x/a.png","file_id":"file-1"}`, text: "q", pictures: 1},
		{name: "false beside a URL", api: "responses", part: `{"type":"input_image","image_url":"https://x/a.png","file_id":false}`, text: "q", pictures: 1},
		{name: "an array on a text part", part: `{"type":"text","text":"t","file_id":[1]}`, text: "q\nt"},
		{name: "a number on a file part", api: "run", part: `{"type":"input_file","file_id":7}`, code: CodeUnsupportedContent,
			msg: "Inline image inputs are supported, but uploaded files and document inputs are not supported on this endpoint."},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			body := `{"input":[{"role":"user","content":[{"type":"input_text","text":"q"},` + c.part + `]}]}`
			param := "input[0].content"
			if c.api == "" {
				body = `{"messages":[{"role":"user","content":[{"type":"text","text":"q"},` + c.part + `]}]}`
				param = "messages[0].content"
			}
			if c.code == CodeUnsupportedContent {
				param += "[1].type"
			}
			in, err := parseInput(c.api, body)
			if c.code == "" {
				if err != nil || in.Text != c.text || len(in.Attachments) != c.pictures {
					t.Fatalf("%q, %v, %v; want %q and %d pictures", in.Text, in.Attachments, err, c.text, c.pictures)
				}
				return
			}
			var inv *InvalidError
			if !errors.As(err, &inv) || inv.Code != c.code || inv.Msg != c.msg || inv.Param != param {
				t.Fatalf("error %#v, want %s %q at %s", err, c.code, c.msg, param)
			}
		})
	}
}

// A data: URL's scheme and media type are read in any case, as Hermes
// lowercases the URL before it compares it with "data:image/"; the
// picture is passed on with them in lower case (and its base64 as it
// came), as the runner finds the inline pictures it keeps (data:) and
// as the attachment store and the model take a media type.
func TestDataURLInAnyCaseAsHermes(t *testing.T) {
	t.Parallel()
	const payload = "iVBORw0KGgo="
	for _, c := range []struct{ name, api, url string }{
		{"an upper-case scheme", "", "DATA:image/png;base64," + payload},
		{"an upper-case media type", "responses", "data:IMAGE/PNG;base64," + payload},
		{"an upper-case encoding", "run", "Data:Image/Png;BASE64," + payload},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			body := `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"` + c.url + `"}]}]}`
			if c.api == "" {
				body = `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + c.url + `"}}]}]}`
			}
			in, err := parseInput(c.api, body)
			if want := "data:image/png;base64," + payload; err != nil || len(in.Attachments) != 1 || in.Attachments[0].GetUrl() != want {
				t.Fatalf("%v, %v; want the picture %s", in.Attachments, err, want)
			}
		})
	}
}

// A data: URL that is no picture (its media type, in any case, not
// image/..., or no comma before its data) is refused as Hermes's
// _normalize_multimodal_content refuses it: unsupported_content_type,
// in its words, at the content.
func TestNonPictureDataURLsAsHermes(t *testing.T) {
	t.Parallel()
	const msg = "Only image data URLs are supported. Non-image data payloads are not supported."
	for _, c := range []struct{ name, api, url string }{
		{"plain text", "", "data:text/plain,hello"},
		{"a pdf", "responses", "data:application/pdf;base64,JVBERi0="},
		{"html in capitals", "run", "DATA:TEXT/HTML;BASE64,PGI+"},
		{"no media type", "", "data:,hello"},
		{"a picture without a comma", "responses", "data:image/png;base64"},
		{"nothing after the scheme", "", "data:"},
		{"a media type that only begins as a picture's", "run", "data:imagex/png;base64,iVBORw0KGgo="},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			body, param := pictureBody(c.api, c.url)
			_, err := parseInput(c.api, body)
			var inv *InvalidError
			if !errors.As(err, &inv) || inv.Code != CodeUnsupportedContent || inv.Msg != msg || inv.Param != param {
				t.Fatalf("error %#v, want %s %q at %s", err, CodeUnsupportedContent, msg, param)
			}
		})
	}
}

// pictureBody is a request of api ("" the chat API) asking about a
// picture at url, and the param a refusal of its content names.
func pictureBody(api, url string) (body, param string) {
	if api == "" {
		return `{"messages":[{"role":"user","content":[{"type":"text","text":"q"},{"type":"image_url","image_url":{"url":"` + url + `"}}]}]}`, "messages[0].content"
	}
	return `{"input":[{"role":"user","content":[{"type":"input_text","text":"q"},{"type":"input_image","image_url":"` + url + `"}]}]}`, "input[0].content"
}

// A data: URL of a picture is taken as Hermes takes it (any
// data:image/... with a comma) where the picture reaches the model: its
// data in base64 or percent-encoded (the runner decodes either into the
// attachment store, RFC 2397, and the worker sends the model the bytes),
// with parameters beside base64. Two refusals Hermes does not make are
// kept, as their picture would never be shown:
//   - a format other than PNG, JPEG, GIF, WebP, BMP and TIFF (SVG,
//     HEIC): OpenAI's and Anthropic's APIs take only the first four, and
//     the worker sends only these, making a BMP or TIFF into a PNG or
//     JPEG (pkg/picture); it neither reads nor sends any other (worker
//     readPicture: errPictureFormat). Taken, the picture would be kept
//     and never shown, and the client answered as if it had sent none;
//     Hermes passes it on and its turn fails at the provider. So a 400
//     up front, unsupported_content_type, naming the formats taken.
//   - data that does not decode (bad base64 or percent-escape) or is
//     empty: nothing to keep. invalid_image_url, Hermes's code of a
//     picture URL it cannot use.
func TestImageDataURLFormats(t *testing.T) {
	t.Parallel()
	const badData = "The image data URL's data is neither valid base64 nor valid percent-encoding."
	for _, c := range []struct {
		name, api, url string
		code, msg      string // the refusal's; none: taken
	}{
		{name: "percent-encoded", url: "data:image/png,%89PNG%0D%0A%1A%0A"},
		{name: "raw bytes, not base64", api: "responses", url: "data:image/gif,GIF89a"},
		{name: "a parameter before base64", api: "run", url: "data:image/png;name=a.png;base64,iVBORw0KGgo="},
		{name: "jpeg", url: "data:image/jpeg;base64,/9j/4AAQ"},
		{name: "bmp", url: "data:image/bmp;base64,Qk0="}, // the worker shows it as a PNG or JPEG
		{name: "bmp, the old name", api: "run", url: "data:image/x-ms-bmp;base64,Qk0="},
		{name: "tiff", api: "responses", url: "data:image/tiff;base64,SUkqAA=="},
		{name: "svg, not base64", api: "responses", url: "data:image/svg+xml,%3Csvg%2F%3E", code: CodeUnsupportedContent,
			msg: "Only PNG, JPEG, GIF, WebP, BMP and TIFF image data URLs are supported, not image/svg+xml."},
		{name: "heic", url: "data:image/heic;base64,AAAAGGZ0eXBoZWlj", code: CodeUnsupportedContent,
			msg: "Only PNG, JPEG, GIF, WebP, BMP and TIFF image data URLs are supported, not image/heic."},
		{name: "no subtype", api: "run", url: "data:image/;base64,iVBORw0KGgo=", code: CodeUnsupportedContent,
			msg: "Only PNG, JPEG, GIF, WebP, BMP and TIFF image data URLs are supported, not image/."},
		{name: "broken base64", url: "data:image/png;base64,@@@@", code: CodeInvalidImageURL, msg: badData},
		{name: "a broken percent-escape", api: "responses", url: "data:image/png,%zz", code: CodeInvalidImageURL, msg: badData},
		{name: "no data", url: "data:image/png;base64,", code: CodeInvalidImageURL, msg: "The image data URL holds no data."},
		{name: "no data, not base64", api: "run", url: "data:image/webp,", code: CodeInvalidImageURL, msg: "The image data URL holds no data."},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			body, param := pictureBody(c.api, c.url)
			in, err := parseInput(c.api, body)
			if c.code == "" {
				if err != nil || len(in.Attachments) != 1 || in.Attachments[0].GetUrl() != c.url {
					t.Fatalf("%v, %v; want the picture %q", in.Attachments, err, c.url)
				}
				return
			}
			var inv *InvalidError
			if !errors.As(err, &inv) || inv.Code != c.code || inv.Msg != c.msg || inv.Param != param {
				t.Fatalf("error %#v, want %s %q at %s", err, c.code, c.msg, param)
			}
		})
	}
}

// A file part (type file or input_file, in any case and spacing, as
// Hermes reads a type: str(type).strip().lower()), by file_id, file_data
// or a file object, is refused as Hermes's _normalize_multimodal_content
// refuses it: 400 unsupported_content_type, in its words, which tell the
// client that pictures can be sent inline and files cannot, rather than
// the words of a type it does not know.
func TestFilePartsAsHermes(t *testing.T) {
	t.Parallel()
	const msg = "Inline image inputs are supported, but uploaded files and document inputs are not supported on this endpoint."
	for _, c := range []struct {
		name, api, part string
	}{
		{name: "a chat completion's file", part: `{"type":"file","file":{"file_id":"file-1"}}`},
		{name: "a chat completion's file data", api: "responses", part: `{"type":"file","file":{"file_data":"data:application/pdf;base64,JVBE","filename":"a.pdf"}}`},
		{name: "an input_file by id", api: "responses", part: `{"type":"input_file","file_id":"file-1"}`},
		{name: "an input_file by its data", part: `{"type":"input_file","file_data":"JVBE","filename":"a.pdf"}`},
		{name: "an input_file by URL", api: "run", part: `{"type":"input_file","file_url":"https://x/a.pdf"}`},
		{name: "in capitals, spaced", part: `{"type":" Input_File ","file_id":"f"}`},
		{name: "FILE", api: "run", part: `{"type":"FILE"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			partRefused(t, c.api, c.part, msg)
		})
	}
}

// partRefused checks that part, the second of a user message's content
// after a text part (in api's request: "" a chat completion's), is
// refused as unsupported_content_type with msg, naming its type.
func partRefused(t *testing.T, api, part, msg string) {
	t.Helper()
	body := `{"input":[{"role":"user","content":[{"type":"input_text","text":"q"},` + part + `]}]}`
	param := "input[0].content[1].type"
	if api == "" {
		body = `{"messages":[{"role":"user","content":[{"type":"text","text":"q"},` + part + `]}]}`
		param = "messages[0].content[1].type"
	}
	_, err := parseInput(api, body)
	var inv *InvalidError
	if !errors.As(err, &inv) || inv.Code != CodeUnsupportedContent || inv.Msg != msg || inv.Param != param {
		t.Fatalf("error %#v, want %s %q at %s", err, CodeUnsupportedContent, msg, param)
	}
}

// A content part whose type is none Hermes takes (text, input_text,
// output_text, image_url, input_image, in any case and spacing) — one
// of another name, or no string at all: a number, a boolean, null, an
// array, an object, or absent — is refused as Hermes's
// _normalize_multimodal_content refuses it (str(type), then unknown):
// unsupported_content_type, in its words, naming the type by its Python
// repr.
func TestPartTypeAsHermes(t *testing.T) {
	t.Parallel()
	msg := func(repr string) string {
		return "Unsupported content part type " + repr + ". Only text and image_url/input_image parts are supported."
	}
	for _, c := range []struct {
		name, api, part, repr string
	}{
		{name: "a number", part: `{"type":5,"text":"a"}`, repr: "5"},
		{name: "zero", api: "responses", part: `{"type":0,"text":"a"}`, repr: "0"},
		{name: "a float", api: "run", part: `{"type":1.50,"text":"a"}`, repr: "1.5"},
		{name: "true", part: `{"type":true,"text":"a"}`, repr: "True"},
		{name: "false", api: "responses", part: `{"type":false,"text":"a"}`, repr: "False"},
		{name: "null", part: `{"type":null,"text":"a"}`, repr: "None"},
		{name: "absent", api: "run", part: `{"text":"a"}`, repr: "None"},
		{name: "an array of a good type", part: `{"type":["text"],"text":"a"}`, repr: "['text']"},
		{name: "an object", api: "responses", part: `{"type":{"k":1},"text":"a"}`, repr: "{'k': 1}"},
		{name: "another name", part: `{"type":"input_audio","input_audio":{}}`, repr: "'input_audio'"},
		{name: "an empty name", api: "run", part: `{"type":"","text":"a"}`, repr: "''"},
		{name: "a name with a quote", api: "responses", part: `{"type":"it's","text":"a"}`, repr: `"it's"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			partRefused(t, c.api, c.part, msg(c.repr))
		})
	}
}
