package router

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/switchboard-chat/switchboard/pkg/cron"
	"github.com/switchboard-chat/switchboard/pkg/cron/schedule"
	"github.com/switchboard-chat/switchboard/pkg/cron/scheduler"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
)

// cronUsage is the /cron command's list, as Hermes's.
const cronUsage = "Commands:\n" +
	"  /cron list [all]\n" +
	"  /cron add <schedule> <prompt>   (schedule: 30m, \"every 2h\", \"0 9 * * *\", 2026-03-15T09:00)\n" +
	"  /cron pause <job_id>\n" +
	"  /cron resume <job_id>\n" +
	"  /cron run <job_id>\n" +
	"  /cron edit <job_id> [--schedule S] [--prompt P] [--name N] [--deliver D] [--repeat N]\n" +
	"  /cron remove <job_id>"

// cronChanges tells whether /cron args changes a job (add, edit, pause,
// resume, run, remove and their aliases): those run once per inbound
// event (Service.once), the others only read.
func cronChanges(args string) bool {
	sub, _, _ := strings.Cut(strings.TrimSpace(args), " ")
	switch strings.ToLower(sub) {
	case "add", "create", "edit", "update", "pause", "resume", "run", "remove", "rm", "delete":
		return true
	}
	return false
}

// cronCommand runs /cron for the sender on jobs (s.cron, or a copy of it
// in the transaction of Service.once): each user (in a group, each
// session) sees and changes only their own jobs, as the agent's cronjob
// tool does for the same owner.
func (s *Service) cronCommand(ctx context.Context, m *msgCtx, jobs *cron.Store, args string) string {
	owner := cron.Owner(m.src.GetPlatform(), m.src.GetChatType(), m.src.GetUserId(), m.src.GetUserIdAlt(), m.key)
	sub, rest, _ := strings.Cut(strings.TrimSpace(args), " ")
	rest = strings.TrimSpace(rest)
	sub = strings.ToLower(sub)
	switch sub {
	case "help":
		return cronUsage
	case "":
		// As Hermes: the commands, then the current jobs.
		list, err := jobs.List(ctx, owner, false)
		if err != nil {
			s.log.WarnContext(ctx, "list cron jobs", "err", err)
			return cronUsage
		}
		if len(list) == 0 {
			return cronUsage + "\n\nNo scheduled jobs. Use '/cron add' to create one."
		}
		return cronUsage + "\n\n" + s.cronList(list)
	case "list", "ls":
		list, err := jobs.List(ctx, owner, strings.EqualFold(rest, "all"))
		if err != nil {
			s.log.WarnContext(ctx, "list cron jobs", "err", err)
			return "Failed to list jobs: the job store is unavailable."
		}
		return s.cronList(list)
	case "add", "create":
		sched, prompt := splitSchedule(rest)
		if sched == "" || prompt == "" {
			return "Usage: /cron add <schedule> <prompt>"
		}
		j, err := jobs.Create(ctx, cron.NewJob{Owner: owner, Prompt: prompt, Schedule: sched,
			Origin: cron.Origin{Platform: m.src.GetPlatform(), Account: m.src.GetAccount(), ChatID: m.src.GetChatId(), ThreadID: m.src.GetThreadId()}})
		if err != nil {
			return "Failed to create job: " + s.cronError(ctx, err)
		}
		return fmt.Sprintf("Created job: %s\n  Schedule: %s\n  Next run: %s", j.ID, j.Display, s.when(j.NextRunAt))
	case "edit", "update":
		return s.cronEdit(ctx, jobs, owner, rest)
	case "pause", "resume", "run", "remove", "rm", "delete":
		if rest == "" {
			return "Usage: /cron " + sub + " <job_id>"
		}
		var (
			j   cron.Job
			err error
		)
		action := sub
		switch sub {
		case "pause":
			j, err = jobs.Pause(ctx, owner, rest)
		case "resume":
			j, err = jobs.Resume(ctx, owner, rest)
		case "run":
			j, err = jobs.Trigger(ctx, owner, rest)
		default:
			action = "remove"
			j, err = jobs.Remove(ctx, owner, rest)
		}
		if errors.Is(err, cron.ErrNotFound) {
			return fmt.Sprintf("Failed to %s job: Job with ID or name '%s' not found. Use /cron list to see your jobs.", action, rest)
		}
		if err != nil {
			return fmt.Sprintf("Failed to %s job: %s", action, s.cronError(ctx, err))
		}
		switch action {
		case "pause":
			return fmt.Sprintf("Paused job: %s (%s)", j.Name, j.ID)
		case "resume":
			return fmt.Sprintf("Resumed job: %s (%s)\n  Next run: %s", j.Name, j.ID, s.when(j.NextRun()))
		case "run":
			if j.Running() {
				// Held by its run in flight until the run ends.
				return fmt.Sprintf("Triggered job: %s (%s)\n  It will run once its current run ends.", j.Name, j.ID)
			}
			return fmt.Sprintf("Triggered job: %s (%s)\n  It will run on the next scheduler tick.", j.Name, j.ID)
		}
		return fmt.Sprintf("Removed job: %s (%s)", j.Name, j.ID)
	}
	return fmt.Sprintf("Unknown cron command: %s\n  Available: list, add, edit, pause, resume, run, remove", sub)
}

