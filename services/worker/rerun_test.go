package worker_test

import (
	"context"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
)

// failFirstStep makes the first write of a transcript step in h's schema
// fail as a Postgres that is restarting does (57P03, cannot_connect_now:
// pg.IsUnavailable), once: the turn consumer runs the turn again in place,
// under the same delivery. A sequence counts the writes, since a
// trigger's own writes roll back with the failed insert.
func failFirstStep(t *testing.T, h *harness) {
	t.Helper()
	for _, q := range []string{
		`CREATE SEQUENCE fail_first_step`,
		`CREATE FUNCTION fail_first_step() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF nextval('fail_first_step') = 1 THEN
				RAISE EXCEPTION 'the database system is starting up' USING ERRCODE = '57P03';
			END IF;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER fail_first_step BEFORE INSERT ON transcript_messages FOR EACH ROW EXECUTE FUNCTION fail_first_step()`,
	} {
		if _, err := h.db.Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
}

// A turn that the database's outage stopped after its model call
// streamed text runs again in place (the consumer's retry while a
// dependency is down, which uses no delivery attempt), and that run, as
// a later attempt, streams nothing: its deltas would be spliced onto
// the text the first run streamed, which a chat's message then shows
// twice ("Let me check.Let me check."), for good once a tool call closes
// the message's segment. The final carries the whole answer.
func TestTurnRunAgainInPlaceStreamsNoSecondCopy(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	failFirstStep(t, h)
	h.startWorker("w1", nil)
	step := fakellm.Reply{Text: "Let me check.", ToolCalls: []fakellm.ToolCall{{Name: "clock", Arguments: `{}`}}}
	h.fake.Enqueue(step, step, fakellm.Reply{Text: "It is late."})
	req := h.requestTurn("s1", "what time is it?", turnOpts{})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v (%s)", c.GetStatus(), c.GetError())
	}
	evs := h.replies(req.TurnId)
	var streamed strings.Builder
	for _, ev := range evs {
		streamed.WriteString(ev.GetTextDelta().GetText())
	}
	if n := strings.Count(streamed.String(), "Let me check."); n != 1 {
		t.Errorf("streamed %q: the first step's text %d times, want once", streamed.String(), n)
	}
	if got := checkReplies(t, evs).GetFinalText().GetText(); got != "It is late." {
		t.Errorf("final %q", got)
	}
}
