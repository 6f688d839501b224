package router

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// backgroundUsage is Hermes's answer to /background without a prompt.
const backgroundUsage = "Usage: /background <prompt>\n" +
	"Example: /background Summarize the top HN stories today\n\n" +
	"Runs the prompt in a separate session. You can keep chatting — the result will appear here when done."

// backgroundNotOnAPI answers /background over the API: the task's result
// comes after the request that asked has ended, and an API response has
// nothing to carry it in (as Hermes's API server, which declines
// /background).
const backgroundNotOnAPI = "🔄 /background delivers its result after this request has ended, which an API response cannot carry, so it is not available on the API. " +
	"Send the prompt as a request of its own (in a session of its own to keep it apart from this conversation), or use /background from a chat platform (Telegram, Discord, Slack, …)."

// backgroundTaskID is the id of the task /background m starts, in
// Hermes's shape, bg_<HHMMSS>_<6 hex digits>: the time the gateway
// received the message (UTC) and a hash of its event's id, so a
// redelivered message names the same task, and with it the same session.
func backgroundTaskID(m *msgCtx, now time.Time) string {
	return taskID("bg", m, now)
}

// taskID is the id, <prefix>_<HHMMSS>_<6 hex digits>, of the task
// (/background's "bg", /btw's "btw") m asks for: see backgroundTaskID.
func taskID(prefix string, m *msgCtx, now time.Time) string {
	at := now
	switch {
	case m.ev.GetReceivedAt().IsValid() && m.ev.GetReceivedAt().AsTime().Unix() > 0:
		at = m.ev.GetReceivedAt().AsTime()
	case m.ev.GetSentAt().IsValid() && m.ev.GetSentAt().AsTime().Unix() > 0:
		at = m.ev.GetSentAt().AsTime()
	}
	sum := sha256.Sum256([]byte(m.dedupeID))
	return prefix + "_" + at.UTC().Format("150405") + "_" + hex.EncodeToString(sum[:3])
}

// background handles /background <prompt>, Hermes's background task: the
// prompt runs as the one message of a fresh session of its own (no
// history of the chat's conversation), whose key sessionkey.Background
// derives from the chat's, so its turn runs beside the chat's turns
// under its own lock and neither waits for the other. It is queued and
// started as any message is (a crash anywhere leaves it to the
// redelivery, the sweep or the turn's redelivery, as any turn), with
// the chat's /model, /personality, /reasoning effort and /fast as they are now,
// answer only (no streaming, no tool progress, no reasoning shown), and
// its answer goes to the chat, under Hermes's header (the worker's, by
// TurnRequested.background_task_id). The user gets Hermes's
// acknowledgement at once, or, with router.background.max_running tasks
// of the chat running, a refusal (admitBackground). Over the API it is
// refused (backgroundNotOnAPI).
func (s *Service) background(ctx context.Context, m *msgCtx, sess sessionstore.Session, prompt string) error {
	if m.platform == "api" {
		return s.notice(ctx, m, sess.Generation, backgroundNotOnAPI, "command")
	}
	if prompt == "" {
		return s.notice(ctx, m, sess.Generation, backgroundUsage, "command")
	}
	id := backgroundTaskID(m, s.now())
	bg := *m
	bg.key = sessionkey.Background(m.key, s.cfg.Profile, id)
	if refused, err := s.admitBackground(ctx, m, sess, bg.key, prompt); err != nil || refused {
		return err
	}
	bg.ev = proto.CloneOf(m.ev)
	bg.ev.Text = prompt
	bg.ev.AnswerOnly = true
	// The task's answer is a message of its own in the chat, which lists
	// no tool calls: a Responses request's /background must not have its
	// turn publish its calls' steps for nobody (lists_tool_calls).
	bg.ev.ListsToolCalls = false
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
	// The chat's model (as Hermes resolves the task's from its source),
	// personality and reasoning effort (Hermes's are the agent's, so its
	// task has them) and /fast (Hermes's task runs at the gateway's
	// service tier), as they are now: a later /personality or /reasoning
	// in the chat is for the chat's next message, not for a task already
	// asked for. Not /reasoning show: a task answers with its final
	// answer alone, as Hermes's.
	if err := s.takeChatSettings(ctx, bg.key, sess, &task, true); err != nil {
		return fmt.Errorf("background task: %w", err)
	}
	s.log.InfoContext(ctx, "background task", "session_key", m.key, "task_session_key", bg.key, "task_id", id)
	err = s.route(ctx, &bg, task, routeOpts{ownTurn: true, mode: BusyQueue, command: "background"})
	m.notices, m.marked = bg.notices, bg.marked
	return err
}

// backgroundTasksTTL is how long a chat's list of background tasks
// (backgroundTasksKey) outlives its last /background: a task still
// running that long after it was asked for no longer counts.
const backgroundTasksTTL = 7 * 24 * time.Hour

// backgroundTasksKey is the Redis sorted set of the session keys of the
// background tasks asked for in the chat chatKey, scored by when (Unix
// ms). It only says which tasks to look at: whether one is running is
// read from its session lock and queue (runningBackground).
func (s *Service) backgroundTasksKey(chatKey string) string {
	return s.prefix + "bgtasks:" + chatKey
}