// cronEdit is Hermes's /cron edit (hermes cron edit): the job's schedule,
// prompt, name, deliver target or repeat count, each a flag; the rest of
// the words name the job. Skills, models and scripts are Hermes's per-job
// settings Switchboard has no counterpart for: refused, not ignored.
func (s *Service) cronEdit(ctx context.Context, jobs *cron.Store, owner, args string) string {
	ref, u, err := parseCronEdit(args)
	if err != nil {
		return "Failed to update job: " + err.Error()
	}
	if ref == "" {
		return cronEditUsage
	}
	if u == (cron.Update{}) {
		return "Failed to update job: No updates provided."
	}
	j, err := jobs.Update(ctx, owner, ref, u)
	if errors.Is(err, cron.ErrNotFound) {
		return fmt.Sprintf("Failed to update job: Job with ID or name '%s' not found. Use /cron list to see your jobs.", ref)
	}
	if err != nil {
		return "Failed to update job: " + s.cronError(ctx, err)
	}
	return fmt.Sprintf("Updated job: %s\n  Name: %s\n  Schedule: %s (%s)\n  Next run: %s", j.ID, j.Name, j.Display, j.RepeatDisplay(), s.when(j.NextRun()))
}

const cronEditUsage = "Usage: /cron edit <job_id> [--schedule S] [--prompt P] [--name N] [--deliver D] [--repeat N]"

// Hermes's cron edit options that have no counterpart here.
var cronEditUnsupported = map[string]string{
	"--skill": "skills", "--skills": "skills", "--add-skill": "skills", "--remove-skill": "skills", "--clear-skills": "skills",
	"--model": "models", "--provider": "models", "--pinned": "models", "--reasoning-effort": "models",
	"--script": "scripts", "--no-agent": "scripts", "--interpreter": "scripts", "--monitor-script": "scripts", "--monitor-url": "scripts",
	"--workdir": "working directories", "--continuity": "continuity", "--failure-deliver": "failure targets",
}

// parseCronEdit reads /cron edit's arguments, quoted as a shell quotes
// ("…", '…'): --flag value or --flag=value options, and the other words,
// which name the job.
func parseCronEdit(args string) (string, cron.Update, error) {
	var u cron.Update
	words, err := shellWords(args)
	if err != nil {
		return "", u, err
	}
	var ref []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		if !strings.HasPrefix(w, "--") {
			ref = append(ref, w)
			continue
		}
		flag, val, hasVal := strings.Cut(w, "=")
		flag = strings.ToLower(flag)
		if what, ok := cronEditUnsupported[flag]; ok {
			return "", u, fmt.Errorf("%s: Switchboard's cron jobs have no per-job %s", flag, what)
		}
		switch flag {
		case "--schedule", "--prompt", "--name", "--deliver", "--repeat":
		default:
			return "", u, fmt.Errorf("unknown option %s (use --schedule, --prompt, --name, --deliver or --repeat)", flag)
		}
		if !hasVal {
			if i+1 >= len(words) {
				return "", u, fmt.Errorf("%s needs a value", flag)
			}
			i++
			val = words[i]
		}
		switch flag {
		case "--schedule":
			u.Schedule = &val
		case "--prompt":
			u.Prompt = &val
		case "--name":
			u.Name = &val
		case "--deliver":
			u.Deliver = &val
		case "--repeat":
			n, err := repeatValue(val)
			if err != nil {
				return "", u, err
			}
			u.Repeat = &n
		}
	}
	return strings.Join(ref, " "), u, nil
}

