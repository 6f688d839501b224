package router

import (
	"strings"
	"testing"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

func TestPartsOfOneMessageAreOneTurn(t *testing.T) {
	t.Parallel()
	part := func(c string) string { return strings.Repeat(c, 4050) }
	// album: the pictures of one album (a media group) as Telegram sends
	// them, the caption on the first.
	const album = "album:"
	tests := []struct {
		name     string
		platform string
		split    int           // router.split_messages for the platform
		albums   time.Duration // router.album_wait
		texts    []string      // album: marks a picture of an album
		want     [][]string    // each turn's inputs
	}{
		{"two parts", "telegram", 4000, time.Second, []string{part("a"), "end"}, [][]string{{part("a"), "end"}}},
		{"three parts", "telegram", 4000, time.Second, []string{part("a"), part("b"), "end"}, [][]string{{part("a"), part("b"), "end"}}},
		{"a long message alone starts after the wait", "telegram", 4000, time.Second, []string{part("a")}, [][]string{{part("a")}}},
		{"short messages are not held", "telegram", 4000, time.Second, []string{"one", "two"}, [][]string{{"one"}, {"two"}}},
		// 2,025 emoji: 4,050 UTF-16 code units, as the client counts them.
		{"emoji count twice", "telegram", 4000, time.Second, []string{strings.Repeat("😀", 2025), "end"}, [][]string{{strings.Repeat("😀", 2025), "end"}}},
		{"a platform without splitting", "slack", 0, time.Second, []string{part("a"), "end"}, [][]string{{part("a")}, {"end"}}},
		{"turned off", "telegram", 0, time.Second, []string{part("a"), "end"}, [][]string{{part("a")}, {"end"}}},
		{"an album", "telegram", 4000, time.Second, []string{album + "look at these", album, album}, [][]string{{"look at these", "", ""}}},
		{"albums off", "telegram", 4000, 0, []string{album + "look", album}, [][]string{{"look"}, {""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := testConfig()
			cfg.SplitMessages = map[string]int{tt.platform: tt.split}
			cfg.SplitWait, cfg.AlbumWait = time.Second, tt.albums
			e.startRouter(cfg, nil, nil)
			w := e.startWorker(nil)
			for _, text := range tt.texts {
				ev := dm("alice", strings.TrimPrefix(text, album))
				ev.Source.Platform = tt.platform
				if strings.HasPrefix(text, album) {
					ev.MediaGroupId = "g1"
					ev.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: "p"}}
				}
				e.publish(ev)
			}
			waitFor(t, "every turn", func() bool { turns, _ := w.snapshot(); return len(turns) >= len(tt.want) })
			waitFor(t, "inbound drained", e.inboundDrained)
			turns, overlap := w.snapshot()
			if len(overlap) > 0 {
				t.Fatalf("turns overlapped in %v", overlap)
			}
			var got [][]string
			for _, turn := range turns {
				got = append(got, texts(turn.Inputs))
			}
			if !equalTurns(got, tt.want) {
				t.Fatalf("turns' inputs %v, want %v", abbreviated(got), abbreviated(tt.want))
			}
			if n := len(e.controls(controlInterrupt)); n != 0 {
				t.Fatalf("%d interrupts", n)
			}
			if notices := e.noticesTo("alice"); len(notices) != 0 {
				t.Fatalf("notices %q, want none", notices)
			}
		})
	}
}

func texts(in []*eventsv1.MessageReceived) []string {
	var out []string
	for _, m := range in {
		out = append(out, m.GetText())
	}
	return out
}

func equalTurns(a, b [][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if strings.Join(a[i], "\x00") != strings.Join(b[i], "\x00") || len(a[i]) != len(b[i]) {
			return false
		}
	}
	return true
}

// abbreviated shortens long texts for a failure message.
func abbreviated(turns [][]string) [][]string {
	out := make([][]string, len(turns))
	for i, in := range turns {
		for _, s := range in {
			if len(s) > 12 {
				s = s[:6] + "…" + s[len(s)-3:]
			}
			out[i] = append(out[i], s)
		}
	}
	return out
}

// TestHeldPartOutlivesItsRouter: a held part's router stops before the
// wait ends (its timer never fires here); the sweep of another router
// starts the waiting message.
func TestHeldPartOutlivesItsRouter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	held := testConfig()
	held.SplitWait = time.Minute
	e.startRouter(held, nil, nil)
	w := e.startWorker(nil)
	e.publish(dm("alice", strings.Repeat("a", 4050)))
	key := "agent:main:telegram:dm:chat-alice"
	waitFor(t, "the part waits in its session", func() bool {
		var n int
		_ = e.db.QueryRow(t.Context(), `SELECT count(*) FROM session_queue WHERE session_key = $1`, key).Scan(&n)
		return n == 1
	})
	if turns, _ := w.snapshot(); len(turns) != 0 {
		t.Fatalf("%d turns during the wait", len(turns))
	}
	other := testConfig()
	other.SplitWait = 0
	e.startRouter(other, nil, []int{}) // no partitions: its sweep only
	waitFor(t, "the sweep starts it", func() bool { turns, _ := w.snapshot(); return len(inputsText(turns, key)) == 1 })
}
