package matrix

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/matrix/matrixfake"
)

// The formatted body is safe to show: raw HTML in the model's text is
// escaped, and a link whose scheme runs code (javascript:, vbscript:,
// file:) loses its target and keeps its text; Markdown still renders.
func TestContentSanitised(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, text string
		want       []string // substrings of formatted_body
		not        []string
	}{
		{"markdown", "**bold** and `code`", []string{"<strong>bold</strong>", "<code>code</code>"}, nil},
		{"link", "[docs](https://example.org/a?b=1)", []string{`<a href="https://example.org/a?b=1">docs</a>`}, nil},
		{"raw html", `<img src=x onerror=alert(1)> hi`, []string{"&lt;img"}, []string{"<img"}},
		{"script", "<script>alert(1)</script>", []string{"&lt;script&gt;"}, []string{"<script"}},
		{"javascript link", "[click](javascript:alert(1))", []string{">click</a>"}, []string{"javascript:"}},
		{"javascript autolink", "[a](<javascript:alert(document.cookie)>)", []string{">a</a>"}, []string{"javascript:"}},
		{"vbscript link", "[v](vbscript:msgbox)", []string{">v</a>"}, []string{"vbscript:"}},
		{"file link", "[f](file:///etc/passwd)", []string{">f</a>"}, []string{"file:"}},
		// Clients load <img> only from mxc://: other images are links.
		{"https image", `![a cat](https://example.org/cat.png "Cat") here`, []string{`<a href="https://example.org/cat.png">a cat</a> here`}, []string{"<img"}},
		{"http image without alt", "see ![](http://example.org/c.png)", []string{`<a href="http://example.org/c.png">http://example.org/c.png</a>`}, []string{"<img"}},
		{"reference image", "![r][1] x\n\n[1]: https://example.org/r.png", []string{`<a href="https://example.org/r.png">r</a>`}, []string{"<img"}},
		{"image alt markup", "![**big** `cat`](https://example.org/c.png) x", []string{`<a href="https://example.org/c.png">big cat</a>`}, []string{"<img", "<strong"}},
		{"image alt escaped", `![<b>"x"</b>](https://example.org/c.png) x`, []string{`c.png">&quot;x&quot;</a>`}, []string{"<img", "<b>"}},
		{"image in a link", "**see** [![logo](https://example.org/l.png)](https://example.org)", []string{`<a href="https://example.org">logo</a>`}, []string{"<img", "l.png"}},
		{"mxc image", `**see** ![cat](mxc://example.org/abc "Cat")`, []string{`<img src="mxc://example.org/abc" alt="cat" title="Cat">`}, nil},
		{"data image", "**see** ![dot](data:image/png;base64,AAAA)", []string{"<strong>see</strong> dot"}, []string{"<img", "data:"}},
		{"javascript image", "**see** ![x](javascript:alert(1))", []string{"<strong>see</strong> x"}, []string{"<img", "javascript:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := content(tc.text, deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN)
			if c.Body != tc.text {
				t.Errorf("body %q, want the Markdown %q", c.Body, tc.text)
			}
			for _, w := range tc.want {
				if !strings.Contains(c.FormattedBody, w) {
					t.Errorf("formatted_body %q lacks %q", c.FormattedBody, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(strings.ToLower(c.FormattedBody), n) {
					t.Errorf("formatted_body %q has %q", c.FormattedBody, n)
				}
			}
		})
	}
}

// signedIn is a platform signed in to a fresh fake homeserver with the
// test rooms.
func signedIn(t *testing.T) (*Platform, *matrixfake.Fake) {
	t.Helper()
	f := matrixfake.New(bot, token)
	t.Cleanup(f.Close)
	fakeRooms(f)
	p, err := NewPlatform(testConfig(f), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SignIn(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p, f
}

// Every PUT that makes an event names a transaction id that is the same
// when the same operation is tried again after its answer was lost (the
// homeserver answers the first event, nothing is doubled) and differs
// between operations (none is taken for an earlier one and skipped).
func TestTransactionIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	target := &deliveryv1.Target{Platform: "matrix", Account: bot, ChatId: dmRm}
	turn := func(id string) context.Context { return platform.WithReactionTurn(ctx, id) }
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, p *Platform, f *matrixfake.Fake, msg string)
	}{
		{"a send retried after a lost answer posts once", func(t *testing.T, p *Platform, f *matrixfake.Fake, _ string) {
			req := &deliveryv1.SendRequested{IdempotencyKey: "turn-1:0", Target: target, Text: "hello",
				Attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, Location: &eventsv1.Attachment_Url{Url: "data:text/plain;base64,eA=="}, FileName: "a.txt"}}}
			f.LoseNextAnswers("send", 2)
			if _, err := p.Send(ctx, req); err == nil {
				t.Fatal("a lost answer was taken for a send")
			}
			if _, err := p.Send(ctx, req); err == nil {
				t.Fatal("a lost answer was taken for a send")
			}
			if _, err := p.Send(ctx, req); err != nil {
				t.Fatal(err)
			}
			if got := f.Sent(dmRm); len(got) != 2 || got[0].MsgType != "m.file" || got[1].Body != "hello" {
				t.Fatalf("sent %+v, want the file and the text once each", got)
			}
		}},
		{"two edits of one message under their own keys both show", func(t *testing.T, p *Platform, f *matrixfake.Fake, _ string) {
			sent, err := p.Send(ctx, &deliveryv1.SendRequested{IdempotencyKey: "turn-1:0", Target: target, Text: "a"})
			if err != nil {
				t.Fatal(err)
			}
			for i, text := range []string{"ab", "abc"} {
				edit := &deliveryv1.SendRequested{IdempotencyKey: fmt.Sprintf("turn-1:%d:s0", i+1), Target: target, Text: text, MessageId: sent}
				f.LoseNextAnswers("send", 1)
				if err := p.Edit(ctx, edit); err == nil {
					t.Fatal("a lost answer was taken for an edit")
				}
				if err := p.Edit(ctx, edit); err != nil {
					t.Fatal(err)
				}
			}
			if got := f.Sent(dmRm); len(got) != 1 || got[0].Body != "abc" || got[0].Edits != 2 {
				t.Fatalf("sent %+v, want one message edited twice to abc", got)
			}
		}},
		{"a delete retried after a lost answer redacts once", func(t *testing.T, p *Platform, f *matrixfake.Fake, _ string) {
			sent, err := p.Send(ctx, &deliveryv1.SendRequested{IdempotencyKey: "turn-1:0", Target: target, Text: "a"})
			if err != nil {
				t.Fatal(err)
			}
			del := &deliveryv1.SendRequested{IdempotencyKey: "turn-1:1", Target: target, MessageId: sent}
			f.LoseNextAnswers("redact", 1)
			if err := p.Delete(ctx, del); err == nil {
				t.Fatal("a lost answer was taken for a redaction")
			}
			if err := p.Delete(ctx, del); err != nil {
				t.Fatal(err)
			}
			if n := f.Redactions(dmRm, sent); n != 1 || len(f.Sent(dmRm)) != 0 {
				t.Fatalf("%d redactions, %d messages left; want 1 and 0", n, len(f.Sent(dmRm)))
			}
		}},
		{"a turn's reaction retried after a lost answer is made once", func(t *testing.T, p *Platform, f *matrixfake.Fake, msg string) {
			f.LoseNextAnswers("send", 1)
			if err := p.React(turn("t1"), target, msg, "👀"); err == nil {
				t.Fatal("a lost answer was taken for a reaction")
			}
			if err := p.React(turn("t1"), target, msg, "👀"); err != nil {
				t.Fatal(err)
			}
			if n := f.ReactionEvents(dmRm, msg); n != 1 {
				t.Fatalf("%d reaction events, want 1", n)
			}
		}},
		{"an unreact retried after a lost answer redacts once", func(t *testing.T, p *Platform, f *matrixfake.Fake, msg string) {
			if err := p.React(turn("t1"), target, msg, "👀"); err != nil {
				t.Fatal(err)
			}
			f.LoseNextAnswers("redact", 1)
			if err := p.Unreact(turn("t1"), target, msg, "👀"); err == nil {
				t.Fatal("a lost answer was taken for a redaction")
			}
			if err := p.Unreact(turn("t1"), target, msg, "👀"); err != nil {
				t.Fatal(err)
			}
			if got := f.Reactions(dmRm, msg); len(got) != 0 {
				t.Fatalf("reactions %q left", got)
			}
		}},
		{"a later turn's reaction after the first was taken off shows", func(t *testing.T, p *Platform, f *matrixfake.Fake, msg string) {
			for _, tn := range []string{"t1", "t2"} {
				if err := p.React(turn(tn), target, msg, "👀"); err != nil {
					t.Fatal(err)
				}
				if got := f.Reactions(dmRm, msg); len(got) != 1 || got[0] != "👀" {
					t.Fatalf("%s: reactions %q, want 👀", tn, got)
				}
				if err := p.Unreact(turn(tn), target, msg, "👀"); err != nil {
					t.Fatal(err)
				}
				if got := f.Reactions(dmRm, msg); len(got) != 0 {
					t.Fatalf("%s: reactions %q left", tn, got)
				}
			}
			if n := f.ReactionEvents(dmRm, msg); n != 2 {
				t.Fatalf("%d reaction events, want 2", n)
			}
		}},
		{"a reaction the message has is no error", func(t *testing.T, p *Platform, f *matrixfake.Fake, msg string) {
			for _, tn := range []string{"t1", "t2"} {
				if err := p.React(turn(tn), target, msg, "✅"); err != nil {
					t.Fatalf("%s: %v", tn, err)
				}
			}
			if got := f.Reactions(dmRm, msg); len(got) != 1 {
				t.Fatalf("reactions %q, want one ✅", got)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, f := signedIn(t)
			tc.run(t, p, f, f.Message(dmRm, ann, "hi"))
		})
	}
}