// repeatValue is Hermes's repeat: a count, "once", or "forever" (0).
func repeatValue(v string) (int, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "forever", "infinite", "inf", "none":
		return 0, nil
	case "once", "one", "1x":
		return 1, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 || n > 1_000_000 {
		return 0, fmt.Errorf("invalid repeat value %q: use a count, 'forever' or 'once'", v)
	}
	return n, nil
}

// shellWords splits s at spaces outside quotes, as a shell does: '…'
// keeps its text as it is; "…" too, but for \" and \\; outside quotes a
// backslash keeps the next character. It reads bytes (every byte it
// acts on is ASCII), so text that is not UTF-8 passes through as it is.
func shellWords(s string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		in    bool // inside a word
		quote byte
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '\'':
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case quote == '"':
			switch {
			case c == '"':
				quote = 0
			case c == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\'):
				i++
				cur.WriteByte(s[i])
			default:
				cur.WriteByte(c)
			}
		case c == '"' || c == '\'':
			quote, in = c, true
		case c == '\\':
			in = true
			if i+1 < len(s) {
				i++
			}
			cur.WriteByte(s[i])
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unclosed %c quote", quote)
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}

// cronError is what the user reads of a failed change: the reason when
// it is theirs to fix, a generic line when the store failed.
func (s *Service) cronError(ctx context.Context, err error) string {
	if errors.Is(err, cron.ErrInvalid) || errors.Is(err, cron.ErrAmbiguous) {
		return cron.Message(err)
	}
	s.log.WarnContext(ctx, "cron job change failed", "err", err)
	return "the job store is unavailable; try again later."
}

func (s *Service) cronList(jobs []cron.Job) string {
	if len(jobs) == 0 {
		return "No scheduled jobs."
	}
	var b strings.Builder
	b.WriteString("Scheduled Jobs:")
	for _, j := range jobs {
		fmt.Fprintf(&b, "\n\n  ID: %s\n  Name: %s\n  State: %s\n  Schedule: %s (%s)\n  Next run: %s\n  Prompt: %s",
			j.ID, j.Name, j.State, j.Display, j.RepeatDisplay(), s.when(j.NextRun()), promptPreview(j.Prompt, 100))
		if !j.LastRunAt.IsZero() {
			fmt.Fprintf(&b, "\n  Last run: %s (%s)", s.when(j.LastRunAt), j.LastStatus)
		}
		// A run in flight holds the next one until it ends: say so, or
		// "Next run" in the past reads as a stuck job.
		if j.Running() {
			if j.LastRunID == j.RunningRunID && !j.LastRunAt.IsZero() {
				fmt.Fprintf(&b, "\n  Running since: %s", s.when(j.LastRunAt))
			} else {
				b.WriteString("\n  Running: a run is in flight")
			}
			if !j.NextSkipAt.IsZero() {
				b.WriteString(" (runs due meanwhile are skipped)")
			}
		}
		// As Hermes's job list: why the last run failed, and why its
		// answer did not arrive (last_delivery_error).
		if j.LastError != "" {
			fmt.Fprintf(&b, "\n  Last error: %s", promptPreview(j.LastError, 200))
		}
		if j.LastDeliveryError != "" {
			fmt.Fprintf(&b, "\n  Delivery failed: %s", promptPreview(j.LastDeliveryError, 200))
		}
		// Why the scheduler paused it (Hermes's paused_reason).
		if j.State == cron.StatePaused && j.PausedReason != "" {
			fmt.Fprintf(&b, "\n  Paused: %s", promptPreview(j.PausedReason, 300))
		}
	}
	return b.String()
}

