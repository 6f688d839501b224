package delivery_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/services/delivery"
)

// imagesConfig is testConfig with native images on the test platforms.
func imagesConfig() delivery.Config {
	cfg := testConfig()
	cfg.Platforms["test"] = delivery.Platform{Images: delivery.ImagesNative}
	cfg.Platforms["stream"] = delivery.Platform{Streaming: delivery.StreamEdit, Images: delivery.ImagesNative}
	return cfg
}

const imageAnswer = "Here is the chart:\n\n![Sales](https://cdn.example.test/sales.png)\n\nAnd the logo <img src=\"https://cdn.example.test/logo\">"

// The images a final answer references go after its text as image
// sends, taken out of the text, as Hermes's gateway sends them; a retry
// of an image (a gateway that failed once) and a redelivered final
// event post each image once: their keys are the final event's.
func TestAnswerImagesSentAfterTextOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.gw.setBehaviour(func(req *deliveryv1.SendRequested, try int) behaviour {
		if req.GetIdempotencyKey() == "t1:1:img0" && try == 1 {
			return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, Error: "platform busy"}}
		}
		return behaviour{}
	})
	e.start(t, imagesConfig(), "a")
	e.publish(t, event("t1", 1, "s1", final(imageAnswer)))
	eventually(t, e.clock, 0, "text and images", func() bool { return len(e.gw.sends()) == 3 })
	// The same final again (a redelivery after a crash before the ack).
	if _, err := e.bus.Publish(context.Background(), e.bus.Topology().ReplySubject("s1"), "reply:t1:1:again", event("t1", 1, "s1", final(imageAnswer))); err != nil {
		t.Fatal(err)
	}
	e.consumed(t, "s1")
	eventually(t, e.clock, 0, "rows sent", func() bool {
		return rowState(t, e.db, "t1:1:img0") == "sent" && rowState(t, e.db, "t1:1:img1") == "sent"
	})
	sent := e.gw.sends()
	if len(sent) != 3 {
		t.Fatalf("posted %d messages, want the text and 2 images once each", len(sent))
	}
	want := []struct {
		key, text, url, caption string
		final                   bool
	}{
		{"t1:1:0", "Here is the chart:\n\nAnd the logo", "", "", true},
		{"t1:1:img0", "", "https://cdn.example.test/sales.png", "Sales", false},
		{"t1:1:img1", "", "https://cdn.example.test/logo", "", false},
	}
	for i, w := range want {
		r := sent[i].Req
		var url, caption string
		if a := r.GetAttachments(); len(a) == 1 {
			url, caption = a[0].GetUrl(), a[0].GetCaption()
		}
		if r.GetIdempotencyKey() != w.key || r.GetText() != w.text || url != w.url || caption != w.caption || r.GetFinal() != w.final {
			t.Errorf("send %d: key %s text %q image %q caption %q final %v; want %+v", i, r.GetIdempotencyKey(), r.GetText(), url, caption, r.GetFinal(), w)
		}
	}
}

// An image the gateway cannot send (its URL answers 404, or the egress
// guard refuses its address) is given up, and its link goes to the chat
// in its place: the answer loses nothing, and no "delivery failed"
// notice follows, the text having arrived. When the answer was only the
// image, the link is the turn's final message.
func TestAnswerImageThatFailsGoesAsLink(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		name, text, wantText string
		linkFinal            bool
	}{
		{"after text", "Chart: ![Sales](https://cdn.example.test/gone.png)", "Chart:", false},
		{"image only", "![Sales](https://cdn.example.test/gone.png)", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.gw.setBehaviour(func(req *deliveryv1.SendRequested, _ int) behaviour {
				if len(req.GetAttachments()) > 0 {
					return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, Error: "download attachment: 404 Not Found"}}
				}
				return refuseBlank(req, 0)
			})
			e.start(t, imagesConfig(), "a")
			turn := fmt.Sprint("t", i)
			e.publish(t, event(turn, 1, "s1", final(tc.text)))
			link := turn + ":1:img0:link"
			// The link takes the image's row (its place in the chat).
			eventually(t, e.clock, 0, "the link", func() bool { return rowState(t, e.db, turn+":1:img0") == "sent" })
			e.consumed(t, "s1")
			var texts []string
			var last *deliveryv1.SendRequested
			for _, c := range e.gw.sends() {
				texts = append(texts, c.Req.GetText())
				if c.Key == link {
					last = c.Req
				}
			}
			want := []string{"Sales\nhttps://cdn.example.test/gone.png"}
			if tc.wantText != "" {
				want = append([]string{tc.wantText}, want...)
			}
			if fmt.Sprint(texts) != fmt.Sprint(want) {
				t.Fatalf("posted %q, want %q", texts, want)
			}
			if last.GetFinal() != tc.linkFinal {
				t.Fatalf("link final=%v, want %v", last.GetFinal(), tc.linkFinal)
			}
		})
	}
}