// admitBackground applies router.background.max_running to the task
// whose session key is taskKey, asked for in m's chat: over the cap it
// answers how many run and reports refused, starting nothing; else it
// records the task in the chat's list, with the first words of its
// prompt (/agents shows them), before its session exists, so a crash
// after that leaves it counted once it runs. The list is kept, and
// pruned, with no cap too: /agents reads it. A task whose session exists already (a
// redelivery of the command) was admitted before. The chat's messages
// are handled one at a time (its inbound partition), so two /bg of one
// chat never pass the cap together.
func (s *Service) admitBackground(ctx context.Context, m *msgCtx, sess sessionstore.Session, taskKey, prompt string) (refused bool, err error) {
	switch _, err := s.store.Get(ctx, taskKey); {
	case err == nil:
		return false, nil
	case !errors.Is(err, sessionstore.ErrNotFound):
		return false, fmt.Errorf("background task session: %w", err)
	}
	// Counted with no cap too: the count prunes the tasks that ended,
	// which keeps the list /agents reads short.
	running, err := s.runningBackground(ctx, m.key, taskKey)
	if err != nil {
		return false, err
	}
	if limit := s.cfg.Background.MaxRunning; limit > 0 && running >= limit {
		s.log.InfoContext(ctx, "background task refused", "session_key", m.key, "running", running, "max_running", limit)
		return true, s.notice(ctx, m, sess.Generation, fmt.Sprintf("⏳ %s already running in this chat (at most %d at a time). "+
			"Nothing was started: try again when one has finished (its result will appear here).",
			plural(running, "background task"), limit), "command")
	}
	return false, s.recordTask(ctx, m.key, taskKey, prompt)
}

// recordTask adds the task (a /background task or a /btw side question)
// whose session key is taskKey to the list of the chat chatKey, with the
// first words of its prompt, for /agents. A task already listed (a
// redelivery of its command) keeps when it was first asked for.
func (s *Service) recordTask(ctx context.Context, chatKey, taskKey, prompt string) error {
	key, prompts := s.backgroundTasksKey(chatKey), s.backgroundPromptsKey(chatKey)
	pipe := s.rdb.TxPipeline()
	pipe.ZAddNX(ctx, key, redis.Z{Score: float64(s.now().UnixMilli()), Member: taskKey})
	pipe.HSetNX(ctx, prompts, taskKey, oneLine(prompt, 60))
	pipe.Expire(ctx, key, backgroundTasksTTL)
	pipe.Expire(ctx, prompts, backgroundTasksTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("record background task: %w", err)
	}
	return nil
}

// isSideQuestion reports whether the session key is a /btw side
// question's (its task id starts with btw_).
func (s *Service) isSideQuestion(key string) bool {
	id, ok := sessionkey.BackgroundTask(key, s.cfg.Profile)
	return ok && strings.HasPrefix(id, btwTaskPrefix)
}

// runningBackground counts the background tasks of the chat chatKey
// other than self that run or are about to: those whose session lock is
// held (a router's grant from the turn's start until a worker claims it,
// then the worker's, renewed while it runs; released when the turn ends
// or fails, expired when its worker died and nobody took the turn up)
// and those whose message waits in their queue (the sweep will start
// it). A task between admitBackground and its start is never seen by
// another /background of its chat: the chat's messages are handled one
// at a time, and a crash in between holds the chat's partition until the
// command's redelivery, which counts itself out (self). Stored state
// only, so every replica counts the same and a crash forgets nothing;
// the tasks that no longer run are dropped from the list. The chat's
// /btw side questions share the list (/agents shows them) but are not
// counted: router.background.max_running is about /background tasks.
func (s *Service) runningBackground(ctx context.Context, chatKey, self string) (int, error) {
	key := s.backgroundTasksKey(chatKey)
	keys, err := s.rdb.ZRange(ctx, key, 0, -1).Result()
	if err != nil {
		return 0, fmt.Errorf("read background tasks: %w", err)
	}
	if len(keys) == 0 {
		return 0, nil
	}
	pipe := s.rdb.Pipeline()
	locks := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		locks[i] = pipe.Exists(ctx, s.locker.Key(k))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("read background task locks: %w", err)
	}
	queued, err := s.store.QueuedKeys(ctx, keys)
	if err != nil {
		return 0, err
	}
	running := 0
	var ended []any
	for i := range keys {
		switch {
		case keys[i] == self:
		case locks[i].Val() > 0 || queued[keys[i]]:
			if !s.isSideQuestion(keys[i]) {
				running++
			}
		default:
			ended = append(ended, keys[i])
		}
	}
	if len(ended) > 0 {
		pipe := s.rdb.TxPipeline()
		pipe.ZRem(ctx, key, ended...)
		pipe.HDel(ctx, s.backgroundPromptsKey(chatKey), anyStrings(ended)...)
		if _, err := pipe.Exec(ctx); err != nil {
			s.log.WarnContext(ctx, "forget ended background tasks", "session_key", chatKey, "err", err)
		}
	}
	return running, nil
}

// anyStrings are the strings of vs.
func anyStrings(vs []any) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i], _ = v.(string)
	}
	return out
}

// takeChatSettings gives the task session task (key) the chat session's
// turn settings where they differ: its model, reasoning effort, /fast
// and, with personality, its personality.
func (s *Service) takeChatSettings(ctx context.Context, key string, chat sessionstore.Session, task *sessionstore.Session, personality bool) error {
	want := ""
	if personality {
		want = chat.Personality
	}
	if chat.ModelOverride != task.ModelOverride || want != task.Personality || chat.ReasoningEffort != task.ReasoningEffort {
		if err := s.store.SetTurnSettings(ctx, key, chat.ModelOverride, want, chat.ReasoningEffort); err != nil {
			return fmt.Errorf("settings: %w", err)
		}
		task.ModelOverride, task.Personality, task.ReasoningEffort = chat.ModelOverride, want, chat.ReasoningEffort
	}
	if chat.ServiceTier != task.ServiceTier {
		if err := s.store.SetServiceTier(ctx, key, chat.ServiceTier); err != nil {
			return fmt.Errorf("fast mode: %w", err)
		}
		task.ServiceTier = chat.ServiceTier
	}
	return nil
}