func (s *Service) when(t time.Time) string {
	if t.IsZero() {
		return "N/A"
	}
	return t.In(s.cron.Location()).Format("2006-01-02 15:04 MST")
}

// promptPreview is Hermes's prompt_preview: the first n characters, then "...".
func promptPreview(p string, n int) string {
	p = strings.Join(strings.Fields(p), " ")
	if r := []rune(p); len(r) > n {
		return string(r[:n]) + "..."
	}
	return p
}

// splitSchedule reads /cron add's arguments: a quoted schedule ("every
// 2h", '0 9 * * *'), five cron fields or a day and time phrase ("every
// monday 9am"), "every <d>" or "in <d>", or else the first word; the
// rest is the prompt (quotes around it dropped). A phrase whose time is
// a bare number ("monday 3") is read only with "at" before it ("monday
// at 3"): unquoted, the number may as well start the prompt ("/cron add
// monday 3 things"), which Hermes's /cron add (cli.py
// _handle_cron_command: the first word is the schedule unless quoted)
// refuses as the invalid schedule "monday" rather than reading it as
// Mondays at 03:00; so does this. Quoted, "monday 3" is that time.
func splitSchedule(args string) (sched, prompt string) {
	args = strings.TrimSpace(args)
	if args == "" {
		return "", ""
	}
	if q := args[0]; q == '"' || q == '\'' {
		end := strings.IndexByte(args[1:], q)
		sched := ""
		if end >= 0 {
			sched = strings.TrimSpace(args[1 : end+1])
		}
		if sched == "" {
			return "", ""
		}
		return sched, unquote(args[end+2:])
	}
	fields := strings.Fields(args)
	take := 1
	switch n, bare := cronLen(fields); {
	case n > 0:
		take = n
	case bare:
		// The days and a bare number ("every day 7 stretch"): the first
		// word, as Hermes's, so that it is refused ("every"), not read
		// as the interval "every day" with the prompt "7 stretch".
	case len(fields) > 2 && (strings.EqualFold(fields[0], "every") || strings.EqualFold(fields[0], "in")):
		take = 2
	}
	if len(fields) <= take {
		return strings.Join(fields, " "), ""
	}
	// The prompt keeps its own spacing: cut after the schedule's words.
	rest := args
	for range take {
		rest = strings.TrimLeftFunc(rest, unicode.IsSpace)
		i := strings.IndexFunc(rest, unicode.IsSpace)
		if i < 0 {
			return strings.Join(fields[:take], " "), ""
		}
		rest = rest[i:]
	}
	return strings.Join(fields[:take], " "), unquote(rest)
}

// maxCronWords bounds the words of a day and time phrase ("every mon,
// tue, wed, thu and fri at 9:30 pm" is 11).
const maxCronWords = 16

// cronLen is the count of the leading words of fields, the most of
// them, that read as a schedule of cron's kind: a day and time phrase
// ("every monday 9am", "weekdays at 9:30 pm") or five cron fields; 0
// for none. Read as "every <d>" or one word, "every day at 9am ..."
// would be the interval "every day" with a prompt starting "at 9am".
// bare: none does, but a phrase whose time is a bare number (bareHour)
// would have.
func cronLen(fields []string) (n int, bare bool) {
	for n := min(len(fields), maxCronWords); n >= 2; n-- {
		s := strings.Join(fields[:n], " ")
		if !isCron(s) {
			continue
		}
		if !bareHour(fields[:n]) {
			return n, false
		}
		bare = true
	}
	return 0, bare
}