// FuzzContent: whatever Markdown the model writes, the formatted body
// has no <img> off the media repository, no script, and no link or
// image whose target runs code.
func FuzzContent(f *testing.F) {
	for _, s := range []string{"![a](https://e.org/a.png)", "[![b](http://e.org/b.png)](https://e.org)", "![c](mxc://e.org/c)",
		"<img src=x>", "![d](javascript:alert(1))", "![e][1]\n\n[1]: http://e.org/e.png", "**x** `y`"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		c := content(text, deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN)
		low := strings.ToLower(c.FormattedBody)
		for rest := low; ; {
			i := strings.Index(rest, "<img")
			if i < 0 {
				break
			}
			rest = rest[i+len("<img"):]
			if !strings.HasPrefix(rest, ` src="mxc://`) {
				t.Fatalf("formatted_body %q has an <img> off mxc://", c.FormattedBody)
			}
		}
		for _, bad := range []string{"<script", `href="javascript:`, `href="vbscript:`, `src="javascript:`} {
			if strings.Contains(low, bad) {
				t.Fatalf("formatted_body %q has %s", c.FormattedBody, bad)
			}
		}
	})
}

// A replica that did not make the bot's reaction finds it among the
// message's annotations however many others reacted after it: the
// homeserver answers /relations a page at a time (Synapse: the 5 newest
// unless asked for more).
func TestUnreactFindsReactionBeyondFirstPage(t *testing.T) {
	t.Parallel()
	ctx := platform.WithReactionTurn(context.Background(), "t1")
	target := &deliveryv1.Target{Platform: "matrix", Account: bot, ChatId: team}
	for _, others := range []int{0, 4, 5, 12, 230} {
		t.Run(fmt.Sprint(others, " reactions after the bot's"), func(t *testing.T) {
			t.Parallel()
			p, f := signedIn(t)
			msg := f.Message(team, ann, "hi")
			if err := p.React(ctx, target, msg, "👀"); err != nil {
				t.Fatal(err)
			}
			for i := range others {
				f.Inject(team, fmt.Sprintf("@u%d:%s", i, matrixfake.Server), "m.reaction", map[string]any{
					"m.relates_to": map[string]any{"rel_type": "m.annotation", "event_id": msg, "key": "👍"}})
			}
			other, err := NewPlatform(testConfig(f), slog.New(slog.DiscardHandler), nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := other.SignIn(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := other.Unreact(ctx, target, msg, "👀"); err != nil {
				t.Fatal(err)
			}
			if got := f.Reactions(team, msg); len(got) != 0 {
				t.Fatalf("the bot's reactions %q left on the message", got)
			}
		})
	}
}