// An image given up for good (the platform refused it) goes as its link
// even when the write that gives up the image fails: the database
// refuses it, or the connection dies (as it does with its replica).
// Giving up the image and queueing its link are one write, the link put
// in the image's row: it happens whole or not at all, and when not, the
// image's row is still claimed, taken again once its lease runs out,
// refused again, and the link takes its place then. A link queued as a
// row of its own, a second write after the image's dead letter, fails
// too here (it is lost when that write fails or the replica dies in
// between). The link reaches the chat exactly once, the image never, and
// no row is left a dead letter without its link. The failures are Postgres's
// own: a trigger on the outbox that fires once for each kind of write.
func TestGivenUpImageLinkSurvivesAFailedWrite(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		name, failure string
	}{
		{"the statement fails", `RAISE EXCEPTION 'injected: the link''s write refused'`},
		{"the connection dies", `PERFORM pg_terminate_backend(pg_backend_pid())`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := context.Background()
			for _, stmt := range []string{
				`CREATE SEQUENCE replace_failures`,
				`CREATE SEQUENCE insert_failures`,
				`CREATE FUNCTION fail_link_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'UPDATE' THEN
		IF NEW.last_error LIKE 'image given up%' AND OLD.last_error NOT LIKE 'image given up%' THEN
			IF nextval('replace_failures') = 1 THEN
				` + tc.failure + `;
			END IF;
		END IF;
	ELSIF NEW.idempotency_key LIKE '%:link' THEN
		IF nextval('insert_failures') = 1 THEN
			` + tc.failure + `;
		END IF;
	END IF;
	RETURN NEW;
END $$`,
				`CREATE TRIGGER fail_link_once BEFORE INSERT OR UPDATE ON delivery_outbox
	FOR EACH ROW EXECUTE FUNCTION fail_link_once()`,
			} {
				if _, err := e.db.Exec(ctx, stmt); err != nil {
					t.Fatal(err)
				}
			}
			e.gw.setBehaviour(func(req *deliveryv1.SendRequested, _ int) behaviour {
				if len(req.GetAttachments()) > 0 {
					return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, Error: "download attachment: 404 Not Found"}}
				}
				return behaviour{}
			})
			cfg := imagesConfig()
			cfg.TTL = time.Hour // the image is given up, it does not expire
			e.start(t, cfg, "a")
			turn := fmt.Sprint("g", i)
			e.publish(t, event(turn, 1, "s1", final("Chart: ![Sales](https://cdn.example.test/gone.png)")))
			img, link := turn+":1:img0", turn+":1:img0:link"
			// The clock moves by a quarter of the lease a round: a row
			// whose sender could not record its outcome is taken again.
			eventually(t, e.clock, 250*time.Millisecond, "the link", func() bool { return rowState(t, e.db, img) == "sent" })
			var fired int64
			if err := e.db.QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM replace_failures`).Scan(&fired); err != nil || fired == 0 {
				t.Fatalf("the injected failure did not happen (%d, %v)", fired, err)
			}
			e.consumed(t, "s1")
			r, err := outbox.New(e.db).GetByKey(ctx, img)
			if err != nil {
				t.Fatal(err)
			}
			if r.Request.GetIdempotencyKey() != link || len(r.Request.GetAttachments()) != 0 {
				t.Errorf("the image's row sends %q with %d attachments, want its link", r.Request.GetIdempotencyKey(), len(r.Request.GetAttachments()))
			}
			if n, err := outbox.New(e.db).List(ctx, nil, 100); err != nil || len(n) != 0 {
				t.Errorf("dead letters %v, %v; want none: the image's row is the link's", len(n), err)
			}
			_, posted := e.gw.snapshot()
			var texts []string
			for _, p := range posted {
				if p.Key == img {
					t.Error("the image was posted")
				}
				texts = append(texts, p.Key+" "+p.Req.GetText())
			}
			if want := []string{turn + ":1:0 Chart:", link + " Sales\nhttps://cdn.example.test/gone.png"}; fmt.Sprint(texts) != fmt.Sprint(want) {
				t.Fatalf("posted %q, want %q: the text, then the link once", texts, want)
			}
		})
	}
}

// With delivery.images link, or on a platform whose images are links,
// the answer goes as written.
func TestAnswerImagesOff(t *testing.T) {
	t.Parallel()
	off := imagesConfig()
	off.Images = delivery.ImagesLink
	for i, tc := range []struct {
		name string
		cfg  delivery.Config
	}{
		{"switched off", off},
		{"platform of links", testConfig()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.start(t, tc.cfg, "a")
			turn := fmt.Sprint("t", i)
			e.publish(t, event(turn, 1, "s1", final(imageAnswer)))
			eventually(t, e.clock, 0, "the answer", func() bool { return len(e.gw.sends()) == 1 })
			e.consumed(t, "s1")
			sent := e.gw.sends()
			if len(sent) != 1 || sent[0].Req.GetText() != imageAnswer || len(sent[0].Req.GetAttachments()) != 0 {
				t.Fatalf("sent %+v, want the answer as written", sent)
			}
		})
	}
}

// A streamed answer's final edit takes the image syntax out of the
// message, and the image follows it.
func TestStreamedAnswerImages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := streamConfig()
	cfg.Platforms["stream"] = delivery.Platform{Streaming: delivery.StreamEdit, Images: delivery.ImagesNative}
	e.start(t, cfg, "a")
	e.publishStream(t, "t1", 1, "s1", &repliesv1.TextDelta{Text: "Here it is, the sales chart: ![Sales](https://cdn.example.test/sales.png)"})
	eventually(t, e.clock, 0, "streamed message", func() bool { return len(e.gw.sends()) == 1 })
	e.publishStream(t, "t1", 2, "s1", final("Here it is, the sales chart: ![Sales](https://cdn.example.test/sales.png)"))
	eventually(t, e.clock, 0, "final edit and image", func() bool { return len(e.gw.sends()) == 3 })
	e.consumed(t, "s1")
	sent := e.gw.sends()
	if r := sent[1].Req; r.GetOp() != deliveryv1.SendOp_SEND_OP_EDIT || r.GetText() != "Here it is, the sales chart:" || !r.GetFinal() {
		t.Fatalf("final edit %v %q final=%v", r.GetOp(), r.GetText(), r.GetFinal())
	}
	if r := sent[2].Req; r.GetOp() != deliveryv1.SendOp_SEND_OP_SEND || len(r.GetAttachments()) != 1 || r.GetAttachments()[0].GetUrl() != "https://cdn.example.test/sales.png" {
		t.Fatalf("after the edit: %+v, want the image", r)
	}
}

// An image whose row expires (its sends kept failing, retryably, until
// delivery.ttl went by) goes as its link when the answer's text was
// delivered; when the text expired too, the answer as a whole is stale
// and no link follows.
func TestExpiredAnswerImageGoesAsLink(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		name     string
		textFail bool
		want     []string
	}{
		{"the text arrived", false, []string{"Chart:", "Sales\nhttps://cdn.example.test/slow.png"}},
		{"the text expired too", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.gw.setBehaviour(func(req *deliveryv1.SendRequested, _ int) behaviour {
				if len(req.GetAttachments()) > 0 || tc.textFail {
					return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, Error: "download attachment: 503 Service Unavailable"}}
				}
				return behaviour{}
			})
			cfg := imagesConfig()
			cfg.TTL = time.Minute
			// The clock runs fast here: attempts must not run out before the TTL.
			cfg.MaxAttempts = 1000
			e.start(t, cfg, "a")
			turn := fmt.Sprint("t", i)
			e.publish(t, event(turn, 1, "s1", final("Chart: ![Sales](https://cdn.example.test/slow.png)")))
			img, link := turn+":1:img0", turn+":1:img0:link"
			if tc.textFail {
				eventually(t, e.clock, 5*time.Second, "the image row to expire", func() bool { return rowState(t, e.db, img) == "expired" })
				if st := rowState(t, e.db, turn+":1:0"); st != "expired" {
					t.Fatalf("text row %q, want expired", st)
				}
				calls, _ := e.gw.snapshot()
				for _, c := range calls {
					if c.Key == link {
						t.Fatal("the link of an image whose answer expired was sent")
					}
				}
				return
			}
			// The link takes the image's row (its place in the chat).
			eventually(t, e.clock, 5*time.Second, "the link", func() bool { return rowState(t, e.db, img) == "sent" })
			var texts []string
			for _, c := range e.gw.sends() {
				if len(c.Req.GetAttachments()) == 0 {
					texts = append(texts, c.Req.GetText())
				}
			}
			if fmt.Sprint(texts) != fmt.Sprint(tc.want) {
				t.Fatalf("posted %q, want %q", texts, tc.want)
			}
		})
	}
}

// While an answer streams, its messages show what the final will: the
// images the final takes out do not show as syntax, nor does one being
// written at the end ("![Sales](https://cdn.exa"), while a Markdown
// example in a code block stays literal, as the final leaves it. The
// final edit only adds what came after the last update.
func TestStreamedAnswerHidesImageSyntax(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := streamConfig()
	cfg.Platforms["stream"] = delivery.Platform{Streaming: delivery.StreamEdit, Images: delivery.ImagesNative}
	e.start(t, cfg, "a")
	const (
		intro   = "Here is the chart you asked for:\n\n"
		example = "And as Markdown:\n```md\n![Sales](https://cdn.example.test/sales.png)\n```\n"
	)
	deltas := []struct {
		text string
		want string // the update it makes ("" none)
	}{
		{intro + "![Sa", intro + " ▉"},
		{"les](https://cdn.exa", ""},
		{"mple.test/sales.png)\n\n" + example[:40], intro + example[:40] + " ▉"},
		{example[40:] + "Done, enjoy the picture ![x](https://cdn.example.test/x", intro + example + "Done, enjoy the picture ▉"},
	}
	var all strings.Builder
	var updates []string
	for i, d := range deltas {
		all.WriteString(d.text)
		e.clock.Advance(time.Second)
		e.publishStream(t, "t1", int64(i+1), "s1", &repliesv1.TextDelta{Text: d.text})
		e.consumed(t, "s1")
		if d.want != "" {
			updates = append(updates, d.want)
		}
		// A delta that finds the update before it still being sent is
		// redelivered a moment later: wait for the sends it makes.
		var got []string
		eventually(t, e.clock, 0, fmt.Sprint("the updates of delta ", i), func() bool {
			got = got[:0]
			for _, c := range e.gw.sends() {
				got = append(got, c.Req.GetText())
			}
			return len(got) >= len(updates)
		})
		if fmt.Sprint(got) != fmt.Sprint(updates) {
			t.Fatalf("after delta %d the stream showed\n%q\nwant\n%q", i, got, updates)
		}
	}
	answer := all.String() + ".gif)"
	e.publishStream(t, "t1", int64(len(deltas)+1), "s1", final(answer))
	eventually(t, e.clock, 0, "final edit and images", func() bool { return len(e.gw.sends()) == len(updates)+3 })
	sent := e.gw.sends()
	last := sent[len(updates)].Req
	if want := intro + example + "Done, enjoy the picture"; last.GetOp() != deliveryv1.SendOp_SEND_OP_EDIT || last.GetText() != want {
		t.Fatalf("final %v %q, want the edit %q", last.GetOp(), last.GetText(), want)
	}
	var urls []string
	for _, c := range sent[len(updates)+1:] {
		for _, a := range c.Req.GetAttachments() {
			urls = append(urls, a.GetUrl())
		}
	}
	if want := []string{"https://cdn.example.test/sales.png", "https://cdn.example.test/x.gif"}; fmt.Sprint(urls) != fmt.Sprint(want) {
		t.Fatalf("images %q, want %q", urls, want)
	}
}