// bareHour reports whether fields, a day and time phrase, end in a time
// that is a bare number ("monday 3", "every day 7") not introduced by
// "at": unquoted, the number may be the prompt's first word. Five cron
// fields ("0 9 * * 1") start with a number or "*", never a word.
func bareHour(fields []string) bool {
	n := len(fields)
	if n < 2 || !unicode.IsLetter([]rune(fields[0])[0]) {
		return false
	}
	for _, r := range fields[n-1] {
		if r < '0' || r > '9' {
			return false
		}
	}
	return !strings.EqualFold(fields[n-2], "at")
}

func isCron(s string) bool {
	sch, err := schedule.Parse(s, time.Now(), time.UTC)
	// Five cron fields that never come are still the schedule, so that
	// /cron add says why it is refused.
	return err == nil && sch.Kind == schedule.Cron || errors.Is(err, schedule.ErrNever)
}

func unquote(s string) string {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return strings.TrimSpace(s[1 : len(s)-1])
	}
	return s
}

// CronRunAlive reports whether the cron run runID (cron.RunID) still
// goes, for the scheduler (scheduler.Deps.RunAlive), which asks only
// about runs that have held their job for cron.max_run_duration or more:
// its session's lock is held (the router's grant of its turn, which a
// stopped router's sweep takes over, or the claim of the worker that
// runs it, renewed every third of router.lock_ttl: a dead worker's
// lapses, and the bus hands the turn to another), or messages wait in
// its session's queue (the sweep starts them). Nothing of it left: its
// turn is gone, and its end (TurnCompleted) never came.
func (s *Service) CronRunAlive(ctx context.Context, runID string) (bool, error) {
	key := sessionkey.Build(&eventsv1.SessionSource{Platform: scheduler.Platform, Account: scheduler.Account,
		ChatId: runID, ChatType: "dm"}, s.keyOpts)
	owner, err := s.locker.Owner(ctx, key)
	if err != nil {
		return false, fmt.Errorf("read cron run's session lock: %w", err)
	}
	if owner != "" {
		return true, nil
	}
	// Redis may have lost the lock of a turn that still runs: its lease
	// in Postgres (migration 00148) holds until its worker lets go of it.
	if running, err := s.store.TurnRunning(ctx, key); err != nil || running {
		return running, err
	}
	n, err := s.store.QueueLen(ctx, key)
	if err != nil {
		return false, fmt.Errorf("read cron run's queue: %w", err)
	}
	return n > 0, nil
}

// cronOutcome records how a cron run ended on its job (Hermes's
// mark_job_run): the run no longer holds the job and its next run counts
// from the end of the run's turn (cron.Store.RunEnded: once, however
// often the completion is redelivered); the scheduler wrote ok when it started the run, and a
// turn that failed or was stopped makes it error, with the reason,
// unless the job has fired a newer run since (cron.Store.RecordOutcome).
// A stale turn (a newer generation took the session over) did not end
// the run.
func (s *Service) cronOutcome(ctx context.Context, ev *turnsv1.TurnCompleted) error {
	parts := strings.Split(ev.GetSessionKey(), ":")
	if len(parts) != 5 || parts[2] != "cron" || parts[3] != "dm" {
		return nil
	}
	status := ev.GetStatus()
	if status == turnsv1.TurnStatus_TURN_STATUS_STALE {
		return nil
	}
	runID := parts[4]
	if _, _, _, err := cron.ParseRunID(runID); err != nil {
		s.log.WarnContext(ctx, "cron session names no run; outcome not recorded", "session_key", ev.GetSessionKey())
		return nil
	}
	end := s.now()
	if at := ev.GetCompletedAt(); at.IsValid() && !at.AsTime().IsZero() {
		end = at.AsTime()
	}
	if _, err := s.cron.RunEnded(ctx, runID, end); err != nil {
		return err
	}
	if status == turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		return nil
	}
	reason := ev.GetError()
	if reason == "" {
		reason = strings.ToLower(strings.TrimPrefix(status.String(), "TURN_STATUS_"))
	}
	applied, err := s.cron.RecordOutcome(ctx, runID, "error", reason)
	if err != nil {
		return err
	}
	if !applied {
		s.log.InfoContext(ctx, "cron run outcome not recorded: the job was removed or has run since", "run", runID)
	}
	return nil
}
