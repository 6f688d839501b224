package matrix

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/matrix/matrixfake"
)

// A stored sync position the homeserver no longer knows (its database
// replaced or wiped: Synapse answers a token it cannot read with 400
// M_UNKNOWN, Dendrite with M_INVALID_PARAM, a sliding-sync server with
// M_UNKNOWN_POS) is dropped: the gateway syncs again from the
// homeserver's current state and hears the rooms, where it used to ask
// with the same token forever, deaf until an operator deleted the key.
// A transient failure (a 429, a 5xx) keeps the position.
func TestUnknownSyncPositionStartsAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fail  func(f *matrixfake.Fake)
		reset bool
	}{
		{"the homeserver's database replaced", func(f *matrixfake.Fake) { f.ForgetSyncTokens() }, true},
		{"400 M_INVALID_PARAM", func(f *matrixfake.Fake) {
			f.FailNext("sync", 1, matrixfake.Fail{Status: http.StatusBadRequest, ErrCode: "M_INVALID_PARAM"})
		}, true},
		{"400 M_UNKNOWN_POS", func(f *matrixfake.Fake) {
			f.FailNext("sync", 1, matrixfake.Fail{Status: http.StatusBadRequest, ErrCode: "M_UNKNOWN_POS"})
		}, true},
		{"429", func(f *matrixfake.Fake) {
			f.FailNext("sync", 1, matrixfake.Fail{Status: http.StatusTooManyRequests, ErrCode: "M_LIMIT_EXCEEDED"})
		}, false},
		{"502", func(f *matrixfake.Fake) {
			f.FailNext("sync", 1, matrixfake.Fail{Status: http.StatusBadGateway, ErrCode: "M_UNKNOWN"})
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := start(t, nil)
			before := g.f.Message(dmRm, ann, "before")
			if ev := g.next(t); ev.GetEventId() != before {
				t.Fatalf("event %s, want %s", ev.GetEventId(), before)
			}
			platformtest.WaitFor(t, "the token to move past the first message", func() bool {
				return g.f.Receipt(dmRm) == before
			})
			n := len(g.f.SyncSinces())
			tc.fail(g.f)
			after := g.f.Message(dmRm, ann, "after")
			if ev := g.next(t); ev.GetEventId() != after {
				t.Fatalf("event %s %q, want %s", ev.GetEventId(), ev.GetText(), after)
			}
			g.none(t) // the first message is not answered again
			if reset := slices.Contains(g.f.SyncSinces()[n:], ""); reset != tc.reset {
				t.Fatalf("synced again without a token: %v, want %v (syncs %q)", reset, tc.reset, g.f.SyncSinces()[n:])
			}
		})
	}
}

