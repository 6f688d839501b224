package router

import (
	"context"
	"fmt"

	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// once runs a command that changes durable state (/new, /branch,
// /resume, /title, /yolo, /verbose, /personality, /reasoning, /busy,
// /footer, /voice, /fast, /loop, /heartbeat, /stop, and /cron's verbs that change a job, whose store joins
// st's transaction through st.Tx) exactly once per inbound event and
// sends its answer; it also records a command's refusal while a turn
// runs (command), which a redelivery then answers again (replay). do applies the command
// with st, whose writes commit in one transaction with the record of the
// event and of the answer do returns (sessionstore.Once). A redelivery of
// the event after a crash between that commit and the record that the
// message was handled (the Redis dedupe record) finds the record: the
// command is not applied again, and the recorded answer is published
// again with the first one's generation, turn id and seq, so its bus
// message id and delivery's idempotency key are the first one's and the
// user gets one answer. Each such replay is counted
// (switchboard_router_commands_replayed_total{command}).
func (s *Service) once(ctx context.Context, m *msgCtx, name string, do func(ctx context.Context, st *sessionstore.Store) (text string, gen int64, err error)) error {
	return s.onceThen(ctx, m, name, do, nil)
}

// onceThen is once, with committed called right after do's effect
// commits, before the answer goes out (not for a redelivery, whose
// effect committed before): what must follow the commit, never precede
// it (/new and /stop free the stopped turn's lock there).
func (s *Service) onceThen(ctx context.Context, m *msgCtx, name string, do func(ctx context.Context, st *sessionstore.Store) (text string, gen int64, err error), committed func(context.Context)) error {
	a, done, err := s.store.Once(ctx, m.dedupeID, m.key, func(ctx context.Context, st *sessionstore.Store) (sessionstore.Answer, error) {
		text, gen, err := do(ctx, st)
		// The answer is the next notice about the event: do publishes none.
		return sessionstore.Answer{Text: text, Generation: gen, Seq: m.notices + 1}, err
	})
	if err != nil {
		return err
	}
	if done {
		return s.replay(ctx, m, name, a)
	}
	if committed != nil {
		committed(ctx)
	}
	return s.notice(ctx, m, a.Generation, a.Text, "command")
}

// replay sends again the answer a that once recorded for m's event, to
// its redelivery: the first answer's generation and seq, so its bus
// message id and delivery's idempotency key are the first one's.
func (s *Service) replay(ctx context.Context, m *msgCtx, name string, a sessionstore.Answer) error {
	commandsReplayed.WithLabelValues(name).Inc()
	s.log.InfoContext(ctx, "redelivered command applied already; answer sent again", "command", name,
		"session_key", m.key, "event", m.dedupeID)
	m.notices = a.Seq - 1
	return s.notice(ctx, m, a.Generation, a.Text, "command")
}

// refuseOnce answers m with the mid-turn refusal text, recorded with
// the event (once) so that it stays the answer, after marking the event
// in Redis (refusedKey) so that a redelivery knows to look for it
// (replayRefusal).
func (s *Service) refuseOnce(ctx context.Context, m *msgCtx, name, text string, gen int64) error {
	if err := s.rdb.Set(ctx, s.refusedKey(m.dedupeID), "1", s.cfg.DedupeTTL).Err(); err != nil {
		return fmt.Errorf("mark mid-turn refusal: %w", err)
	}
	return s.once(ctx, m, name, func(context.Context, *sessionstore.Store) (string, int64, error) {
		return text, gen, nil
	})
}

// replayRefusal answers a redelivery (a crash before the dedupe record)
// of an event refused while a turn ran, now that the turn ended, with
// that refusal again, under the first answer's ids, so that what the
// user was told waits does not run now; ok reports it did. Only an
// event marked as refused (read with the dedupe record), or redelivered
// by the bus (Redis, restarted, may have lost the mark), reads the
// record: a command in an idle session pays no Postgres read for it.
func (s *Service) replayRefusal(ctx context.Context, m *msgCtx, name string) (ok bool, err error) {
	if m.refusedBefore != nil && !*m.refusedBefore && !m.redelivered {
		return false, nil
	}
	a, found, err := s.store.Answered(ctx, m.dedupeID)
	if err != nil || !found {
		return false, err
	}
	return true, s.replay(ctx, m, name, a)
}
