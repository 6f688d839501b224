package delivery_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/services/delivery"
)

// An image whose row expires goes as its link even when the expiry
// pass that first takes it fails midway: the database refuses the
// statement that puts the link in the image's row, or the pass's
// connection dies (as it does with its replica). Nothing of the failed
// pass stays (the image is not expired without its link), the next pass
// does it again, and the link reaches the chat exactly once. The failure
// is Postgres's own: a trigger on the outbox that fires once.
func TestExpiringImageLinkSurvivesAFailedPass(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		name, failure string
	}{
		{"the statement fails", `RAISE EXCEPTION 'injected: the expiry''s update refused'`},
		{"the connection dies", `PERFORM pg_terminate_backend(pg_backend_pid())`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := context.Background()
			for _, stmt := range []string{
				`CREATE SEQUENCE expiry_failures`,
				`CREATE FUNCTION fail_expiry_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.last_error LIKE 'image expired%' AND OLD.last_error NOT LIKE 'image expired%'
	   AND nextval('expiry_failures') = 1 THEN
		` + tc.failure + `;
	END IF;
	RETURN NEW;
END $$`,
				`CREATE TRIGGER fail_expiry_once BEFORE UPDATE ON delivery_outbox
	FOR EACH ROW EXECUTE FUNCTION fail_expiry_once()`,
			} {
				if _, err := e.db.Exec(ctx, stmt); err != nil {
					t.Fatal(err)
				}
			}
			e.gw.setBehaviour(func(req *deliveryv1.SendRequested, _ int) behaviour {
				if len(req.GetAttachments()) > 0 {
					return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, Error: "download attachment: 503 Service Unavailable"}}
				}
				return behaviour{}
			})
			cfg := imagesConfig()
			cfg.TTL = time.Minute
			cfg.MaxAttempts = 1000 // the clock runs fast: attempts must not run out before the TTL
			e.start(t, cfg, "a")
			turn := fmt.Sprint("f", i)
			e.publish(t, event(turn, 1, "s1", final("Chart: ![Sales](https://cdn.example.test/slow.png)")))
			img, link := turn+":1:img0", turn+":1:img0:link"
			eventually(t, e.clock, 0, "the image's row", func() bool { return rowState(t, e.db, img) != "" })
			e.clock.Advance(61 * time.Second)
			eventually(t, e.clock, 0, "the link", func() bool { return rowState(t, e.db, img) == "sent" })
			var fired int64
			if err := e.db.QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM expiry_failures`).Scan(&fired); err != nil || fired == 0 {
				t.Fatalf("the injected failure did not happen (%d, %v)", fired, err)
			}
			e.consumed(t, "s1")
			_, posted := e.gw.snapshot()
			n := 0
			for _, p := range posted {
				if p.Key == link {
					n++
					if want := "Sales\nhttps://cdn.example.test/slow.png"; p.Req.GetText() != want {
						t.Errorf("link %q, want %q", p.Req.GetText(), want)
					}
				}
				if p.Key == img {
					t.Error("the image was posted")
				}
			}
			if n != 1 {
				t.Fatalf("the link was posted %d times, want once", n)
			}
		})
	}
}

// statements counts the statements a pool runs whose SQL contains one of
// the markers, batches included.
type statements struct {
	markers []string
	n       atomic.Int64
}

func (s *statements) see(sql string) {
	for _, m := range s.markers {
		if strings.Contains(sql, m) {
			s.n.Add(1)
			return
		}
	}
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.see(d.SQL)
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (s *statements) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	s.see(d.SQL)
}

func (s *statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// While no row of the outbox can expire, delivery runs no query to look
// for expired rows: none while it is idle for most of delivery.ttl (no
// transaction a second per replica), one pass once delivery.ttl went by
// since the last (a row another replica queued meanwhile would expire
// no sooner).
func TestNoExpiryQueriesWhileNothingCanExpire(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, url := pgtest.NewWithURL(t)
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	// The statements of an expiry pass: the due rows' selection (old and
	// new), the update that expires them.
	count := &statements{markers: []string{"expires_at <=", "SET state = 'expired'"}}
	pcfg.ConnConfig.Tracer = count
	db, err := pg.OpenConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	e.db = db
	cfg := testConfig()
	cfg.TTL = time.Hour
	e.start(t, cfg, "a")
	// A replica that starts reads the rows once.
	eventually(t, e.clock, 0, "the first expiry pass", func() bool { return count.n.Load() > 0 })
	e.publish(t, event("t1", 1, "s1", final("hello")))
	eventually(t, e.clock, 0, "the answer", func() bool { return e.gw.postedTexts()["hello"] == 1 })
	e.consumed(t, "s1")
	before := count.n.Load()
	// Fifty minutes of nothing to send, a minute every 30 ms (the poll
	// interval): the send loop runs about fifty times.
	// The sleep is the idle time measured, not a synchronisation.
	for range 50 {
		e.clock.Advance(time.Minute)
		time.Sleep(30 * time.Millisecond)
	}
	if n := count.n.Load() - before; n != 0 {
		t.Fatalf("%d expiry statements while nothing could expire, want none", n)
	}
	// delivery.ttl after the last pass, one looks again.
	e.clock.Advance(11 * time.Minute)
	eventually(t, e.clock, 0, "the pass after delivery.ttl", func() bool { return count.n.Load() > before })
}

// A turn that does not show reasoning and that no replica takes over
// pays no round trip for the tools' mark below another replica's stream
// (delivery_stream_tools): when its first model call goes straight to a
// tool's progress message or an approval prompt, the replica saw every
// event of the turn before it, so no stream is above that message. The
// turn's stream is read once, at its first delta, as before the marks.
func TestNoStreamReadForTheToolsOfAnUntakenTurn(t *testing.T) {
	t.Parallel()
	ran := &repliesv1.ToolProgress{ToolCallId: "c-rm", ToolName: "rm", Phase: repliesv1.ToolPhase_TOOL_PHASE_STARTED, Preview: "/tmp/x"}
	done := &repliesv1.ToolProgress{ToolCallId: "c-rm", ToolName: "rm", Phase: repliesv1.ToolPhase_TOOL_PHASE_FINISHED}
	tests := []struct {
		name   string
		events []any
	}{
		{"a progress message first", []any{&repliesv1.Typing{Active: true}, ran, done,
			&repliesv1.TextDelta{Text: "Done."}, final("Done.")}},
		{"an approval prompt first", []any{&repliesv1.Typing{Active: true}, rmApproval, ran, done,
			&repliesv1.TextDelta{Text: "Done."}, final("Done.")}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			_, url := pgtest.NewWithURL(t)
			pcfg, err := pgxpool.ParseConfig(url)
			if err != nil {
				t.Fatal(err)
			}
			// The stream's reads (the last segment, with the tools'
			// mark or the final's key) and the mark's write.
			reads := &statements{markers: []string{"FROM delivery_stream_segments WHERE turn_id"}}
			marks := &statements{markers: []string{"INSERT INTO delivery_stream_tools"}}
			pcfg.ConnConfig.Tracer = &bothStatements{reads, marks}
			db, err := pg.OpenConfig(context.Background(), pcfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(db.Close)
			e.db = db
			cfg := streamConfig()
			cfg.Platforms = map[string]delivery.Platform{"stream": {Streaming: delivery.StreamEdit, ToolProgress: delivery.ToolProgressAll}}
			e.start(t, cfg, "a")
			session := fmt.Sprint("s", i)
			for j, body := range tt.events {
				e.publishStream(t, "t1", int64(j+1), session, body)
			}
			e.consumed(t, session)
			if got := e.gw.postedTexts()["Done."]; got != 1 {
				t.Fatalf("the answer was posted %d times, want once", got)
			}
			if n := reads.n.Load(); n != 1 {
				t.Errorf("%d reads of the turn's stream, want 1 (its first delta's)", n)
			}
			if n := marks.n.Load(); n != 0 {
				t.Errorf("%d tools' marks, want none", n)
			}
		})
	}
}

// bothStatements feeds two counters.
type bothStatements [2]*statements

func (b *bothStatements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	b[0].see(d.SQL)
	b[1].see(d.SQL)
	return ctx
}

func (b *bothStatements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (b *bothStatements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (b *bothStatements) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	b[0].see(d.SQL)
	b[1].see(d.SQL)
}

func (b *bothStatements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
