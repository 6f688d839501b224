package router

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchboard-chat/switchboard/pkg/cron"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// /agents (/tasks) is Hermes's "Show active agents and running tasks"
// (gateway/run.py, _handle_agents_command; busy_policy dispatch): it
// answers while a turn runs and changes nothing. Hermes reads its own
// process's memory (its running agents and when each began, its
// background processes, its asyncio jobs); here any router replica
// answers, from shared state only:
//
//   - the chat's running turn: its session lock (Redis). The lock's value
//     already says everything needed, so no turn pays for /agents: a
//     router grants the lock to a turn under a token that records when
//     the turn was started (redisx.NewGrant), and the worker that takes
//     the turn claims it as "<grant>/<worker id>.<attempt>". A bare grant
//     is a turn no worker has taken yet (Hermes's "starting"; "stalled"
//     when its router stopped before handing it over: see turnRow), a
//     claimed one runs on that worker;
//   - the messages waiting behind it: the session's queue (Postgres);
//   - the chat's /background tasks in flight: the chat's task list
//     (backgroundTasksKey), each task's lock and queue as
//     runningBackground counts them, with the first words of its prompt
//     (backgroundPromptsKey) and how long ago it was asked for;
//   - the chat's /btw side questions in flight, listed with its
//     /background tasks (recordTask) and shown apart, with the first
//     words of the question;
//   - the chat's cron jobs with a run in flight (running_run_id;
//     cron_jobs), when there are any.
//
// Hermes lists every session of the gateway to a configured admin with
// --all, and the caller's session only to anyone else (and, older, to
// all); here the answer is always about the chat it is asked in, whose
// messages share one partition and one queue, and no other chat's
// activity is ever shown.

// agentsListed bounds each list of /agents, as Hermes's 12.
const agentsListed = 12

// agentsHeader and agentsNone are Hermes's words.
const (
	agentsHeader = "🤖 **Active Agents & Tasks**"
	agentsNone   = "No active agents or running tasks."
)

// backgroundPromptsKey is the Redis hash of the first words of the
// prompts of the chat chatKey's background tasks, by the task's session
// key; it lives and is pruned with backgroundTasksKey.
func (s *Service) backgroundPromptsKey(chatKey string) string {
	return s.prefix + "bgprompts:" + chatKey
}

// agents answers /agents. owner is the session lock's value, read by
// command ("" when free).
func (s *Service) agents(ctx context.Context, m *msgCtx, owner string) error {
	text, err := s.agentsText(ctx, m, owner)
	if err != nil {
		return err
	}
	return s.notice(ctx, m, 0, text, "command")
}

// bgTask is one of the chat's background tasks in flight.
type bgTask struct {
	id, state, prompt string
	asked             time.Time
	side              bool // a /btw side question
}

// agentsText reads the chat's activity and writes /agents' answer. It
// takes no lock and writes nothing: an ended task stays on the chat's
// list until the next /background prunes it (runningBackground).
func (s *Service) agentsText(ctx context.Context, m *msgCtx, owner string) (string, error) {
	now := s.now()
	// One Redis round trip for the chat's tasks, one Postgres round trip
	// for its queue; the tasks' locks and queues only when it has any.
	pipe := s.rdb.Pipeline()
	tasksCmd := pipe.ZRangeWithScores(ctx, s.backgroundTasksKey(m.key), 0, -1)
	promptsCmd := pipe.HGetAll(ctx, s.backgroundPromptsKey(m.key))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("read background tasks: %w", err)
	}
	// Steering the running turn took is that turn's, not a waiting message.
	waiting, head, err := s.store.PeekWaiting(ctx, m.key, owner, agentsListed)
	if err != nil {
		return "", err
	}
	all, err := s.tasksInFlight(ctx, tasksCmd.Val(), promptsCmd.Val())
	if err != nil {
		return "", err
	}
	var tasks, sides []bgTask
	for _, t := range all {
		if t.side {
			sides = append(sides, t)
		} else {
			tasks = append(tasks, t)
		}
	}
	jobs := s.cronRunning(ctx, m)

	var b strings.Builder
	b.WriteString(agentsHeader + "\n\n")
	if owner == "" {
		b.WriteString("**Active agents:** 0\n")
	} else {
		b.WriteString("**Active agents:** 1\n")
		b.WriteString(s.turnRow(ctx, m, owner, now) + "\n")
	}
	if waiting > 0 {
		fmt.Fprintf(&b, "\n**Waiting messages:** %d\n", waiting)
		for _, q := range head {
			fmt.Fprintf(&b, "- %s · %s\n", uptime(now.Sub(q.EnqueuedAt)), queuedPreview(q))
		}
		if waiting > len(head) {
			fmt.Fprintf(&b, "... and %d more\n", waiting-len(head))
		}
	}
	fmt.Fprintf(&b, "\n**Background tasks:** %d\n", len(tasks))
	writeTasks(&b, tasks, now)
	if len(sides) > 0 {
		fmt.Fprintf(&b, "\n**Side questions (/btw):** %d\n", len(sides))
		writeTasks(&b, sides, now)
	}
	if len(jobs) > 0 {
		fmt.Fprintf(&b, "\n**Cron jobs running:** %d\n", len(jobs))
		for i, j := range jobs {
			if i == agentsListed {
				fmt.Fprintf(&b, "... and %d more\n", len(jobs)-agentsListed)
				break
			}
			row := fmt.Sprintf("- `%s` · %s", j.ID, oneLine(j.Name, 70))
			if _, at, _, err := cron.ParseRunID(j.RunningRunID); err == nil {
				row += " · " + uptime(now.Sub(at))
			}
			b.WriteString(row + "\n")
		}
	}
	if owner == "" && waiting == 0 && len(all) == 0 && len(jobs) == 0 {
		b.WriteString("\n" + agentsNone + "\n")
	}
	return strings.TrimRight(b.String(), "\n"), nil
}