// The link sent in place of an image that failed or expired takes the
// image's place in its chat: a later answer, queued behind the image
// while it was being retried, cannot go before it.
func TestImageLinkKeepsItsPlaceInTheChat(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		name    string
		expires bool
	}{
		{"given up", false},
		{"expired", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			var later atomic.Bool // the later answer is queued
			e.gw.setBehaviour(func(req *deliveryv1.SendRequested, _ int) behaviour {
				if len(req.GetAttachments()) == 0 {
					return behaviour{}
				}
				if later.Load() && !tc.expires {
					return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, Error: "download attachment: 404 Not Found"}}
				}
				// While the clock runs, retried every 5 s: the row waits
				// queued, as a real retried row mostly does (not claimed at
				// each step of the clock).
				after := int64(0)
				if tc.expires {
					after = 5000
				}
				return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, Error: "download attachment: 503 Service Unavailable", RetryAfterMs: after}}
			})
			cfg := imagesConfig()
			cfg.TTL = time.Minute
			cfg.MaxAttempts = 1000
			e.start(t, cfg, "a")
			t1, t2 := fmt.Sprint("a", i), fmt.Sprint("b", i)
			e.publish(t, event(t1, 1, "s1", final("Chart: ![Sales](https://cdn.example.test/sales.png)")))
			eventually(t, e.clock, 0, "the first answer's text", func() bool { return rowState(t, e.db, t1+":1:0") == "sent" })
			// The image's row is queued once the text is sent: its expiry
			// counts from then, so the clock moves only once it is there.
			eventually(t, e.clock, 0, "the image's row", func() bool { return rowState(t, e.db, t1+":1:img0") != "" })
			if tc.expires {
				e.clock.Advance(50 * time.Second) // the later answer expires well after the image
			}
			e.publish(t, event(t2, 1, "s1", final("The next answer")))
			e.consumed(t, "s1")
			if st := rowState(t, e.db, t2+":1:0"); st != "queued" {
				t.Fatalf("the later answer is %q, want queued behind the image", st)
			}
			later.Store(true)
			if tc.expires {
				// Past the image's expiry (a minute after the first
				// answer's text was sent), well before the later
				// answer's: the clock then stands while the link goes.
				e.clock.Advance(11 * time.Second)
			}
			link := t1 + ":1:img0:link"
			eventually(t, e.clock, 0, "the link", func() bool {
				calls, _ := e.gw.snapshot()
				for _, c := range calls {
					if c.Key == link {
						return true
					}
				}
				return false
			})
			eventually(t, e.clock, 0, "both answers", func() bool { return rowState(t, e.db, t2+":1:0") == "sent" })
			var texts []string
			for _, c := range e.gw.sends() {
				if len(c.Req.GetAttachments()) == 0 {
					texts = append(texts, c.Req.GetText())
				}
			}
			if want := []string{"Chart:", "Sales\nhttps://cdn.example.test/sales.png", "The next answer"}; fmt.Sprint(texts) != fmt.Sprint(want) {
				t.Fatalf("posted %q, want %q", texts, want)
			}
		})
	}
}
