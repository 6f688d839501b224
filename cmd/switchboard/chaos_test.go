//go:build chaos

// The chaos harness (`make chaos`): every service as its own process, a
// steady load of conversations through the API gateway and through two
// Telegram gateways (active and standby, against the fake Bot API), one
// fault at a time, then the invariants of DESIGN.md checked from the
// client's answers, the bot's messages and Postgres. It is behind the `chaos` build tag so `make test`
// never runs it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
	"github.com/switchboard-chat/switchboard/services/gateway/webhook"
)

// Timings of the harness deployment. The documented recovery bound is
// lock TTL + redelivery delay (the worker's AckWait); both are shortened
// here so a run takes minutes, not tens of minutes.
const (
	chaosLockTTL   = 6 * time.Second
	chaosAckWait   = 6 * time.Second
	chaosLease     = 6 * time.Second
	chaosDedupe    = 5 * time.Second
	chaosSessions  = 6 // through the API gateway
	chaosTGChats   = 2 // through Telegram
	chaosLLMDelay  = 300 * time.Millisecond
	chaosSettle    = 4 * time.Second
	chaosMaxRecovr = 90 * time.Second
	// The webhook gateway's flooded route takes this many deliveries a
	// minute; the flood phase sends more, to it and to a calm route.
	chaosHookLimit  = 5
	chaosHookSecret = "chaos-hook-secret"
	// The Redis phase's probe session (API, pinned to the queue busy
	// mode) and how long its first message's turn lasts: well past the
	// worker's lock renewals (every third of the lock TTL, 2 s here).
	chaosProbe     = "chaos-r1"
	chaosProbeTurn = 8 * time.Second
)

// chaosPGDown is how long Postgres stays down in its fault: 3 s, or
// CHAOS_PG_DOWN.
func chaosPGDown() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("CHAOS_PG_DOWN")); err == nil && d > 0 {
		return d
	}
	return 3 * time.Second
}

func recoveryBound() time.Duration { return chaosLockTTL + chaosAckWait }

// ---- processes ----

type chaosProc struct {
	name string
	bin  string
	args []string
	env  []string
	log  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *chaosProc) start(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "\n==== start %s %s\n", p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
}

func (p *chaosProc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// kill sends sig and waits for the process to exit.
func (p *chaosProc) kill(sig syscall.Signal) {
	p.signal(sig)
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		p.signal(syscall.SIGKILL)
		<-done
	}
}

func waitTCP(t *testing.T, addr string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never accepted connections: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func freePort(t *testing.T) string {
	a := freeAddr(t)
	_, port, _ := net.SplitHostPort(a)
	return port
}

// ---- load ----

type chaosMsg struct {
	session  string
	n        int
	text     string
	firstAt  time.Time
	doneAt   time.Time
	answer   string
	accepted bool
	attempts int
	errs     []string
	// replies counts the bot's Telegram messages that reply to this one
	// (the API answers each request once by construction).
	replies int
	// probe: a phase's own message, not the steady load's (recovered
	// waits for the load's sessions only).
	probe bool
}

type chaosLoad struct {
	base string
	mu   sync.Mutex
	msgs []*chaosMsg
}

func (l *chaosLoad) snapshot() []chaosMsg {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]chaosMsg, len(l.msgs))
	for i, m := range l.msgs {
		out[i] = *m
	}
	return out
}

// ask sends one numbered message and retries it with the same
// Idempotency-Key until it is answered or the harness gives up.
func (l *chaosLoad) ask(ctx context.Context, session string, n int) {
	l.askProbe(ctx, session, n, "", false)
}