// writeTasks writes a row a task, the first agentsListed: its id, state,
// age and the first words of its prompt.
func writeTasks(b *strings.Builder, tasks []bgTask, now time.Time) {
	for i, t := range tasks {
		if i == agentsListed {
			fmt.Fprintf(b, "... and %d more\n", len(tasks)-agentsListed)
			return
		}
		row := fmt.Sprintf("- `%s` · %s · %s", t.id, t.state, uptime(now.Sub(t.asked)))
		if t.prompt != "" {
			row += " · " + t.prompt
		}
		b.WriteString(row + "\n")
	}
}

// turnRow is the row of the chat's running turn, in Hermes's shape:
// "1. `<session key>` · <state> · <uptime>[ · `<session id>`][ ·
// `<model>`]", here with the worker that runs it. The uptime counts from
// the turn's start (its grant's time); a lock value without one (a
// release before grants recorded it) shows none.
//
// A turn no worker has taken is "starting" (Hermes's pending agent),
// unless its grant is orphaned (Service.orphaned, the sweep's own test:
// older than router.lock_ttl and its start never committed, so the
// router that took the lock stopped before handing the turn to the
// workers): then it is "stalled", and the router's sweep will start the
// chat's waiting messages again under a grant of its own (its message,
// unacknowledged, comes back to a router within router.ack_wait if it
// was not queued yet). The look costs one session read, made only for
// /agents and only for a turn that has stood unclaimed past
// router.lock_ttl: nothing is added to any turn's start.
func (s *Service) turnRow(ctx context.Context, m *msgCtx, owner string, now time.Time) string {
	grant, holder, claimed := strings.Cut(owner, "/")
	at, timed := redisx.GrantTime(grant)
	state := "running"
	if !claimed {
		state = "starting"
		if stalled, err := s.orphaned(ctx, m.key, grant); err != nil {
			s.log.WarnContext(ctx, "agents: read session", "session_key", m.key, "err", err)
		} else if stalled {
			state = "stalled"
		}
	}
	row := "1. `" + m.key + "` · " + state
	if timed {
		row += " · " + uptime(now.Sub(at))
	}
	switch state {
	case "stalled":
		return row + " · the router that started it stopped before a worker took it; it will be started again"
	case "starting":
		// As Hermes's pending agent: no session or model yet, and no
		// worker has taken the turn.
		return row + " · waiting for a worker"
	}
	sess, err := s.store.Get(ctx, m.key)
	switch {
	case err == nil:
		row += " · `" + sess.ID + "`"
		if model := s.modelOf(sess); model != "" {
			row += " · `" + model + "`"
		}
	case !errors.Is(err, sessionstore.ErrNotFound):
		s.log.WarnContext(ctx, "agents: read session", "session_key", m.key, "err", err)
	}
	if holder == leaseHolderID {
		// Redis lost the turn's lock, which its worker has not claimed
		// again yet: its lease says it runs, not where.
		return row + " · its worker not known until it claims the session's lock again"
	}
	return row + " · worker `" + workerOf(holder) + "`"
}

