package router

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// btwUsage is Hermes's answer to /btw without a question.
const btwUsage = "Usage: /btw <question>\n" +
	"Example: /btw what module owns session title sanitization?\n\n" +
	"Answers using session context. No tools, not persisted."

// btwNoHistory answers /btw in a chat that has had no turn yet: there
// is no conversation to ask about (Hermes's gateway.btw.no_history).
const btwNoHistory = "Nothing to ask about yet: this chat has no conversation. Send a message first, or ask it as a normal message."

// btwNotOnAPI answers /btw over the API: the side question's answer
// comes after the request that asked has ended, and an API response has
// nothing to carry it in (as Hermes's API server, which declines /btw).
const btwNotOnAPI = "💬 /btw answers after this request has ended, which an API response cannot carry, so it is not available on the API. " +
	"Ask the question as a normal message (its answer is this response, and it becomes part of the conversation), or use /btw from a chat platform (Telegram, Discord, Slack, …)."

// btwTaskPrefix starts the task id of a /btw side question
// ("btw_072011_a1b2c3"), which ends the key of its session.
const btwTaskPrefix = "btw_"

// btw handles /btw <question>, Hermes's side question: a question about
// the chat's conversation, answered without interrupting it and without
// becoming part of it. It takes /background's path (a session of its
// own under the key sessionkey.Background derives from the chat's, with
// the task id btw_HHMMSS_xxxxxx, so its turn runs beside the chat's
// under its own lock, queued and started as any message is, and a
// redelivered /btw names the same session and starts nothing more), with
// the chat's /model and /reasoning effort, answer only. Its turn carries
// TurnRequested.side_question (publishTurn): the worker answers from the
// chat's transcript as committed when it begins, offers the model no
// tools, writes nothing to any transcript, and delivers the answer to
// the chat under Hermes's "💬 /btw:" header. The user gets Hermes's
// acknowledgement at once. Unlike /background it is not counted against
// router.background.max_running: it makes a single model call. Over the
// API it is refused (btwNotOnAPI).
func (s *Service) btw(ctx context.Context, m *msgCtx, sess sessionstore.Session, question string) error {
	if m.platform == "api" {
		return s.notice(ctx, m, sess.Generation, btwNotOnAPI, "command")
	}
	if question == "" {
		return s.notice(ctx, m, sess.Generation, btwUsage, "command")
	}
	if sess.LastTurnID == "" {
		return s.notice(ctx, m, sess.Generation, btwNoHistory, "command")
	}
	id := taskID(strings.TrimSuffix(btwTaskPrefix, "_"), m, s.now())
	side := *m
	side.key = sessionkey.Background(m.key, s.cfg.Profile, id)
	side.ev = proto.CloneOf(m.ev)
	side.ev.Text = question
	side.ev.AnswerOnly = true
	side.holder, side.token, side.lockKey, side.early, side.home, side.hold = nil, "", "", nil, nil, 0

	// The acknowledgement first, as /background's: the answer cannot
	// come before it, and a redelivery's copy is dropped as a duplicate.
	if err := s.notice(ctx, m, sess.Generation, fmt.Sprintf("💬 /btw: \"%s\"\nReply will appear here shortly.", preview(question, 60)), "command"); err != nil {
		return err
	}
	side.notices = m.notices
	// Listed with the chat's /background tasks, for /agents, before its
	// session exists (a crash after this leaves it listed once it runs),
	// pruning the ended ones as /background does; not counted against
	// router.background.max_running (runningBackground).
	if _, err := s.runningBackground(ctx, m.key, side.key); err != nil {
		return err
	}
	if err := s.recordTask(ctx, m.key, side.key, question); err != nil {
		return err
	}
	task, _, _, err := s.store.ArriveFork(ctx, side.key, s.cfg.Profile, m.src, m.ev.GetEventId(), nil)
	if err != nil {
		return fmt.Errorf("side question session: %w", err)
	}
	// The chat's model, reasoning effort and /fast, as they are now; not
	// its personality (the side question has instructions of its own)
	// nor /reasoning show (it answers with its answer alone).
	if err := s.takeChatSettings(ctx, side.key, sess, &task, false); err != nil {
		return fmt.Errorf("side question: %w", err)
	}
	s.log.InfoContext(ctx, "side question", "session_key", m.key, "task_session_key", side.key, "task_id", id)
	err = s.route(ctx, &side, task, routeOpts{ownTurn: true, mode: BusyQueue, command: "btw"})
	m.notices, m.marked = side.notices, side.marked
	return err
}

// sideQuestion is what the turn of the session key asks about when it is
// a /btw side question's (its task id starts with btw_): the chat's
// conversation as it is now. ok is false for every other key.
func (s *Service) sideQuestion(ctx context.Context, key string) (sq *turnsv1.SideQuestion, ok bool, err error) {
	id, ok := sessionkey.BackgroundTask(key, s.cfg.Profile)
	if !ok || !strings.HasPrefix(id, btwTaskPrefix) {
		return nil, false, nil
	}
	chatKey, ok := sessionkey.BackgroundChat(key, s.cfg.Profile)
	if !ok {
		return &turnsv1.SideQuestion{}, true, nil
	}
	chat, err := s.store.Get(ctx, chatKey)
	switch {
	case err == nil:
		return &turnsv1.SideQuestion{SessionId: chat.ID}, true, nil
	case errors.Is(err, sessionstore.ErrNotFound):
		// The chat's session is gone: a question without context.
		return &turnsv1.SideQuestion{}, true, nil
	}
	return nil, false, fmt.Errorf("side question's chat: %w", err)
}
