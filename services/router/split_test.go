package router

import (
	"context"
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
		wait     time.Duration // router.split_wait and router.album_wait
		texts    []string      // album: marks a picture of an album
		want     [][]string    // each turn's inputs
	}{
		{"two parts", "telegram", 4000, 3 * time.Second, []string{part("a"), "end"}, [][]string{{part("a"), "end"}}},
		{"three parts", "telegram", 4000, 3 * time.Second, []string{part("a"), part("b"), "end"}, [][]string{{part("a"), part("b"), "end"}}},
		{"a long message alone starts after the wait", "telegram", 4000, 3 * time.Second, []string{part("a")}, [][]string{{part("a")}}},
		{"short messages are not held", "telegram", 4000, 3 * time.Second, []string{"one", "two"}, [][]string{{"one"}, {"two"}}},
		// 2,025 emoji: 4,050 UTF-16 code units, as the client counts them.
		{"emoji count twice", "telegram", 4000, 3 * time.Second, []string{strings.Repeat("😀", 2025), "end"}, [][]string{{strings.Repeat("😀", 2025), "end"}}},
		{"a platform without splitting", "slack", 0, 3 * time.Second, []string{part("a"), "end"}, [][]string{{part("a")}, {"end"}}},
		{"turned off", "telegram", 0, 3 * time.Second, []string{part("a"), "end"}, [][]string{{part("a")}, {"end"}}},
		{"an album", "telegram", 4000, 3 * time.Second, []string{album + "look at these", album, album}, [][]string{{"look at these", "", ""}}},
		{"albums off", "telegram", 4000, 0, []string{album + "look", album}, [][]string{{"look"}, {""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := testConfig()
			cfg.SplitMessages = map[string]int{tt.platform: tt.split}
			// Long enough for the parts, published back to back, to be
			// handled within it.
			cfg.SplitWait, cfg.AlbumWait = tt.wait, tt.wait
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
			if len(tt.want) > 1 {
				return // unheld messages meet the turns before them as they may
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

// TestHeldPartOutlivesItsRouter: the router that held a part stops
// before the wait ends; no other router starts the session while the hold
// lasts, and the sweep of another starts it once it has expired.
func TestHeldPartOutlivesItsRouter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.SplitWait = 2 * time.Second
	a, err := New(cfg, Deps{Bus: e.bus, DB: e.db, Redis: e.rdb, RedisPrefix: e.prefix, Environ: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	w := e.startWorker(nil)
	e.startRouter(cfg, nil, []int{}) // another replica: its sweep only
	key := "agent:main:telegram:dm:chat-alice"
	e.publish(dm("alice", strings.Repeat("a", 4050)))
	waitFor(t, "the part waits in its session", func() bool {
		var n int
		_ = e.db.QueryRow(t.Context(), `SELECT count(*) FROM session_queue WHERE session_key = $1`, key).Scan(&n)
		return n == 1
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the sweep starts it", func() bool { turns, _ := w.snapshot(); return len(inputsText(turns, key)) == 1 })
	if n, err := e.rdb.Exists(context.Background(), a.holdKey(key)).Result(); err != nil || n != 0 {
		t.Fatalf("started while the hold lasted (%d, %v)", n, err)
	}
}

// TestHeldPartsSurviveAReset: a daily reset falls between two parts; the
// new conversation gets both.
func TestHeldPartsSurviveAReset(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.SplitWait = time.Minute // only the second part starts them
	cfg.SessionReset.Mode, cfg.SessionReset.AtHour = ResetDaily, 4
	clock := e.startRouterOnClock(cfg, time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC))
	set := clock.set
	w := e.startWorker(nil)
	key := "agent:main:telegram:dm:chat-alice"
	e.publish(dm("alice", "hello"))
	waitFor(t, "first turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	set(time.Date(2026, 12, 2, 3, 59, 59, 0, time.UTC))
	part := strings.Repeat("a", 4050)
	e.publish(dm("alice", part))
	waitFor(t, "the part waits in its session", func() bool {
		var n int
		_ = e.db.QueryRow(t.Context(), `SELECT count(*) FROM session_queue WHERE session_key = $1`, key).Scan(&n)
		return n == 1
	})
	set(time.Date(2026, 12, 2, 4, 0, 1, 0, time.UTC))
	e.publish(dm("alice", "end"))
	waitFor(t, "second turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 2 })
	turns, _ := w.snapshot()
	if got := texts(turns[1].Inputs); len(got) != 2 || got[0] != part || got[1] != "end" {
		t.Fatalf("the new conversation's turn has %v, want both parts", abbreviated([][]string{got}))
	}
	if turns[1].SessionId == turns[0].SessionId {
		t.Fatal("the session was not reset")
	}
}
