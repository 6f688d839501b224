package router

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// backgroundUsage is Hermes's answer to /background without a prompt.
const backgroundUsage = "Usage: /background <prompt>\n" +
	"Example: /background Summarize the top HN stories today\n\n" +
	"Runs the prompt in a separate session. You can keep chatting — the result will appear here when done."

// backgroundTaskID is the id of the task /background m starts, in
// Hermes's shape, bg_<HHMMSS>_<6 hex digits>: the time the gateway
// received the message (UTC) and a hash of its event's id, so a
// redelivered message names the same task, and with it the same session.
func backgroundTaskID(m *msgCtx, now time.Time) string {
	at := now
	switch {
	case m.ev.GetReceivedAt().IsValid() && m.ev.GetReceivedAt().AsTime().Unix() > 0:
		at = m.ev.GetReceivedAt().AsTime()
	case m.ev.GetSentAt().IsValid() && m.ev.GetSentAt().AsTime().Unix() > 0:
		at = m.ev.GetSentAt().AsTime()
	}
	sum := sha256.Sum256([]byte(m.dedupeID))
	return "bg_" + at.UTC().Format("150405") + "_" + hex.EncodeToString(sum[:3])
}

// background handles /background <prompt>, Hermes's background task: the
// prompt runs as the one message of a fresh session of its own (no
// history of the chat's conversation), whose key sessionkey.Background
// derives from the chat's, so its turn runs beside the chat's turns
// under its own lock and neither waits for the other. It is queued and
// started as any message is (a crash anywhere leaves it to the
// redelivery, the sweep or the turn's redelivery, as any turn), with
// the chat's /model override, answer only (no streaming, no tool
// progress), and its answer goes to the chat, under Hermes's header
// (the worker's, by TurnRequested.background_task_id). The user gets
// Hermes's acknowledgement at once.
func (s *Service) background(ctx context.Context, m *msgCtx, sess sessionstore.Session, prompt string) error {
	if prompt == "" {
		return s.notice(ctx, m, sess.Generation, backgroundUsage, "command")
	}
	id := backgroundTaskID(m, s.now())
	bg := *m
	bg.key = sessionkey.Background(m.key, s.cfg.Profile, id)
	bg.ev = proto.CloneOf(m.ev)
	bg.ev.Text = prompt
	bg.ev.AnswerOnly = true
	bg.holder, bg.token, bg.lockKey, bg.early, bg.home, bg.hold = nil, "", "", nil, nil, 0

	// The acknowledgement first (a redelivery publishes it again under
	// the same id, which is dropped as a duplicate): the task's answer
	// cannot come before it.
	if err := s.notice(ctx, m, sess.Generation, fmt.Sprintf("🔄 Background task started: \"%s\"\nTask ID: %s\nYou can keep chatting — results will appear when done.",
		preview(prompt, 60), id), "command"); err != nil {
		return err
	}
	bg.notices = m.notices
	task, _, _, err := s.store.ArriveFork(ctx, bg.key, s.cfg.Profile, m.src, m.ev.GetEventId(), nil)
	if err != nil {
		return fmt.Errorf("background task session: %w", err)
	}
	if sess.ModelOverride != task.ModelOverride || sess.Personality != task.Personality || sess.ReasoningEffort != task.ReasoningEffort {
		// The chat's model (as Hermes resolves the task's from its
		// source), personality and reasoning effort (Hermes's are the
		// agent's, so its task has them), as they are now: a later
		// /personality or /reasoning in the chat is for the chat's next
		// message, not for a task already asked for. Not /reasoning show:
		// a task answers with its final answer alone, as Hermes's.
		if err := s.store.SetTurnSettings(ctx, bg.key, sess.ModelOverride, sess.Personality, sess.ReasoningEffort); err != nil {
			return fmt.Errorf("background task settings: %w", err)
		}
		task.ModelOverride, task.Personality, task.ReasoningEffort = sess.ModelOverride, sess.Personality, sess.ReasoningEffort
	}
	s.log.InfoContext(ctx, "background task", "session_key", m.key, "task_session_key", bg.key, "task_id", id)
	err = s.route(ctx, &bg, task, routeOpts{ownTurn: true, mode: BusyQueue, command: "background"})
	m.notices, m.marked = bg.notices, bg.marked
	return err
}