// modelOf is the model a session's turns use, as far as the router
// knows: its /model, else the configured default ("" for an external
// agent, which chooses its own).
func (s *Service) modelOf(sess sessionstore.Session) string {
	if sess.ModelOverride != "" {
		return sess.ModelOverride
	}
	if s.provider.Agent != "" {
		return ""
	}
	return s.provider.Model
}

// workerOf is the worker id in a lock holder's id "<worker id>.<attempt>"
// (the worker's own id may contain dots).
func workerOf(holder string) string {
	if i := strings.LastIndexByte(holder, '.'); i > 0 && isDigits(holder[i+1:]) {
		return holder[:i]
	}
	return holder
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// tasksInFlight are the chat's background tasks (the members of its
// list, with when each was asked for) that run or are about to, oldest
// first: held by a worker (running), granted to a turn no worker took
// yet (starting), or queued (waiting). Read as runningBackground counts.
func (s *Service) tasksInFlight(ctx context.Context, list []redis.Z, prompts map[string]string) ([]bgTask, error) {
	if len(list) == 0 {
		return nil, nil
	}
	keys := make([]string, len(list))
	pipe := s.rdb.Pipeline()
	locks := make([]*redis.StringCmd, len(list))
	for i, z := range list {
		keys[i], _ = z.Member.(string)
		locks[i] = pipe.Get(ctx, s.locker.Key(keys[i]))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read background task locks: %w", err)
	}
	queued, err := s.store.QueuedKeys(ctx, keys)
	if err != nil {
		return nil, err
	}
	var out []bgTask
	for i, key := range keys {
		t := bgTask{prompt: prompts[key], asked: time.UnixMilli(int64(list[i].Score))}
		id, ok := sessionkey.BackgroundTask(key, s.cfg.Profile)
		if !ok {
			continue
		}
		t.id, t.side = id, strings.HasPrefix(id, btwTaskPrefix)
		switch v := locks[i].Val(); {
		case strings.Contains(v, "/"):
			t.state = "running"
		case v != "":
			t.state = "starting"
		case queued[key]:
			t.state = "waiting"
		default:
			continue // ended
		}
		out = append(out, t)
	}
	slices.SortStableFunc(out, func(a, b bgTask) int { return a.asked.Compare(b.asked) })
	return out, nil
}

// cronRunning are the cron jobs of m's chat (its owner's, as /cron
// lists them) with a run in flight. The jobs are optional to the
// answer: a failed read is logged and leaves them out, as Hermes leaves
// out a source it cannot read.
func (s *Service) cronRunning(ctx context.Context, m *msgCtx) []cron.Job {
	owner := cron.Owner(m.src.GetPlatform(), m.src.GetChatType(), m.src.GetUserId(), m.src.GetUserIdAlt(), m.key)
	list, err := s.cron.List(ctx, owner, true)
	if err != nil {
		s.log.WarnContext(ctx, "agents: list cron jobs", "err", err)
		return nil
	}
	var out []cron.Job
	for _, j := range list {
		if j.Running() {
			out = append(out, j)
		}
	}
	return out
}

// queuedPreview is a waiting message as /agents shows it: its first 60
// characters on one line, or what it carries when it has no text.
func queuedPreview(q sessionstore.Queued) string {
	if t := oneLine(shownText(q.Event.GetText()), 60); t != "" {
		return t
	}
	if n := len(q.Event.GetAttachments()); n > 0 {
		return "(" + plural(n, "attachment") + ")"
	}
	return "(empty)"
}

// oneLine is text with its whitespace squashed to single spaces, cut to
// n characters (Hermes's preview: "..." after a cut one).
func oneLine(text string, n int) string {
	return preview(strings.Join(strings.Fields(text), " "), n)
}

// uptime is Hermes's format_uptime_short: "42s", "3m 5s", "2h 10m".
func uptime(d time.Duration) string {
	sec := max(0, int64(d/time.Second))
	switch {
	case sec < 60:
		return fmt.Sprintf("%ds", sec)
	case sec < 3600:
		return fmt.Sprintf("%dm %ds", sec/60, sec%60)
	}
	return fmt.Sprintf("%dh %dm", sec/3600, sec%3600/60)
}