// askProbe is ask with the fake LLM's directives after the text (say
// [[latency:8s]]), which its answer does not echo; probe marks a phase's
// own message.
func (l *chaosLoad) askProbe(ctx context.Context, session string, n int, directives string, probe bool) {
	m := &chaosMsg{session: session, n: n, text: fmt.Sprintf("%s m%04d", session, n), firstAt: time.Now(), probe: probe}
	l.mu.Lock()
	l.msgs = append(l.msgs, m)
	l.mu.Unlock()
	content := strings.TrimSpace(m.text + " " + directives)
	body, _ := json.Marshal(map[string]any{"model": "switchboard", "messages": []map[string]string{{"role": "user", "content": content}}})
	giveUp := time.Now().Add(chaosMaxRecovr)
	for time.Now().Before(giveUp) {
		rctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodPost, l.base+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Session-Id", session)
		req.Header.Set("Idempotency-Key", fmt.Sprintf("m%04d", n))
		resp, err := http.DefaultClient.Do(req)
		l.mu.Lock()
		m.attempts++
		l.mu.Unlock()
		if err == nil {
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				ans, _, _ := decodeCompletion(raw)
				l.mu.Lock()
				m.accepted, m.answer, m.doneAt = true, ans, time.Now()
				l.mu.Unlock()
				cancel()
				return
			}
			err = fmt.Errorf("status %d: %.120s", resp.StatusCode, raw)
		}
		cancel()
		l.mu.Lock()
		m.errs = append(m.errs, err.Error())
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			if time.Now().After(giveUp) {
				return
			}
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func (l *chaosLoad) run(ctx context.Context, session string, wg *sync.WaitGroup) {
	defer wg.Done()
	for n := 1; ctx.Err() == nil; n++ {
		l.ask(ctx, session, n)
	}
}

// tgChat is a Telegram user's private chat with the bot (the chat id is
// the user id).
type tgChat struct {
	session string
	id      int64
}

// tell sends one numbered message as a Telegram user and waits for the
// bot's answer, a message replying to it. Telegram delivers an update
// until the gateway confirms it, so there is nothing to retry.
func (l *chaosLoad) tell(ctx context.Context, tg *telegramfake.Server, c tgChat, n int) {
	m := &chaosMsg{session: c.session, n: n, text: fmt.Sprintf("%s m%04d", c.session, n), firstAt: time.Now(), attempts: 1}
	l.mu.Lock()
	l.msgs = append(l.msgs, m)
	l.mu.Unlock()
	tg.Inject(map[string]any{"message": map[string]any{
		"message_id": n, "date": time.Now().Unix(), "text": m.text,
		"chat": map[string]any{"id": c.id, "type": "private"},
		"from": map[string]any{"id": c.id, "is_bot": false, "first_name": c.session},
	}})
	giveUp := time.Now().Add(chaosMaxRecovr)
	for time.Now().Before(giveUp) {
		for _, r := range tg.Messages(strconv.FormatInt(c.id, 10)) {
			if r.ReplyTo == n {
				l.mu.Lock()
				m.accepted, m.answer, m.doneAt = true, r.Shown, time.Now()
				l.mu.Unlock()
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (l *chaosLoad) runTelegram(ctx context.Context, tg *telegramfake.Server, c tgChat, wg *sync.WaitGroup) {
	defer wg.Done()
	for n := 1; ctx.Err() == nil; n++ {
		l.tell(ctx, tg, c, n)
	}
}

// countReplies records, for each Telegram message, how many of the bot's
// messages reply to it: more than one is a duplicate.
func (l *chaosLoad) countReplies(tg *telegramfake.Server, chats []tgChat) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range chats {
		for _, r := range tg.Messages(strconv.FormatInt(c.id, 10)) {
			for _, m := range l.msgs {
				if m.session == c.session && m.n == r.ReplyTo && !r.Deleted {
					m.replies++
				}
			}
		}
	}
}

// ---- faults ----

type phase struct {
	fault    string
	start    time.Time
	injected time.Time
	end      time.Time
	recovery time.Duration
	note     string
	// details are the phase's own findings, listed under the table.
	details []string
}

type chaosSys struct {
	t     *testing.T
	procs map[string]*chaosProc
	db    *pgxpool.Pool
	pg    *chaosPG // nil: the machine's cluster, not restartable
	// routerOps is router-1's ops address (/readyz).
	routerOps string
	topo      bus.Topology
	natsURL   string
	load      *chaosLoad
	// tgOps are the Telegram gateways' ops addresses by process name.
	tgOps map[string]string
	// hookAddr is the webhook gateway's address.
	hookAddr string
	// redisAddr is the private Redis server's address.
	redisAddr string
}

// recovered waits until every session has an answered message that was
// first sent after `since`, and returns how long that took.
func (s *chaosSys) recovered(since time.Time) time.Duration {
	deadline := since.Add(chaosMaxRecovr + 30*time.Second)
	for time.Now().Before(deadline) {
		last := map[string]time.Time{}
		for _, m := range s.load.snapshot() {
			if !m.probe && m.accepted && m.firstAt.After(since) && (last[m.session].IsZero() || m.doneAt.Before(last[m.session])) {
				last[m.session] = m.doneAt
			}
		}
		if len(last) == chaosSessions+chaosTGChats {
			var worst time.Time
			for _, at := range last {
				if at.After(worst) {
					worst = at
				}
			}
			return worst.Sub(since)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return -1
}

// inFlightTurn waits (briefly) until some turn is running, so a kill lands
// mid-turn.
func (s *chaosSys) inFlightTurn() {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		// A turn was started (the session's generation bumped for it) and
		// is not decided yet (no row for that generation).
		_ = s.db.QueryRow(context.Background(), `SELECT count(*) FROM sessions s WHERE s.generation > 0
			AND NOT EXISTS (SELECT 1 FROM worker_turns w WHERE w.session_key = s.session_key AND w.generation = s.generation)`).Scan(&n)
		if n > 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readiness waits up to d for router-1's /readyz to answer status and
// reports whether (and, as a duration, when) it did; -1 when it did not.
func (s *chaosSys) readiness(status int, d time.Duration) time.Duration {
	start := time.Now()
	for time.Since(start) < d {
		resp, err := http.Get("http://" + s.routerOps + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == status {
				return time.Since(start)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return -1
}

// leaseHolder is the Telegram gateway process holding the lease, from
// its ops /metrics; "" when none does.
func (s *chaosSys) leaseHolder() string {
	for name, ops := range s.tgOps {
		resp, err := http.Get("http://" + ops + "/metrics")
		if err != nil {
			continue
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(raw), `switchboard_gateway_lease_active{platform="telegram"} 1`) {
			return name
		}
	}
	return ""
}

func (s *chaosSys) killRestart(name string, sig syscall.Signal) {
	s.procs[name].kill(sig)
	s.procs[name].start(s.t)
}

// webhookFlood floods the webhook gateway's "flood" route, forged
// deliveries first (refused before the rate limit, so they spend none of
// it), then signed ones at once: exactly chaosHookLimit are accepted and
// the rest answered 429 with Retry-After, while the "calm" route keeps
// accepting. The chat load goes on meanwhile.
func (s *chaosSys) webhookFlood() string {
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	post := func(route, id string, sign bool) (int, string, string) {
		body, _ := json.Marshal(map[string]any{"run": run, "id": id})
		sig := webhook.Sign(chaosHookSecret, body)
		if !sign {
			sig = webhook.Sign("a guess", body)
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.hookAddr+"/webhooks/"+route, bytes.NewReader(body))
		req.Header.Set("X-Hub-Signature-256", sig)
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-GitHub-Delivery", run+"-"+id)
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			return 0, err.Error(), ""
		}
		defer resp.Body.Close()
		var out struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out.Error, resp.Header.Get("Retry-After")
	}
	for i := range 20 {
		if code, msg, _ := post("flood", fmt.Sprint("forged-", i), false); code != http.StatusUnauthorized {
			s.t.Errorf("webhook flood: forged delivery %d answered %d %s, want 401", i, code, msg)
		}
	}
	const flood, calm = 40, 5
	var mu sync.Mutex
	var wg sync.WaitGroup
	codes := map[int]int{}
	calmOK := 0
	for i := range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, msg, retry := post("flood", fmt.Sprint("flood-", i), true)
			if code == http.StatusTooManyRequests {
				if sec, err := strconv.Atoi(retry); msg != "Rate limit exceeded" || err != nil || sec < 1 || sec > 60 {
					s.t.Errorf("webhook flood: 429 with %q, Retry-After %q", msg, retry)
				}
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}()
	}
	for i := range calm {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, msg, _ := post("calm", fmt.Sprint("calm-", i), true); code == http.StatusAccepted {
				mu.Lock()
				calmOK++
				mu.Unlock()
			} else {
				s.t.Errorf("webhook flood: calm route delivery %d answered %d %s", i, code, msg)
			}
		}()
	}
	wg.Wait()
	if codes[http.StatusAccepted] != chaosHookLimit || codes[http.StatusTooManyRequests] != flood-chaosHookLimit || calmOK != calm {
		s.t.Errorf("webhook flood: flooded route answered %v (want %d accepted, %d refused 429), calm route accepted %d of %d",
			codes, chaosHookLimit, flood-chaosHookLimit, calmOK, calm)
	}
	return fmt.Sprintf("flooded route: %d accepted, %d refused 429; calm route: %d of %d accepted",
		codes[http.StatusAccepted], codes[http.StatusTooManyRequests], calmOK, calm)
}

// replay publishes one MessageReceived, waits until its turn completed and
// past the JetStream dedupe window, then publishes it again with the same
// Nats-Msg-Id: the router's Redis dedupe record must ignore it.
func (s *chaosSys) replay() string {
	b, err := bus.Connect(s.natsURL, "chaos-replay", s.topo, slog.Default())
	if err != nil {
		return "connect: " + err.Error()
	}
	defer b.Close()
	chat := "replay-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ev := &eventsv1.MessageReceived{
		EventId: "evt-" + chat, MessageId: "evt-" + chat,
		Source: &eventsv1.SessionSource{Platform: "api", Account: "default", ChatId: chat, ChatType: "dm", UserId: "chaos"},
		Text:   chat + " m0001", SentAt: timestamppb.Now(), TransportAuthenticated: true, ClientSessionId: chat,
	}
	subject := s.topo.InboundSubject(sessionkey.ChatKey(ev.Source))
	msgID := "api:default:" + ev.EventId
	ctx := context.Background()
	if _, err := b.Publish(ctx, subject, msgID, ev); err != nil {
		return "publish: " + err.Error()
	}
	count := func() (turns, users int) {
		_ = s.db.QueryRow(ctx, `SELECT count(*) FROM worker_turns WHERE session_key LIKE '%' || $1`, chat).Scan(&turns)
		_ = s.db.QueryRow(ctx, `SELECT count(*) FROM transcript_messages WHERE role = 'user' AND content = $1`, ev.Text).Scan(&users)
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for t, _ := count(); t == 0 && time.Now().Before(deadline); t, _ = count() {
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(chaosDedupe + time.Second) // past the bus window: only Redis remembers
	ack, err := b.Publish(ctx, subject, msgID, ev)
	if err != nil {
		return "republish: " + err.Error()
	}
	time.Sleep(chaosLockTTL) // time for a (wrong) second turn to run
	turns, users := count()
	return fmt.Sprintf("replay: bus duplicate=%v, turns=%d, user rows=%d", ack.Duplicate, turns, users)
}

// restartRedis restarts Redis without its data while the probe session's
// long turn runs, and at once (before that turn's worker renews the lock
// Redis lost) sends the session a second message without waiting for the
// first's answer. The second must wait for the running turn: both are
// answered, once each, in order, and no two turns of the session run at
// once (a second turn started beside the first fences it off, and its
// message goes unanswered). The load goes on meanwhile; both messages
// count in the phase's row. It fails the test when they do not hold and
// returns the phase's note.
func (s *chaosSys) restartRedis(p *phase) string {
	ctx := context.Background()
	var wg sync.WaitGroup
	ask := func(n int, directives string) {
		wg.Add(1)
		go func() { defer wg.Done(); s.load.askProbe(ctx, chaosProbe, n, directives, true) }()
	}
	ask(1, fmt.Sprintf("[[latency:%s]]", chaosProbeTurn))
	// Its turn started (the session's generation bumped for it, not
	// decided yet); a moment more and its worker holds the lock.
	deadline := time.Now().Add(20 * time.Second)
	for running := false; !running && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		_ = s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sessions s WHERE s.session_key LIKE '%:' || $1 AND s.generation > 0
			AND NOT EXISTS (SELECT 1 FROM worker_turns w WHERE w.session_key = s.session_key AND w.generation = s.generation))`, chaosProbe).Scan(&running)
	}
	time.Sleep(time.Second)
	p.injected = time.Now()
	s.killRestart("redis", syscall.SIGKILL)
	waitTCP(s.t, s.redisAddr, 20*time.Second)
	ask(2, "")
	wg.Wait()

	var bad []string
	var msgs []chaosMsg
	for _, m := range s.load.snapshot() {
		if m.session == chaosProbe {
			msgs = append(msgs, m)
		}
	}
	answered := 0
	for _, m := range msgs {
		switch {
		case !m.accepted:
			bad = append(bad, fmt.Sprintf("%q not answered", m.text))
		case m.answer != "echo: "+m.text:
			bad = append(bad, fmt.Sprintf("%q answered %q", m.text, m.answer))
		default:
			answered++
		}
	}
	inOrder, apart := true, true
	if len(msgs) == 2 && msgs[0].accepted && msgs[1].accepted && !msgs[0].doneAt.Before(msgs[1].doneAt) {
		inOrder = false
		bad = append(bad, fmt.Sprintf("%q answered %s after %q", msgs[0].text, msgs[0].doneAt.Sub(msgs[1].doneAt).Round(time.Millisecond), msgs[1].text))
	}
	// Every turn of the session, ended however (a fenced one too), and
	// the transcript's user messages, once each and in order.
	rows, err := s.db.Query(ctx, `SELECT turn_id, status, started_at, updated_at FROM worker_turns
		WHERE session_key LIKE '%:' || $1 ORDER BY started_at`, chaosProbe)
	if err != nil {
		s.t.Fatal(err)
	}
	var turnIDs []string
	var prevTurn string
	var prevEnd time.Time
	for rows.Next() {
		var turn, status string
		var st, en time.Time
		if err := rows.Scan(&turn, &status, &st, &en); err != nil {
			s.t.Fatal(err)
		}
		turnIDs = append(turnIDs, turn)
		if status != "completed" {
			bad = append(bad, fmt.Sprintf("turn %s ended %s", turn, status))
		}
		if st.Before(prevEnd) {
			apart = false
			bad = append(bad, fmt.Sprintf("turn %s started %s before %s ended", turn, st.Format("15:04:05.000"), prevTurn))
		}
		if en.After(prevEnd) {
			prevTurn, prevEnd = turn, en
		}
	}
	rows.Close()
	var users []string
	rows, err = s.db.Query(ctx, `SELECT content FROM transcript_messages WHERE session_key LIKE '%:' || $1 AND role = 'user' ORDER BY id`, chaosProbe)
	if err != nil {
		s.t.Fatal(err)
	}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			s.t.Fatal(err)
		}
		users = append(users, chaosText.FindString(c))
	}
	rows.Close()
	if want := []string{chaosProbe + " m0001", chaosProbe + " m0002"}; strings.Join(users, ",") != strings.Join(want, ",") {
		inOrder = false
		bad = append(bad, fmt.Sprintf("transcript's user messages %q, want %q", users, want))
	}
	// Whether the second message came before the worker's renewal, so
	// that only the turn's lease held the session: the routers log each
	// start it refused, under the session key's pseudonym, which the
	// workers' log of the first turn names.
	waits := 0
	if len(turnIDs) > 0 {
		var logs []string
		for _, name := range []string{"worker-1", "worker-2", "router-1", "router-2"} {
			raw, _ := os.ReadFile(s.procs[name].log)
			logs = append(logs, strings.Split(string(raw), "\n")...)
		}
		key := ""
		for _, line := range logs {
			if _, rest, ok := strings.Cut(line, "turn_id="+turnIDs[0]+" session_key="); ok && key == "" {
				key, _, _ = strings.Cut(rest, " ")
			}
		}
		for _, line := range logs {
			if key != "" && strings.Contains(line, "still runs") && strings.Contains(line, "session_key="+key) {
				waits++
			}
		}
	}
	if len(bad) > 0 {
		s.t.Errorf("restart Redis: probe session %s: %s", chaosProbe, strings.Join(bad, "; "))
	}
	for _, b := range bad {
		p.details = append(p.details, fmt.Sprintf("%s: probe %s", p.fault, b))
	}
	return fmt.Sprintf("probe %s, an %s turn and a second message right after the restart: %d of %d answered, once and in order %v, %d turns, none at once %v, starts held off by the lease %d",
		chaosProbe, chaosProbeTurn, answered, len(msgs), inOrder, len(turnIDs), apart, waits)
}

// ---- invariants from Postgres ----

var chaosText = regexp.MustCompile(`(chaos-[rst]\d+) m(\d{4})`)

type pgFindings struct {
	userCount      map[string]int // text → user rows
	assistantCount map[string]int // "echo: text" → assistant rows
	outboxSent     map[string]int // text → sent outbox rows (none for the API: its request takes the reply)
	outOfOrder     map[string]bool
	overlaps       []string
	interleaved    []string
}

func (s *chaosSys) inspect(ctx context.Context) pgFindings {
	f := pgFindings{userCount: map[string]int{}, assistantCount: map[string]int{}, outboxSent: map[string]int{}, outOfOrder: map[string]bool{}}
	rows, err := s.db.Query(ctx, `SELECT session_key, turn_id, role, content FROM transcript_messages ORDER BY id`)
	if err != nil {
		s.t.Fatal(err)
	}
	lastN := map[string]int{}
	lastTurn := map[string]string{}
	seenTurns := map[string]map[string]bool{}
	for rows.Next() {
		var key, turn, role, content string
		if err := rows.Scan(&key, &turn, &role, &content); err != nil {
			s.t.Fatal(err)
		}
		if seenTurns[key] == nil {
			seenTurns[key] = map[string]bool{}
		}
		if turn != lastTurn[key] {
			if seenTurns[key][turn] {
				f.interleaved = append(f.interleaved, key+" "+turn)
			}
			seenTurns[key][turn] = true
			lastTurn[key] = turn
		}
		m := chaosText.FindStringSubmatch(content)
		if m == nil {
			continue
		}
		switch role {
		case "user":
			f.userCount[m[0]]++
			n, _ := strconv.Atoi(m[2])
			// A repeat of the same number is a duplicate (counted
			// above); only going back is out of order.
			if n < lastN[m[1]] {
				f.outOfOrder[m[0]] = true
			}
			lastN[m[1]] = n
		case "assistant":
			if strings.HasPrefix(content, "echo: ") {
				f.assistantCount[m[0]]++
			}
		}
	}
	rows.Close()

	rows, err = s.db.Query(ctx, `SELECT payload FROM delivery_outbox WHERE state = 'sent'`)
	if err != nil {
		s.t.Fatal(err)
	}
	for rows.Next() {
		var payload []byte
		if err := rows.Scan(&payload); err != nil {
			s.t.Fatal(err)
		}
		var sr deliveryv1.SendRequested
		if proto.Unmarshal(payload, &sr) == nil {
			if m := chaosText.FindStringSubmatch(sr.Text); m != nil && strings.HasPrefix(sr.Text, "echo: ") {
				f.outboxSent[m[0]]++
			}
		}
	}
	rows.Close()

	// One turn per session: completed turns of one session never overlap.
	rows, err = s.db.Query(ctx, `SELECT session_key, turn_id, started_at, updated_at FROM worker_turns
		WHERE status = 'completed' ORDER BY session_key, started_at`)
	if err != nil {
		s.t.Fatal(err)
	}
	var prevKey, prevTurn string
	var prevEnd time.Time
	for rows.Next() {
		var key, turn string
		var st, en time.Time
		if err := rows.Scan(&key, &turn, &st, &en); err != nil {
			s.t.Fatal(err)
		}
		if key == prevKey && st.Before(prevEnd) {
			f.overlaps = append(f.overlaps, fmt.Sprintf("%s: %s started %s before %s ended", key, turn, st.Format("15:04:05.000"), prevTurn))
		}
		prevKey, prevTurn, prevEnd = key, turn, en
	}
	rows.Close()
	return f
}

// ---- the test ----

func TestChaos(t *testing.T) {
	if os.Getenv("CHAOS_RUN") == "" {
		t.Skip("set CHAOS_RUN=1 (make chaos)")
	}
	bin := binary(t)
	logDir := os.Getenv("CHAOS_LOG_DIR")
	if logDir == "" {
		logDir = t.TempDir()
	}
	_ = os.MkdirAll(logDir, 0o755)
	t.Logf("process logs in %s", logDir)
	work := t.TempDir()

	// Private NATS (JetStream on disk) and Redis, so restarting them
	// disturbs nobody else on the machine.
	natsBin := filepath.Join(work, "nats-server")
	if out, err := exec.Command("go", "build", "-o", natsBin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}
	natsPort, redisPort := freePort(t), freePort(t)
	procs := map[string]*chaosProc{}
	add := func(p *chaosProc) *chaosProc {
		p.log = filepath.Join(logDir, p.name+".log")
		procs[p.name] = p
		t.Cleanup(func() { p.signal(syscall.SIGCONT); p.kill(syscall.SIGKILL) })
		return p
	}
	add(&chaosProc{name: "nats", bin: natsBin, args: []string{"-a", "127.0.0.1", "-p", natsPort, "-js", "-sd", filepath.Join(work, "js")}}).start(t)
	add(&chaosProc{name: "redis", bin: "redis-server", args: []string{"--port", redisPort, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", work}}).start(t)
	waitTCP(t, "127.0.0.1:"+natsPort, 20*time.Second)
	waitTCP(t, "127.0.0.1:"+redisPort, 20*time.Second)

	// Postgres: a private cluster the Postgres fault can crash, or the
	// machine's (a fresh schema) when no server binaries are installed.
	var db *pgxpool.Pool
	var dbURL string
	pgc := startChaosPG(t, logDir)
	if pgc != nil {
		db, dbURL = pgc.database(t, "chaos")
	} else {
		t.Log("no PostgreSQL server binaries (CHAOS_PG_BIN): using the machine's cluster; the Postgres fault is skipped")
		db, dbURL = pgtest.NewWithURL(t)
	}
	// The fake Bot API, in this process: the Telegram gateways poll it.
	tg, err := telegramfake.New("4242:chaos", "chaosbot")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.Close)
	var tgChats []tgChat
	var tgUsers []string
	for i := 1; i <= chaosTGChats; i++ {
		tgChats = append(tgChats, tgChat{session: fmt.Sprintf("chaos-t%d", i), id: int64(9000 + i)})
		tgUsers = append(tgUsers, strconv.Itoa(9000+i))
	}
	llmAddr, apiAddr, hookAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	// The webhook gateway's routes: "flood" (its rate limit low, for the
	// flood phase) and "calm"; their answers go nowhere.
	hookCfg := filepath.Join(work, "switchboard.yaml")
	if err := os.WriteFile(hookCfg, []byte(fmt.Sprintf(`gateways:
  webhook:
    routes:
      flood: {secret: %[1]s, rate_limit: %[2]d}
      calm: {secret: %[1]s}
router:
  # The Redis phase's probe queues a message sent while its turn runs.
  chat_busy_modes: {"api:%[3]s": queue}
`, chaosHookSecret, chaosHookLimit, chaosProbe)), 0o600); err != nil {
		t.Fatal(err)
	}
	add(&chaosProc{name: "fakellm", bin: bin, args: []string{"fakellm", "--addr", llmAddr, "--latency", chaosLLMDelay.String()}}).start(t)
	waitTCP(t, llmAddr, 30*time.Second)

	prefix := "chaos" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	natsURL := "nats://127.0.0.1:" + natsPort
	env := append(os.Environ(),
		"NATS_URL="+natsURL, "SWITCHBOARD_NATS__PREFIX="+prefix, "SWITCHBOARD_NATS__DEDUPE_WINDOW="+chaosDedupe.String(),
		"DATABASE_URL="+dbURL,
		"REDIS_URL=redis://127.0.0.1:"+redisPort+"/0", "SWITCHBOARD_REDIS__PREFIX="+prefix+":",
		"SWITCHBOARD_LLM__PROVIDER=openai", "SWITCHBOARD_LLM__BASE_URL=http://"+llmAddr+"/v1", "SWITCHBOARD_LLM__API_KEY=chaos", "SWITCHBOARD_LLM__MODEL=fake",
		"SWITCHBOARD_ROUTER__LOCK_TTL="+chaosLockTTL.String(), "SWITCHBOARD_ROUTER__SWEEP_INTERVAL=1s", "SWITCHBOARD_ROUTER__ACK_WAIT="+chaosAckWait.String(),
		"SWITCHBOARD_ROUTER__HOME_NOTICE=false", // one message per answer (the home notice would be another)
		"SWITCHBOARD_WORKER__ACK_WAIT="+chaosAckWait.String(),
		"SWITCHBOARD_DELIVERY__LEASE="+chaosLease.String(), "SWITCHBOARD_DELIVERY__SEND_TIMEOUT=3s", "SWITCHBOARD_DELIVERY__POLL_INTERVAL=1s", "SWITCHBOARD_DELIVERY__PARTITION_LEASE="+chaosLease.String(),
		"SWITCHBOARD_DELIVERY__ACK_WAIT="+chaosAckWait.String(), "SWITCHBOARD_DELIVERY__GRPC_ADDR=127.0.0.1:0",
		"SWITCHBOARD_CONFIG="+hookCfg, "SWITCHBOARD_GATEWAYS__WEBHOOK__ADDR="+hookAddr,
		"SWITCHBOARD_GATEWAYS__API__ADDR="+apiAddr, "API_SERVER_KEY=", "SWITCHBOARD_GATEWAYS__API__INSECURE=true", "SWITCHBOARD_GATEWAYS__API__RATE_LIMIT=10000", "SWITCHBOARD_GATEWAYS__API__RATE_BURST=10000",
		"TELEGRAM_BOT_TOKEN=4242:chaos", "TELEGRAM_API_BASE_URL="+tg.URL, "TELEGRAM_ALLOWED_USERS="+strings.Join(tgUsers, ","),
		"SWITCHBOARD_GATEWAYS__TELEGRAM__LEASE_TTL="+chaosLease.String(), "SWITCHBOARD_GATEWAYS__TELEGRAM__POLL_TIMEOUT=2s",
		// One message per answer, replying to the user's: the harness
		// reads answers off the fake without following edits.
		"SWITCHBOARD_DELIVERY__PLATFORMS__TELEGRAM__STREAMING=none",
		"OPENAI_API_KEY=", "OPENAI_BASE_URL=", "ANTHROPIC_API_KEY=", "ANTHROPIC_BASE_URL=",
		"SWITCHBOARD_LOG__FORMAT=text",
	)
	svcAt := func(name, ops string, args ...string) {
		add(&chaosProc{name: name, bin: bin, args: append(args, "--ops-addr", ops), env: env}).start(t)
	}
	svc := func(name string, args ...string) { svcAt(name, "127.0.0.1:0", args...) }
	// router-1's readiness is watched during the Postgres fault.
	routerOps := freeAddr(t)
	svcAt("router-1", routerOps, "router")
	svc("router-2", "router")
	svc("worker-1", "worker")
	svc("worker-2", "worker")
	svc("delivery-1", "delivery")
	svc("gateway-api", "gateway", "api")
	svc("gateway-webhook", "gateway", "webhook")
	// Two Telegram gateways: one holds the lease and polls, one stands by.
	tgOps := map[string]string{"gateway-telegram-1": freeAddr(t), "gateway-telegram-2": freeAddr(t)}
	svcAt("gateway-telegram-1", tgOps["gateway-telegram-1"], "gateway", "telegram")
	svcAt("gateway-telegram-2", tgOps["gateway-telegram-2"], "gateway", "telegram")
	waitTCP(t, apiAddr, 60*time.Second)
	waitTCP(t, hookAddr, 60*time.Second)

	s := &chaosSys{t: t, procs: procs, db: db, pg: pgc, routerOps: routerOps, natsURL: natsURL, load: &chaosLoad{base: "http://" + apiAddr}, hookAddr: hookAddr, redisAddr: "127.0.0.1:" + redisPort,
		topo: bus.Topology{Prefix: prefix, Replicas: 1, DedupeWindow: chaosDedupe, Retention: 24 * time.Hour}, tgOps: tgOps}

	loadCtx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 1; i <= chaosSessions; i++ {
		wg.Add(1)
		go s.load.run(loadCtx, fmt.Sprintf("chaos-s%d", i), &wg)
	}
	for _, c := range tgChats {
		wg.Add(1)
		go s.load.runTelegram(loadCtx, tg, c, &wg)
	}

	faults := []struct {
		name string
		do   func(*phase)
	}{
		{"none (baseline)", func(*phase) {}},
		{"kill -9 worker mid-turn", func(p *phase) { s.inFlightTurn(); p.injected = time.Now(); s.killRestart("worker-1", syscall.SIGKILL) }},
		{"kill -9 router", func(p *phase) { p.injected = time.Now(); s.killRestart("router-1", syscall.SIGKILL) }},
		{"kill -9 delivery mid-send", func(p *phase) {
			s.inFlightTurn()
			p.injected = time.Now()
			s.killRestart("delivery-1", syscall.SIGKILL)
		}},
		{"kill -9 API gateway", func(p *phase) {
			s.inFlightTurn()
			p.injected = time.Now()
			s.killRestart("gateway-api", syscall.SIGKILL)
			waitTCP(t, apiAddr, 30*time.Second)
		}},
		{"kill -9 Telegram gateway (lease holder)", func(p *phase) {
			holder := s.leaseHolder()
			if holder == "" {
				t.Error("no Telegram gateway holds the lease")
				return
			}
			p.note = holder
			p.injected = time.Now()
			s.killRestart(holder, syscall.SIGKILL)
		}},
		{"replay inbound event", func(p *phase) { p.injected = time.Now(); p.note = s.replay() }},
		{"flood a webhook route", func(p *phase) { p.injected = time.Now(); p.note = s.webhookFlood() }},
		{"SIGSTOP worker past lock TTL", func(p *phase) {
			s.inFlightTurn()
			p.injected = time.Now()
			s.procs["worker-2"].signal(syscall.SIGSTOP)
			time.Sleep(chaosLockTTL + chaosAckWait + 2*time.Second)
			s.procs["worker-2"].signal(syscall.SIGCONT)
		}},
		{"restart Redis (locks lost)", func(p *phase) { p.note = s.restartRedis(p) }},
		{fmt.Sprintf("restart Postgres (crash, down %s)", chaosPGDown()), func(p *phase) {
			if s.pg == nil {
				p.note = "skipped: no private cluster"
				return
			}
			s.inFlightTurn()
			down := time.Now()
			if err := s.pg.stop("immediate"); err != nil {
				t.Error(err)
			}
			// A process that uses Postgres reports not ready while it is down.
			notReady := s.readiness(http.StatusServiceUnavailable, chaosPGDown()) >= 0
			time.Sleep(time.Until(down.Add(chaosPGDown())))
			if err := s.pg.start(); err != nil {
				t.Fatal(err)
			}
			readyAgain := s.readiness(http.StatusOK, 30*time.Second)
			p.note = fmt.Sprintf("router /readyz 503 while down: %v, 200 again %.1f s after the restart", notReady, readyAgain.Seconds())
			if !notReady || readyAgain < 0 {
				t.Errorf("router readiness did not follow Postgres: not ready while down %v, ready again after %v", notReady, readyAgain)
			}
			// Recovery counts from the restart: the outage is the fault's
			// length, not the services'. Each session waits on its message
			// in flight, so its next one is sent only once that is answered.
			p.injected = time.Now()
		}},
		{"restart NATS (kill -9, JetStream on disk)", func(p *phase) {
			s.inFlightTurn()
			p.injected = time.Now()
			s.killRestart("nats", syscall.SIGKILL)
		}},
	}
	if only := os.Getenv("CHAOS_FAULTS"); only != "" {
		var keep = faults[:1]
		for _, f := range faults[1:] {
			if strings.Contains(only, strings.Fields(f.name)[0]+" "+strings.Fields(f.name)[1]) || strings.Contains(strings.ToLower(f.name), strings.ToLower(only)) {
				keep = append(keep, f)
			}
		}
		faults = keep
	}

	time.Sleep(chaosSettle)
	var phases []*phase
	for _, f := range faults {
		p := &phase{fault: f.name, start: time.Now()}
		f.do(p)
		if p.injected.IsZero() {
			p.injected = p.start
		}
		p.recovery = s.recovered(p.injected)
		t.Logf("%s: recovered in %s %s", f.name, p.recovery.Round(100*time.Millisecond), p.note)
		time.Sleep(chaosSettle)
		p.end = time.Now()
		phases = append(phases, p)
	}
	stopLoad()
	wg.Wait()
	time.Sleep(2 * time.Second) // let the last deliveries settle into the outbox
	s.load.countReplies(tg, tgChats)

	f := s.inspect(context.Background())
	msgs := s.load.snapshot()
	table, failed := chaosTable(phases, msgs, f)
	// Both Telegram gateways end ready, the active one and the standby: a
	// poller that gave up (two polling at once ends one with 409, which is
	// fatal) would leave the bot deaf after the next takeover.
	for name, ops := range s.tgOps {
		resp, err := http.Get("http://" + ops + "/readyz")
		if err != nil || resp.StatusCode != http.StatusOK {
			failed = true
			t.Errorf("%s not ready at the end: %v %v", name, err, resp)
		}
		if resp != nil {
			resp.Body.Close()
		}
	}
	table += fmt.Sprintf("\nTelegram: getUpdates answered 409 (another poll took over) %d times.\n", tg.Conflicts())
	fmt.Println(table)
	if out := os.Getenv("CHAOS_TABLE"); out != "" {
		_ = os.WriteFile(out, []byte(table), 0o644)
	}
	if failed {
		t.Errorf("invariants violated (logs in %s)", logDir)
	}
}

func chaosTable(phases []*phase, msgs []chaosMsg, f pgFindings) (string, bool) {
	var b strings.Builder
	failed := false
	fmt.Fprintf(&b, "| fault | messages sent | replies | lost | duplicated | out of order | client errors (retried) | recovery s (bound %.0f s) |\n|---|---|---|---|---|---|---|---|\n", recoveryBound().Seconds())
	var details []string
	errKinds := map[string]int{}
	for _, p := range phases {
		var sent, replies, lost, dup, ooo, errs int
		for _, m := range msgs {
			// A message counts in the phase in which it was answered (or,
			// never answered, first sent): the one in flight during a fault
			// belongs to that fault.
			at := m.firstAt
			if m.accepted {
				at = m.doneAt
			}
			if at.Before(p.start) || !at.Before(p.end) {
				continue
			}
			sent++
			errs += len(m.errs)
			for _, e := range m.errs {
				if len(e) > 90 {
					e = e[:90]
				}
				errKinds[p.fault+": client error "+e]++
			}
			want := "echo: " + m.text
			switch {
			case !m.accepted && strings.HasPrefix(m.session, "chaos-t"):
				// Telegram had it: the system owed it an answer.
				lost++
				details = append(details, fmt.Sprintf("%s: %q sent on Telegram, never answered", p.fault, m.text))
			case !m.accepted && m.probe:
				// The phase's probe: the system owed it an answer.
				lost++
				details = append(details, fmt.Sprintf("%s: %q (probe) never answered", p.fault, m.text))
			case !m.accepted:
				// Never accepted: the client got only errors. Lost only if
				// the system nonetheless ran it and answered nobody.
				if f.userCount[m.text] > 0 {
					lost++
					details = append(details, fmt.Sprintf("%s: %q ran but the client never got an answer", p.fault, m.text))
				}
			case m.answer != want:
				ooo++
				details = append(details, fmt.Sprintf("%s: %q answered %q", p.fault, m.text, m.answer))
			default:
				replies++
			}
			if m.accepted && f.userCount[m.text] == 0 {
				lost++
				details = append(details, fmt.Sprintf("%s: %q answered but not in the transcript", p.fault, m.text))
			}
			if f.userCount[m.text] > 1 || f.assistantCount[m.text] > 1 || f.outboxSent[m.text] > 1 || m.replies > 1 {
				dup++
				details = append(details, fmt.Sprintf("%s: %q transcript user=%d assistant=%d, outbox sent=%d, telegram replies=%d",
					p.fault, m.text, f.userCount[m.text], f.assistantCount[m.text], f.outboxSent[m.text], m.replies))
			}
			if f.outOfOrder[m.text] {
				ooo++
				details = append(details, fmt.Sprintf("%s: %q out of order in the transcript", p.fault, m.text))
			}
		}
		rec := "never"
		if p.recovery >= 0 {
			rec = fmt.Sprintf("%.1f", p.recovery.Seconds())
		}
		if lost+dup+ooo > 0 || len(p.details) > 0 || p.recovery < 0 || p.recovery > recoveryBound()+5*time.Second {
			failed = true
		}
		details = append(details, p.details...)
		name := p.fault
		if p.note != "" {
			name += " (" + p.note + ")"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %s |\n", name, sent, replies, lost, dup, ooo, errs, rec)
	}
	if len(f.overlaps) > 0 || len(f.interleaved) > 0 {
		failed = true
	}
	fmt.Fprintf(&b, "\nTwo turns at once in one session: %d overlapping completed turns, %d interleaved transcript turns.\n", len(f.overlaps), len(f.interleaved))
	for k, n := range errKinds {
		details = append(details, fmt.Sprintf("%s (×%d)", k, n))
	}
	sort.Strings(details)
	for _, d := range append(append(details, f.overlaps...), f.interleaved...) {
		fmt.Fprintf(&b, "- %s\n", d)
	}
	return b.String(), failed
}
