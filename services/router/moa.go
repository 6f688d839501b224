package router

import (
	"context"
	"fmt"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/command"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// moaCommand marks a queued message as a /moa prompt
// (MessageReceived.transcript_command, which the router alone sets):
// publishTurn turns it into TurnRequested.moa.
const moaCommand = "moa"

// moaBusy is Hermes's answer to /moa while the chat's agent runs
// (_BUSY_REJECT_TEXT["moa"]): /moa is busy_policy reject.
const moaBusy = "Agent is running — wait or /stop first, then run /moa."

// moaNotConfigured answers /moa where no preset is configured.
const moaNotConfigured = "Mixture of Agents is not configured here: the operator names its reference models " +
	"(agent.moa.reference_models, and optionally agent.moa.aggregator_model) in the config."

// moa handles /moa <prompt>, Hermes's one-shot Mixture of Agents: the
// prompt runs as a turn of the chat's conversation whose answer comes
// from the configured preset (the reference models, then the
// aggregator: the worker's mixture) instead of the session's model,
// which stays as it was: nothing about the session changes, so there is
// nothing to restore. A bare /moa answers Hermes's usage; without a
// preset, moaNotConfigured; while the chat's agent runs, Hermes's
// refusal (busy is the lock's holder as command read it). The prompt
// waits in the queue as its own turn, marked moaCommand, and is said to
// run before it does.
func (s *Service) moa(ctx context.Context, m *msgCtx, sess sessionstore.Session, args string, busy bool) error {
	prompt, err := command.ParseMoA(args)
	if err != nil {
		return s.notice(ctx, m, sess.Generation, command.MoAUsage, "command")
	}
	if len(s.cfg.MoAReferences) == 0 {
		return s.notice(ctx, m, sess.Generation, moaNotConfigured, "command")
	}
	if busy {
		return s.refuseOnce(ctx, m, "moa", moaBusy, sess.Generation)
	}
	// A /moa refused while a turn ran, redelivered after it: no turn starts.
	if done, err := s.replayRefusal(ctx, m, "moa"); err != nil || done {
		return err
	}
	aggregator := s.cfg.MoAAggregator
	if aggregator == "" {
		aggregator = "this chat's model"
	}
	ack := fmt.Sprintf("🧠 Mixture of Agents: %s, then %s. Your model is restored after this turn.",
		strings.Join(s.cfg.MoAReferences, ", "), aggregator)
	if err := s.notice(ctx, m, sess.Generation, ack, "command"); err != nil {
		return err
	}
	one := m.withText(prompt)
	one.ev.TranscriptCommand = moaCommand
	err = s.route(ctx, one, sess, routeOpts{ownTurn: true, mode: BusyQueue, command: "moa"})
	m.notices, m.marked = one.notices, one.marked
	return err
}