// A sync_timeout longer than the HTTP client's overall timeout
// (mautrix's cuts every request at 180 s; sync_timeout may be up to 5m)
// holds a quiet long poll for the whole timeout and is answered: the
// client's timeout cut each quiet poll short, a failure, and the
// gateway reconnected again and again.
func TestSyncTimeoutOverTheClientTimeout(t *testing.T) {
	t.Parallel()
	f := matrixfake.New(bot, token)
	t.Cleanup(f.Close)
	fakeRooms(f)
	cfg := testConfig(f)
	cfg.SyncTimeout = time.Second
	// The client's 200 ms stand for mautrix's 180 s.
	p, err := NewPlatform(cfg, slog.New(slog.DiscardHandler), &http.Client{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bad := func(raw json.RawMessage, err error) { t.Errorf("event %s rejected: %v", raw, err) }
	first, err := p.syncLenient(ctx, mautrix.ReqSync{}, bad)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := p.syncLenient(ctx, mautrix.ReqSync{Since: first.NextBatch, Timeout: int(cfg.SyncTimeout.Milliseconds())}, bad)
	if err != nil {
		t.Fatalf("a quiet long poll of %s: %v, want its empty answer", cfg.SyncTimeout, err)
	}
	if resp.NextBatch == "" {
		t.Fatalf("answer %+v has no next_batch", resp)
	}
}

// A long poll whose answer never comes (the connection gone silent: a
// NAT or a proxy dropped it without a reset) is given up once its
// timeout and a grace have passed, and the next one hears the room:
// only the HTTP client's 180 s bounded it, the bot deaf meanwhile.
func TestSilentSyncGivenUp(t *testing.T) {
	t.Parallel()
	f, b, evs := fixture(t)
	s := build(t, b, f, nil, slog.New(slog.DiscardHandler))
	s.p.syncGrace = 500 * time.Millisecond
	platformtest.Start(t, b, s)
	platformtest.WaitFor(t, "the gateway to sync", func() bool {
		st, _ := s.Runner().State()
		return st == platform.StateConnected
	})
	calls := f.Calls("sync")
	f.StallSyncs(1)
	platformtest.WaitFor(t, "the silent sync", func() bool { return f.Calls("sync") > calls })
	id := f.Message(dmRm, ann, "anyone there?")
	start := time.Now()
	if ev := platformtest.NextEvent(t, evs); ev.GetEventId() != id {
		t.Fatalf("event %s, want %s", ev.GetEventId(), id)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("the message came %s later, want within the poll's 300 ms and the 500 ms grace (and a retry)", waited)
	}
}

// A /sync refused with a 429 is tried again after the wait the
// homeserver names (retry_after_ms), not at once on the reconnect
// schedule, which met the rate limit again and again.
func TestSyncRateLimitWaits(t *testing.T) {
	t.Parallel()
	g := start(t, nil)
	first := g.f.Message(dmRm, ann, "hello")
	if ev := g.next(t); ev.GetEventId() != first {
		t.Fatalf("event %s, want %s", ev.GetEventId(), first)
	}
	const wait = 1500 * time.Millisecond
	g.f.FailNext("sync", 1, matrixfake.Fail{Status: http.StatusTooManyRequests, ErrCode: "M_LIMIT_EXCEEDED", RetryAfterMS: int(wait.Milliseconds())})
	calls := g.f.Calls("sync")
	start := time.Now()
	id := g.f.Message(dmRm, ann, "still there?") // wakes the poll, which is refused
	if ev := g.next(t); ev.GetEventId() != id {
		t.Fatalf("event %s, want %s", ev.GetEventId(), id)
	}
	if took := time.Since(start); took < wait {
		t.Fatalf("the message came %s after the 429, want after its retry_after_ms %s", took, wait)
	}
	if n := g.f.Calls("sync") - calls; n > 3 {
		t.Fatalf("%d syncs during the wait, want the refused one and the next", n)
	}
}

// A MATRIX_USER_ID written in another case than the homeserver's
// (@Bot:fake.test for @bot:fake.test; with an access token it is not
// checked) is the bot all the same, as normalize has it for the bot's
// own messages: its reaction is found and taken off by a replica that
// did not make it, a message that starts with its display name mentions
// it, and an invite marked is_direct makes a DM.
func TestBotIDInAnotherCase(t *testing.T) {
	t.Parallel()
	const upper = "@Bot:" + matrixfake.Server
	signedInAs := func(t *testing.T, f *matrixfake.Fake) *Platform {
		t.Helper()
		cfg := testConfig(f)
		cfg.UserID = upper
		p, err := NewPlatform(cfg, slog.New(slog.DiscardHandler), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.SignIn(context.Background()); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("its reaction taken off", func(t *testing.T) {
		t.Parallel()
		f := matrixfake.New(bot, token)
		t.Cleanup(f.Close)
		fakeRooms(f)
		ctx := platform.WithReactionTurn(context.Background(), "t1")
		target := &deliveryv1.Target{Platform: "matrix", Account: upper, ChatId: team}
		msg := f.Message(team, ann, "hi")
		if err := signedInAs(t, f).React(ctx, target, msg, "👀"); err != nil {
			t.Fatal(err)
		}
		if err := signedInAs(t, f).Unreact(ctx, target, msg, "👀"); err != nil {
			t.Fatal(err)
		}
		if got := f.Reactions(team, msg); len(got) != 0 {
			t.Fatalf("the bot's reactions %q left on the message", got)
		}
	})
	t.Run("a mention by its display name", func(t *testing.T) {
		t.Parallel()
		g := start(t, func(c *Config) { c.UserID = upper })
		id := g.f.Message(team, ann, "Hermes: plan the trip")
		if ev := g.next(t); ev.GetEventId() != id || ev.GetText() != "plan the trip" {
			t.Fatalf("event %s %q, want %s", ev.GetEventId(), ev.GetText(), id)
		}
	})
	t.Run("an invite marked is_direct", func(t *testing.T) {
		t.Parallel()
		f := matrixfake.New(bot, token)
		t.Cleanup(f.Close)
		p := signedInAs(t, f)
		const rid = "!invited:" + matrixfake.Server
		f.Invite(rid, ann, true)
		key := bot
		p.joinInvites(context.Background(), mautrix.RespSyncRooms{Invite: map[id.RoomID]*mautrix.SyncInvitedRoom{
			rid: {State: mautrix.SyncEventsList{Events: []*event.Event{{Type: event.StateMember, Sender: ann, StateKey: &key,
				Content: event.Content{VeryRaw: []byte(`{"membership":"invite","is_direct":true}`)}}}}},
		}})
		if !f.Joined(rid) {
			t.Fatal("the invite was not joined")
		}
		if v := p.rooms.get(rid).view(p.cfg.UserID); !v.DM {
			t.Fatal("the room joined on an is_direct invite is no DM")
		}
	})
}

// The wait a 429 names is bounded whatever its size: a retry_after_ms or
// Retry-After too large for a time.Duration wrapped round to a wait of 0
// or less, and the sync was tried again at once, again and again, as was
// a send (its receipt's retry_after negative).
func TestRateLimitWaitBounded(t *testing.T) {
	t.Parallel()
	limited := func(ms any, header string) mautrix.HTTPError {
		h := http.Header{}
		if header != "" {
			h.Set("Retry-After", header)
		}
		re := &mautrix.RespError{ErrCode: "M_LIMIT_EXCEEDED", ExtraData: map[string]any{}}
		if ms != nil {
			re.ExtraData["retry_after_ms"] = ms
		}
		return mautrix.HTTPError{Response: &http.Response{StatusCode: http.StatusTooManyRequests, Header: h}, RespError: re}
	}
	for _, tc := range []struct {
		name string
		he   mautrix.HTTPError
		sync time.Duration // syncRateLimited's wait
		min  time.Duration // retryAfter's at least
		max  time.Duration // retryAfter's at most (0: any)
	}{
		{name: "retry_after_ms as named", he: limited(1500.0, ""), sync: 1500 * time.Millisecond, min: 1500 * time.Millisecond},
		{name: "Retry-After as named", he: limited(nil, "7"), sync: 7 * time.Second, min: 7 * time.Second},
		{name: "retry_after_ms of centuries", he: limited(1e13, ""), sync: maxSyncRetryAfter, min: time.Hour},
		{name: "retry_after_ms beyond int64", he: limited(1e20, ""), sync: maxSyncRetryAfter, min: time.Hour},
		{name: "Retry-After of centuries", he: limited(nil, "10000000000000"), sync: maxSyncRetryAfter, min: time.Hour},
		// Matrix 1.10 deprecates retry_after_ms in favour of the
		// header: with both, the header's wait, longer or shorter.
		{name: "Retry-After before retry_after_ms", he: limited(1500.0, "7"), sync: 7 * time.Second, min: 7 * time.Second},
		{name: "Retry-After before a longer retry_after_ms", he: limited(600_000.0, "2"), sync: 2 * time.Second, min: 2 * time.Second, max: 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wait, ok := syncRateLimited(tc.he)
			if !ok || wait != tc.sync {
				t.Errorf("sync waits %s (named %v), want %s", wait, ok, tc.sync)
			}
			if d := retryAfter(tc.he); d < tc.min || tc.max > 0 && d > tc.max {
				t.Errorf("a send's retry after %s, want at least %s and at most %s (0: any)", d, tc.min, tc.max)
			}
		})
	}
}

// The first sync of a connection (timeout 0: the catch-up after a
// restart, a handover or a failed sync) gets the initial sync's grace
// whether or not a token is stored: the homeserver may build a large
// answer for what happened meanwhile, and it had the HTTP client's 180 s
// before the per-poll deadline. With a stored token it got the long
// poll's 30 s only, was given up as a silent connection and asked again
// and again, never answered by a homeserver slower than that.
func TestCatchUpSyncNotGivenUp(t *testing.T) {
	t.Parallel()
	f, b, evs := fixture(t)
	s := build(t, b, f, nil, slog.New(slog.DiscardHandler))
	s.p.syncGrace = 200 * time.Millisecond
	platformtest.Start(t, b, s)
	first := f.Message(dmRm, ann, "hello")
	if ev := platformtest.NextEvent(t, evs); ev.GetEventId() != first {
		t.Fatalf("event %s, want %s", ev.GetEventId(), first)
	}
	platformtest.WaitFor(t, "the token to move past the first message", func() bool { return f.Receipt(dmRm) == first })
	// The long poll fails (the gateway connects again, from the token);
	// the homeserver takes 1 s over each of the next 3 catch-ups.
	f.FailNext("sync", 1, matrixfake.Fail{Status: http.StatusBadGateway, ErrCode: "M_UNKNOWN"})
	f.SlowCatchUps(3, time.Second)
	calls := f.Calls("sync")
	id := f.Message(dmRm, ann, "still there?")
	if ev := platformtest.NextEvent(t, evs); ev.GetEventId() != id {
		t.Fatalf("event %s, want %s", ev.GetEventId(), id)
	}
	// The catch-up and the long poll after it (and one that began as the
	// failed one ended).
	if n := f.Calls("sync") - calls; n > 3 {
		t.Fatalf("%d syncs for the catch-up, want one: the slow answer was given up", n)
	}
}

// A sync from a token refused as unknown right after the gateway
// started again without one (every token refused: a 400 for another
// reason than the token, a homeserver that takes a parameter badly
// beside since) is not a reason to start again at once: it is the
// connection's error, tried again on the backoff schedule. It started
// again at once, a whole initial sync each time, without a pause.
func TestUnknownSyncPositionNotResetInALoop(t *testing.T) {
	t.Parallel()
	f, b, evs := fixture(t)
	s, err := New(testConfig(f), Deps{Log: slog.New(slog.DiscardHandler), Bus: b,
		Runner: platform.Options{Backoff: platform.Schedule(500 * time.Millisecond), LeaseTTL: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	platformtest.Start(t, b, s)
	first := f.Message(dmRm, ann, "hello")
	if ev := platformtest.NextEvent(t, evs); ev.GetEventId() != first {
		t.Fatalf("event %s, want %s", ev.GetEventId(), first)
	}
	platformtest.WaitFor(t, "the token to move past the first message", func() bool { return f.Receipt(dmRm) == first })
	n := len(f.SyncSinces())
	f.RefuseSyncTokens()
	time.Sleep(1200 * time.Millisecond)
	initial := 0
	for _, s := range f.SyncSinces()[n:] {
		if s == "" {
			initial++
		}
	}
	// One at once, then one a backoff (500 ms) apart.
	if initial > 4 {
		t.Fatalf("%d initial syncs in 1.2 s, want one at each try of the backoff schedule", initial)
	}
}
