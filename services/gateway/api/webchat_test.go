package api

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
)

// chromiumPath finds Debian's chromium (or CHROMIUM), or skips.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	t.Skip("web chat browser test skipped: Chromium not found (apt-get install -y chromium, or set CHROMIUM)")
	return ""
}

// TestWebChatStreamsAReply drives the page in headless Chromium: a typed
// message goes through the bus to a responder that streams the answer
// back; the page shows it, and after a reload keeps the same session.
func TestWebChatStreamsAReply(t *testing.T) {
	browser, s, r := keylessWebChat(t)
	r.answer = func(ev *eventsv1.MessageReceived, turn int) []string {
		return []string{"Hello ", "from ", "the agent", strings.Repeat(".", turn)}
	}

	opts := append([]chromedp.ExecAllocatorOption{},
		chromedp.ExecPath(browser),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(390, 844), // a phone (headless may clamp the width)
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	defer cancelT()

	url := "http://" + s.Addr() + "/"
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("browser: %s: %v", what, err)
		}
	}
	eval := evaluator(t, ctx)
	step("open the page", chromedp.Navigate(url), chromedp.WaitVisible("#input"))
	step("send a message", chromedp.SendKeys("#input", "hi there"), chromedp.Click("#send"))
	step("wait for the streamed reply", chromedp.WaitVisible(".msg.assistant:not(.pending)"))
	first := eval(`document.querySelector('.msg.assistant').textContent`)
	sessionBefore := eval(`localStorage.getItem("sb.session")`)
	width, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth - window.innerWidth`))
	if err != nil {
		t.Fatal(err)
	}
	step("reload", chromedp.Reload(), chromedp.WaitVisible("#input"))
	sessionAfter := eval(`localStorage.getItem("sb.session")`)
	step("send again", chromedp.SendKeys("#input", "again"), chromedp.Click("#send"))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll('.msg.assistant:not(.pending)').length >= 2`)); err != nil {
		t.Fatalf("browser: second reply: %v", err)
	}
	second := eval(`Array.from(document.querySelectorAll('.msg.assistant')).pop().textContent`)
	if first != "Hello from the agent." {
		t.Fatalf("first reply %q", first)
	}
	if second != "Hello from the agent.." {
		t.Fatalf("second reply %q: want the same chat's second turn", second)
	}
	if sessionBefore == "" || sessionBefore != sessionAfter {
		t.Fatalf("session %q before reload, %q after", sessionBefore, sessionAfter)
	}
	if width > 0 {
		t.Fatalf("page overflows a narrow window by %dpx", width)
	}
	chats := r.chatIDs()
	if len(chats) != 2 || chats[0] != sessionBefore || chats[1] != sessionBefore {
		t.Fatalf("chats %q, want both in %s", chats, sessionBefore)
	}
}

// TestWebChatAsksForTheKey: on a gateway with a key, the page asks for it
// after the first 401, keeps it, and sends the message the 401 refused
// with it, which gets its reply (it was dropped, to be typed again); the
// next message goes with the key.
func TestWebChatAsksForTheKey(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	t.Parallel()
	browser := chromiumPath(t)
	b := newBus(t)
	s := startService(t, b, nil)
	startResponder(t, b)
	ctx, step := headless(t, browser)
	step("open", chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitVisible("#input"))
	step("send without a key", chromedp.SendKeys("#input", "secret question"), chromedp.Click("#send"))
	step("key form", chromedp.WaitVisible("#key"), chromedp.SendKeys("#key", testKey), chromedp.Click("#key-form button"))
	step("the refused message's reply", chromedp.WaitVisible("#input"), chromedp.WaitVisible(".msg.assistant:not(.pending)"))
	step("send with the key", chromedp.SendKeys("#input", "with key"), chromedp.Click("#send"))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll('.msg.assistant:not(.pending)').length >= 2`)); err != nil {
		t.Fatalf("browser: the second reply: %v", err)
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](pageLog))
	if err != nil {
		t.Fatal(err)
	}
	if want := "msg user: secret question | msg error: This gateway needs an API key. Enter it below; your message goes out with it. | " +
		"msg assistant: echo: secret question (turn 1) | msg user: with key | msg assistant: echo: with key (turn 2)"; got != want {
		t.Fatalf("page %q, want %q", got, want)
	}
}

// TestWebChatSendsAPicture: a picture chosen with the paperclip goes with
// the typed text as an inline image part, which the gateway keeps in the
// attachment store; the page shows the picture's name in the user's
// bubble and the chip is gone after sending.
func TestWebChatSendsAPicture(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	t.Parallel()
	browser := chromiumPath(t)
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.Key, c.Insecure = "", true })
	r := startResponder(t, b)
	store := attachment.New(b.JetStream(), b.Topology(), attachment.Config{})
	pic := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{1, 2, 3}, 20000)...)
	r.answer = func(ev *eventsv1.MessageReceived, turn int) []string {
		var out []string
		for _, a := range ev.GetAttachments() {
			data, mime, err := store.Get(context.Background(), a.GetBytesRef(), 0)
			out = append(out, fmt.Sprintf("%s: %s %d bytes, same=%v, err=%v", ev.GetText(), mime, len(data), bytes.Equal(data, pic), err))
		}
		return out
	}
	file := filepath.Join(t.TempDir(), "cat.png")
	if err := os.WriteFile(file, pic, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, step := headless(t, browser)
	eval := evaluator(t, ctx)
	step("open", chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitVisible("#input"))
	step("attach", chromedp.SetUploadFiles("#file", []string{file}), chromedp.WaitVisible("#chip"))
	step("send", chromedp.SendKeys("#input", "what is this?"), chromedp.Click("#send"))
	step("reply", chromedp.WaitVisible(".msg.assistant:not(.pending)"))
	if got, want := eval(`document.querySelector('.msg.assistant').textContent`), fmt.Sprintf("what is this?: image/png %d bytes, same=true, err=<nil>", len(pic)); got != want {
		t.Fatalf("reply %q, want %q", got, want)
	}
	if got := eval(`document.querySelector('.msg.user').textContent`); got != "what is this?\n🖼 cat.png" {
		t.Fatalf("user bubble %q", got)
	}
	if hidden := eval(`String(document.getElementById('chip').hidden)`); hidden != "true" {
		t.Fatal("the picture is still attached after sending")
	}
}

// keylessWebChat starts, for a browser test (skipped with -short), an
// API gateway without a key on a bus of its own and a responder
// answering its messages: Chromium's path, the gateway and the responder.
func keylessWebChat(t *testing.T) (browser string, s *Service, r *responder) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a browser")
	}
	t.Parallel()
	browser = chromiumPath(t)
	b := newBus(t)
	s = startService(t, b, func(c *Config) { c.Key, c.Insecure = "", true })
	return browser, s, startResponder(t, b)
}

// headless starts a headless Chromium for the test: its context (90 s)
// and step, which runs actions and fails the test naming what failed.
func headless(t *testing.T, browser string) (context.Context, func(what string, actions ...chromedp.Action[chromedp.Void])) {
	t.Helper()
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(browser), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()))
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelT(); cancel(); cancelAlloc() })
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("browser: %s: %v", what, err)
		}
	}
	return ctx, step
}

// evaluator returns eval, which evaluates a JavaScript expression of
// string value in the page of ctx and fails the test if it cannot.
func evaluator(t *testing.T, ctx context.Context) func(expr string) string {
	return func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("browser: evaluate %s: %v", expr, err)
		}
		return v
	}
}

// TestWebChatResumesAnAnswerAfterAReload: a page reloaded (or a
// connection lost) while an answer is on its way gets that answer once it
// comes: the message went with an Idempotency-Key and is sent again with
// it, so the turn runs once and the answer is neither lost nor shown
// twice.
func TestWebChatResumesAnAnswerAfterAReload(t *testing.T) {
	browser, s, r := keylessWebChat(t)
	release := r.hold()
	defer release()
	ctx, step := headless(t, browser)
	eval := evaluator(t, ctx)
	step("open", chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitVisible("#input"))
	step("send", chromedp.SendKeys("#input", "still there?"), chromedp.Click("#send"))
	platformtest.WaitFor(t, "the message", func() bool { return len(r.received()) == 1 })
	step("reload before the answer", chromedp.Reload(), chromedp.WaitVisible("#input"))
	release()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1`)); err != nil {
		t.Fatalf("browser: the answer after the reload: %v", err)
	}
	if got := eval(pageLog); got != "msg user: still there? | msg assistant: echo: still there? (turn 1)" {
		t.Fatalf("page %q", got)
	}
	step("reload again", chromedp.Reload(), chromedp.WaitVisible("#input"))
	if got := eval(pageLog); got != "msg user: still there? | msg assistant: echo: still there? (turn 1)" {
		t.Fatalf("page after another reload %q", got)
	}
	if n := len(r.received()); n != 1 {
		t.Fatalf("%d messages published, want the one", n)
	}
}

// TestWebChatKeepsReconnecting: on a flaky network every request for
// the answer fails as a lost connection does, more often than the three
// tries after which the page gave up (six seconds, "reload the page to
// get it"); it keeps asking with the message's key, saying in the
// answer's bubble that it is reconnecting, and shows the answer once a
// request gets through, the message sent once. (The browser's online
// event, which a network coming back fires, makes it ask at once.)
func TestWebChatKeepsReconnecting(t *testing.T) {
	browser, s, r := keylessWebChat(t)
	ctx, step := headless(t, browser)
	eval := evaluator(t, ctx)
	step("open", chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitVisible("#input"))
	// The network is down: the page's requests for an answer fail as
	// fetch fails when the connection is lost.
	eval(`(() => {
		const real = window.fetch;
		window.tries = 0;
		window.down = true;
		window.fetch = function (url) {
			if (window.down && String(url).includes("/v1/chat/completions")) {
				window.tries++;
				return Promise.reject(new TypeError("Failed to fetch"));
			}
			return real.apply(this, arguments);
		};
		return "";
	})()`)
	step("send", chromedp.SendKeys("#input", "are you there?"), chromedp.Click("#send"))
	for i := 1; i <= 6; i++ {
		cond := fmt.Sprintf(`(window.tries >= %d && !!document.querySelector('.msg.assistant.pending .reconnecting')) || !!document.querySelector('.msg.error')`, i)
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](cond)); err != nil {
			t.Fatalf("browser: try %d: %v", i, err)
		}
		if got := eval(pageLog); strings.Contains(got, "msg error") {
			t.Fatalf("the page gave up after %s tries, not reconnecting: %q", eval(`String(window.tries)`), got)
		}
		if i == 6 {
			eval(`window.down = false, ""`)
		}
		eval(`window.dispatchEvent(new Event("online")), ""`)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll('.msg.assistant:not(.pending), .msg.error').length >= 1`)); err != nil {
		t.Fatalf("browser: the answer: %v", err)
	}
	if got, want := eval(pageLog+` + " | pending: " + `+pendingRecords), "msg user: are you there? | msg assistant: echo: are you there? (turn 1) | pending: null"; got != want {
		t.Fatalf("page %q, want %q", got, want)
	}
	if n := len(r.received()); n != 1 {
		t.Fatalf("%d messages published, want 1", n)
	}
}

// TestWebChatWaitsOutTheReplyTimeout: an answer that takes longer than
// gateways.api.reply_timeout ends the page's stream with the timeout
// error while its turn goes on; the page asks again with the message's
// Idempotency-Key and shows the answer when it comes, rather than an
// error and never the answer.
func TestWebChatWaitsOutTheReplyTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	t.Parallel()
	browser := chromiumPath(t)
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.Key, c.Insecure, c.ReplyTimeout = "", true, 2*time.Second })
	r := startResponder(t, b)
	release := r.hold()
	defer release()
	ctx, step := headless(t, browser)
	step("open", chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitVisible("#input"))
	step("send", chromedp.SendKeys("#input", "a long job"), chromedp.Click("#send"))
	platformtest.WaitFor(t, "the message", func() bool { return len(r.received()) == 1 })
	time.Sleep(2500 * time.Millisecond) // the first wait has timed out
	release()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll('.msg.assistant:not(.pending), .msg.error').length >= 1`)); err != nil {
		t.Fatalf("browser: the answer: %v", err)
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](pageLog))
	if err != nil {
		t.Fatal(err)
	}
	if got != "msg user: a long job | msg assistant: echo: a long job (turn 1)" {
		t.Fatalf("page %q", got)
	}
	if n := len(r.received()); n != 1 {
		t.Fatalf("%d messages published, want the one", n)
	}
}

// TestWebChatShowsATurnThatTimedOut: a turn that failed with the error
// code timeout (the provider stalled) shares its in-stream error's code
// with the end of the request's wait (reply_timeout), after which the
// page asks again; the turn's failure is its answer, shown as such,
// rather than asked for again and again and the message kept pending
// as if the connection had been lost.
func TestWebChatShowsATurnThatTimedOut(t *testing.T) {
	browser, s, r := keylessWebChat(t)
	r.mu.Lock()
	r.failure = "timeout"
	r.answer = func(*eventsv1.MessageReceived, int) []string { return nil } // nothing streamed first
	r.mu.Unlock()
	ctx, step := headless(t, browser)
	step("open", chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitVisible("#input"))
	step("send", chromedp.SendKeys("#input", "a stalled model"), chromedp.Click("#send"))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll('.msg.error').length >= 1`)); err != nil {
		t.Fatalf("browser: the failure: %v", err)
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](pageLog+` + " | pending: " + `+pendingRecords))
	if err != nil {
		t.Fatal(err)
	}
	if want := "msg user: a stalled model | msg error: " + failureMessage(failureText) + " | pending: null"; got != want {
		t.Fatalf("page %q, want %q", got, want)
	}
}

// TestWebChatGetsAnAnswerThatChangedWhileItStreamed: a turn run again
// after its worker died mid-stream answers with a final that does not
// continue what the first attempt streamed; the stream ends with the
// interrupted error (TestStreamEndsWithAnErrorWhenTheAnswerChanged),
// whose message tells a client to send the request again with its
// Idempotency-Key. The page showed that error as the answer and
// dropped the message, so the answer the conversation holds was never
// shown; it asks again with the message's key and shows the whole
// answer, the turn run once.
func TestWebChatGetsAnAnswerThatChangedWhileItStreamed(t *testing.T) {
	browser, s, r := keylessWebChat(t)
	const second = "a different answer, from the turn's second attempt"
	r.mu.Lock()
	r.final = func([]string) string { return second }
	r.mu.Unlock()
	ctx, step := headless(t, browser)
	step("open", chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitVisible("#input"))
	step("send", chromedp.SendKeys("#input", "stream me"), chromedp.Click("#send"))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll('.msg.assistant:not(.pending), .msg.error').length >= 1 && !document.querySelector('.msg.pending')`)); err != nil {
		t.Fatalf("browser: the answer: %v", err)
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](pageLog+` + " | pending: " + `+pendingRecords+` + " | kept: " + localStorage.getItem("sb.history")`))
	if err != nil {
		t.Fatal(err)
	}
	want := "msg user: stream me | msg assistant: " + second + ` | pending: null | kept: [{"role":"user","content":"stream me"},{"role":"assistant","content":"` + second + `"}]`
	if got != want {
		t.Fatalf("page %q, want %q", got, want)
	}
	if n := len(r.received()); n != 1 {
		t.Fatalf("%d messages published, want the one", n)
	}
}

// pendingRecords is the page's pending messages' records (each of its
// own, sb.pending.<key>), joined by ",", or "null" for none.
const pendingRecords = `(Object.keys(localStorage).filter(k => k.startsWith("sb.pending.")).map(k => localStorage.getItem(k)).join(",") || "null")`

// pageLog is the page's bubbles, "<class>: <text>" joined by " | ".
const pageLog = `Array.from(document.querySelectorAll('.msg')).map(m => m.className + ": " + m.textContent).join(" | ")`

// TestWebChatEnterWaitsForTheAnswer: Enter pressed while an answer is on
// its way sends nothing, as the disabled Send button does not: the text
// stays in the box. It went out as a second message at once, which
// interrupts the turn answering the first (the default busy mode), and
// the two answers' bookkeeping overwrote each other (the second message
// was no longer pending, its question gone from the kept transcript).
func TestWebChatEnterWaitsForTheAnswer(t *testing.T) {
	browser, s, r := keylessWebChat(t)
	release := r.hold()
	defer release()
	ctx, step := headless(t, browser)
	eval := evaluator(t, ctx)
	step("open", chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitVisible("#input"))
	// Enter as the keyboard's event (CDP's key events also type the
	// Enter's newline, which a real keyboard's cancelled keydown does not).
	enter := `document.getElementById("input").dispatchEvent(new KeyboardEvent("keydown", {key: "Enter", bubbles: true, cancelable: true}))`
	step("send", chromedp.SendKeys("#input", "first"))
	eval(`String(` + enter + `)`)
	platformtest.WaitFor(t, "the message", func() bool { return len(r.received()) == 1 })
	step("type while the answer is on its way", chromedp.SendKeys("#input", "second"))
	eval(`String(` + enter + `)`)
	if got := eval(pageLog + ` + " | input: " + document.getElementById("input").value`); got != "msg user: first | msg assistant pending:  | input: second" {
		t.Fatalf("page after Enter mid-answer %q", got)
	}
	release()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1 && !document.getElementById("send").disabled`)); err != nil {
		t.Fatalf("browser: the answer: %v", err)
	}
	eval(`String(` + enter + `)`) // the second, now
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll('.msg.assistant:not(.pending)').length >= 2`)); err != nil {
		t.Fatalf("browser: the second answer: %v", err)
	}
	step("reload", chromedp.Reload(), chromedp.WaitVisible("#input"))
	if got, want := eval(pageLog), "msg user: first | msg assistant: echo: first (turn 1) | msg user: second | msg assistant: echo: second (turn 2)"; got != want {
		t.Fatalf("page %q, want %q", got, want)
	}
	if n := len(r.received()); n != 2 {
		t.Fatalf("%d messages published, want 2", n)
	}
}

// TestWebChatNewChatLeavesTheAnswerBehind: "New chat" pressed while an
// answer is on its way starts the new conversation at once: the old
// answer neither keeps Send disabled until it comes nor, when it comes,
// writes the old conversation back into the new one's transcript (shown
// again after a reload) or drops the new one's pending message.
func TestWebChatNewChatLeavesTheAnswerBehind(t *testing.T) {
	browser, s, r := keylessWebChat(t)
	release := r.hold()
	defer release()
	ctx, step := headless(t, browser)
	eval := evaluator(t, ctx)
	step("open", chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitVisible("#input"))
	step("send", chromedp.SendKeys("#input", "old question"), chromedp.Click("#send"))
	platformtest.WaitFor(t, "the message", func() bool { return len(r.received()) == 1 })
	oldChat := r.chatIDs()[0]
	step("new chat", chromedp.Click("#new"))
	if got := eval(pageLog + ` + " | send disabled: " + document.getElementById("send").disabled`); got != " | send disabled: false" {
		t.Errorf("page after New chat mid-answer %q", got)
	}
	release() // the old answer comes
	platformtest.WaitFor(t, "the old answer's delivery", func() bool { return r.delivered(oldChat) })
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`!document.getElementById("send").disabled`)); err != nil {
		t.Fatalf("browser: Send enabled: %v", err)
	}
	step("send in the new chat", chromedp.SendKeys("#input", "new question"), chromedp.Click("#send"))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1`)); err != nil {
		t.Fatalf("browser: the new answer: %v", err)
	}
	step("reload", chromedp.Reload(), chromedp.WaitVisible("#input"))
	if got, want := eval(pageLog), "msg user: new question | msg assistant: echo: new question (turn 1)"; got != want {
		t.Fatalf("page %q, want %q", got, want)
	}
	if chats := r.chatIDs(); len(chats) != 2 || chats[0] == chats[1] {
		t.Fatalf("chats %q, want two conversations", chats)
	}
}

// TestWebChatTwoTabs: two tabs of the page share the conversation and
// its transcript (localStorage). An answer is added to the transcript as
// it is when the answer comes, not as it was when its question went out,
// which lost the other tab's question; and it leaves the message the
// other tab sent since pending, so that tab, reloaded before its own
// answer came, still asks for it and shows it.
func TestWebChatTwoTabs(t *testing.T) {
	browser, s, r := keylessWebChat(t)
	releaseA := r.hold()
	defer releaseA()
	gateB := make(chan struct{})
	var openB sync.Once
	releaseB := func() { openB.Do(func() { close(gateB) }) }
	defer releaseB()
	r.mu.Lock()
	r.answer = func(ev *eventsv1.MessageReceived, turn int) []string {
		if ev.GetText() == "from B" {
			<-gateB // B's answer waits for its own release
		}
		return []string{"echo: " + ev.GetText()}
	}
	r.mu.Unlock()
	tabA, stepA := headless(t, browser)
	url := "http://" + s.Addr() + "/"
	stepA("open tab A", chromedp.Navigate(url), chromedp.WaitVisible("#input"))
	tabB, cancelB := chromedp.NewContext(tabA) // another tab of the same browser, once it runs
	defer cancelB()
	stepB := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(tabB, actions...); err != nil {
			t.Fatalf("browser tab B: %s: %v", what, err)
		}
	}
	stepB("open tab B", chromedp.Navigate(url), chromedp.WaitVisible("#input"))
	stepA("send in A", chromedp.SendKeys("#input", "from A"), chromedp.Click("#send"))
	platformtest.WaitFor(t, "A's message", func() bool { return len(r.received()) == 1 })
	stepB("send in B", chromedp.SendKeys("#input", "from B"), chromedp.Click("#send"))
	platformtest.WaitFor(t, "B's message", func() bool { return len(r.received()) == 2 })
	// Each tab's localStorage follows the other's writes a moment later.
	kept := `JSON.parse(localStorage.getItem("sb.history") || "[]").length`
	if _, err := chromedp.Run(tabA, chromedp.Poll[bool](kept+` == 2`)); err != nil {
		t.Fatalf("browser: tab A sees B's question: %v", err)
	}
	releaseA()
	if _, err := chromedp.Run(tabA, chromedp.Poll[bool](`document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1`)); err != nil {
		t.Fatalf("browser: A's answer: %v", err)
	}
	if _, err := chromedp.Run(tabB, chromedp.Poll[bool](`(localStorage.getItem("sb.history") || "").includes("echo: from A")`)); err != nil {
		t.Fatalf("browser: tab B sees A's answer: %v", err)
	}
	stepB("reload B before its answer", chromedp.Reload(), chromedp.WaitVisible("#input"))
	releaseB()
	if _, err := chromedp.Run(tabB, chromedp.Poll[bool](`Array.from(document.querySelectorAll('.msg.assistant:not(.pending)')).some(m => m.textContent === "echo: from B")`)); err != nil {
		t.Fatalf("browser: B's answer after its reload: %v", err)
	}
	if _, err := chromedp.Run(tabA, chromedp.Poll[bool](pendingRecords+` === "null"`)); err != nil {
		t.Fatalf("browser: tab A sees nothing pending: %v", err)
	}
	stepA("reload A", chromedp.Reload(), chromedp.WaitVisible("#input"))
	got, err := chromedp.Run(tabA, chromedp.Evaluate[string](pageLog))
	if err != nil {
		t.Fatal(err)
	}
	if want := "msg user: from A | msg user: from B | msg assistant: echo: from A | msg assistant: echo: from B"; got != want {
		t.Fatalf("transcript %q, want %q", got, want)
	}
	if n := len(r.received()); n != 2 {
		t.Fatalf("%d messages published, want 2", n)
	}
}

// TestWebChatNewChatInAnotherTab: an answer that comes after another tab
// started a new chat is not written into the new chat's transcript, nor
// shown: the tab shows the new chat at once (TestWebChatOtherTabsShowANewConversation)
// and, as New chat pressed in it, no longer waits for the old
// conversation's answer, which it says.
func TestWebChatNewChatInAnotherTab(t *testing.T) {
	browser, s, r := keylessWebChat(t)
	release := r.hold()
	defer release()
	tabA, stepA := headless(t, browser)
	url := "http://" + s.Addr() + "/"
	stepA("open tab A", chromedp.Navigate(url), chromedp.WaitVisible("#input"))
	tabB, cancelB := chromedp.NewContext(tabA) // another tab of the same browser, once it runs
	defer cancelB()
	if err := chromedp.Do(tabB, chromedp.Navigate(url), chromedp.WaitVisible("#input")); err != nil {
		t.Fatalf("browser: open tab B: %v", err)
	}
	stepA("send in A", chromedp.SendKeys("#input", "old question"), chromedp.Click("#send"))
	platformtest.WaitFor(t, "A's message", func() bool { return len(r.received()) == 1 })
	oldChat := r.chatIDs()[0]
	if err := chromedp.Do(tabB, chromedp.Click("#new")); err != nil {
		t.Fatalf("browser: New chat in tab B: %v", err)
	}
	if _, err := chromedp.Run(tabA, chromedp.Poll[bool](`localStorage.getItem("sb.session") === null && `+pageLog+` === "msg notice: `+leftBehind("old question")+`" && !document.getElementById("send").disabled`)); err != nil {
		t.Fatalf("browser: tab A shows the new chat: %v", err)
	}
	release()
	platformtest.WaitFor(t, "the old answer's delivery", func() bool { return r.delivered(oldChat) })
	stepA("send in the new chat", chromedp.SendKeys("#input", "new question"), chromedp.Click("#send"))
	if _, err := chromedp.Run(tabA, chromedp.Poll[bool](`document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1`)); err != nil {
		t.Fatalf("browser: the new answer: %v", err)
	}
	got, err := chromedp.Run(tabA, chromedp.Evaluate[string](pageLog+` + " | kept: " + localStorage.getItem("sb.history")`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `msg notice: ` + leftBehind("old question") + ` | msg user: new question | msg assistant: echo: new question (turn 1) | kept: [{"role":"user","content":"new question"},{"role":"assistant","content":"echo: new question (turn 1)"}]`; got != want {
		t.Fatalf("the new chat %s, want %s", got, want)
	}
}

// TestWebChatEnterConfirmsAComposition: the Enter that confirms an input
// method's composition (Japanese, Chinese, Korean: the keydown has
// isComposing) ends the composition, as in any text box, rather than
// sending the message half typed.
func TestWebChatEnterConfirmsAComposition(t *testing.T) {
	browser, s, r := keylessWebChat(t)
	ctx, step := headless(t, browser)
	eval := evaluator(t, ctx)
	enter := func(composing bool) string {
		return fmt.Sprintf(`String(document.getElementById("input").dispatchEvent(new KeyboardEvent("keydown", {key: "Enter", isComposing: %v, bubbles: true, cancelable: true})))`, composing)
	}
	step("open", chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitVisible("#input"))
	step("type", chromedp.SendKeys("#input", "こんにちは"))
	if got := eval(enter(true)); got != "true" {
		t.Errorf("the composition's Enter was cancelled (%s): the input method cannot confirm it", got)
	}
	if got := eval(pageLog + ` + " | input: " + document.getElementById("input").value`); got != " | input: こんにちは" {
		t.Fatalf("page after the composition's Enter %q", got)
	}
	eval(enter(false))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1`)); err != nil {
		t.Fatalf("browser: the answer: %v", err)
	}
	if got := eval(pageLog); got != "msg user: こんにちは | msg assistant: echo: こんにちは (turn 1)" {
		t.Fatalf("page %q", got)
	}
	if n := len(r.received()); n != 1 {
		t.Fatalf("%d messages published, want 1", n)
	}
}

// TestWebChatLetsTheReaderScrollBack: a reader who scrolled back while a
// long answer streams stays where they read; each piece of the answer
// pulled the page back to its end. At the end, the page follows the
// answer as before.
func TestWebChatLetsTheReaderScrollBack(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	t.Parallel()
	browser := chromiumPath(t)
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.Key, c.Insecure = "", true })
	r := startResponder(t, b)
	const lines, readBack = 80, 40
	gate := make(chan struct{})
	var opened sync.Once
	open := func() { opened.Do(func() { close(gate) }) }
	defer open()
	r.mu.Lock()
	r.answer = func(*eventsv1.MessageReceived, int) []string {
		var out []string
		for i := range lines {
			out = append(out, fmt.Sprintf("line %d\n", i))
		}
		return out
	}
	r.before = func(i int) {
		if i == readBack {
			<-gate // the rest once the reader has scrolled back
		}
	}
	r.mu.Unlock()
	ctx, step := headless(t, browser)
	eval := evaluator(t, ctx)
	step("open", chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitVisible("#input"))
	step("send", chromedp.SendKeys("#input", "a long answer, please"), chromedp.Click("#send"))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`(document.querySelector('.msg.assistant') || {}).textContent === %q`, func() string {
		var b strings.Builder
		for i := range readBack {
			fmt.Fprintf(&b, "line %d\n", i)
		}
		// One paragraph: its last line break ends it.
		return strings.TrimSuffix(b.String(), "\n")
	}()))); err != nil {
		t.Fatalf("browser: the answer's first part: %v", err)
	}
	if got := eval(`(l => String(l.scrollHeight > l.clientHeight && l.scrollTop > 0))(document.getElementById("log"))`); got != "true" {
		t.Fatalf("the page did not follow the answer to its end (scrolled %s)", got)
	}
	eval(`String(document.getElementById("log").scrollTop = 0)`) // the reader scrolls back to the question
	open()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1`)); err != nil {
		t.Fatalf("browser: the whole answer: %v", err)
	}
	if got := eval(`String(document.getElementById("log").scrollTop)`); got != "0" {
		t.Fatalf("the page scrolled to %s while the reader read back", got)
	}
}

// TestWebChatWithAFullStorage: a transcript that fills the browser's
// localStorage (long answers kept over many conversations' worth of
// messages) loses its oldest exchanges, not the message being sent: the
// page failed to keep the question and then never sent it, silently,
// for every message after.
func TestWebChatWithAFullStorage(t *testing.T) {
	browser, s, r := keylessWebChat(t)
	ctx, step := headless(t, browser)
	eval := evaluator(t, ctx)
	step("open", chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitVisible("#input"))
	// A transcript of long answers as big as the storage takes, and the
	// little room left taken too.
	// The count of answers that fits is found by doubling, then halving
	// the gap: a few writes, not one of the whole transcript per answer
	// (hundreds of MB written through the storage, which took the
	// test's 90 s and more on a loaded machine).
	if got := eval(`(() => {
		const one = JSON.stringify({ role: "assistant", content: "x".repeat(100000) });
		const fits = n => {
			try { localStorage.setItem("sb.history", "[" + Array(n).fill(one).join(",") + "]"); return true; } catch (e) { return false; }
		};
		let lo = 0, hi = 1;
		while (fits(hi)) { lo = hi; hi *= 2; }
		while (hi - lo > 1) {
			const mid = Math.floor((lo + hi) / 2);
			if (fits(mid)) lo = mid; else hi = mid;
		}
		// The last write that fitted was lo's: the transcript kept.
		let n = 50000, i = 0;
		while (n > 0) {
			try { localStorage.setItem("filler" + i, "y".repeat(n)); i++; } catch (e) { n = Math.floor(n / 2); }
		}
		return String(JSON.parse(localStorage.getItem("sb.history")).length);
	})()`); got == "0" {
		t.Fatal("the storage took no transcript")
	}
	step("reload", chromedp.Reload(), chromedp.WaitVisible("#input"))
	step("send", chromedp.SendKeys("#input", "still working?"), chromedp.Click("#send"))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`Array.from(document.querySelectorAll('.msg.assistant:not(.pending), .msg.error')).some(m => !m.textContent.startsWith("xxx"))`)); err != nil {
		t.Fatalf("browser: the answer: %v", err)
	}
	if got := eval(`Array.from(document.querySelectorAll('.msg')).slice(-2).map(m => m.className + ": " + m.textContent).join(" | ")`); got != "msg user: still working? | msg assistant: echo: still working? (turn 1)" {
		t.Fatalf("page %q", got)
	}
	step("reload again", chromedp.Reload(), chromedp.WaitVisible("#input"))
	if got := eval(`Array.from(document.querySelectorAll('.msg')).slice(-2).map(m => m.className + ": " + m.textContent).join(" | ")`); got != "msg user: still working? | msg assistant: echo: still working? (turn 1)" {
		t.Fatalf("kept transcript ends %q", got)
	}
	if n := len(r.received()); n != 1 {
		t.Fatalf("%d messages published, want 1", n)
	}
}

// TestWebChatStopsTheAnswer: while an answer is on its way, Send is
// disabled, so a Stop control is the user's only way to end a turn
// that runs long: it sends the gateway's /stop in the conversation (a
// message of its own, as the API documents), and the request it
// stopped, answered interrupted, ends with its error and is no longer
// pending (a reload does not send it again).
func TestWebChatStopsTheAnswer(t *testing.T) {
	browser, s, r := keylessWebChat(t)
	release := r.hold()
	defer release()
	ctx, step := headless(t, browser)
	eval := evaluator(t, ctx)
	step("open", chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitVisible("#input"))
	switch eval(`String(document.getElementById("stop") && document.getElementById("stop").hidden)`) {
	case "null":
		t.Fatal("the page has no Stop control")
	case "false":
		t.Errorf("a Stop control shown with no answer on its way")
	}
	step("send", chromedp.SendKeys("#input", "a long task"), chromedp.Click("#send"))
	platformtest.WaitFor(t, "the message", func() bool { return len(r.received()) == 1 })
	step("stop", chromedp.WaitVisible("#stop"), chromedp.Click("#stop"))
	platformtest.WaitFor(t, "the /stop", func() bool { return len(r.received()) == 2 })
	got := r.received()
	if got[1].GetText() != "/stop" || got[1].GetSource().GetChatId() != got[0].GetSource().GetChatId() {
		t.Fatalf("sent %q in chat %q after %q in %q; want /stop in the same conversation",
			got[1].GetText(), got[1].GetSource().GetChatId(), got[0].GetText(), got[0].GetSource().GetChatId())
	}
	// The worker answers the stopped request interrupted.
	r.mu.Lock()
	r.failure = "interrupted"
	r.mu.Unlock()
	release()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll('.msg.error').length >= 1 && !document.getElementById("send").disabled && document.getElementById("stop").hidden`)); err != nil {
		t.Fatalf("browser: the stopped answer's end: %v\n%s", err, eval(pageLog))
	}
	if p := eval(pendingRecords); p != "null" {
		t.Errorf("the stopped message is still pending: %s", p)
	}
	step("reload", chromedp.Reload(), chromedp.WaitVisible("#input"))
	// What the answer showed before it stopped stays, marked
	// (TestWebChatKeepsAStoppedAnswersPart).
	if got := eval(pageLog); got != "msg user: a long task | msg assistant stopped: echo: a long task (turn 1)⏹ stopped" {
		t.Errorf("page after a reload %q, want the question and the answer's part, stopped", got)
	}
	if n := len(r.received()); n != 2 {
		t.Errorf("%d messages published, want the question and the /stop", n)
	}
}

// TestWebChatWaitsOutARateLimit: a message the gateway turns back
// before taking it (429 over the key's rate limit, or a 503 it could
// not publish; neither says X-Should-Retry: false) stays pending and
// goes out again after the Retry-After, with its key: it was dropped,
// the box emptied, and had to be typed again.
func TestWebChatWaitsOutARateLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	t.Parallel()
	browser := chromiumPath(t)
	b := newBus(t)
	// One request per 5 s.
	s := startService(t, b, func(c *Config) { c.Key, c.Insecure, c.RateLimit, c.RateBurst = "", true, 0.2, 1 })
	r := startResponder(t, b)
	ctx, step := headless(t, browser)
	eval := evaluator(t, ctx)
	step("open", chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitVisible("#input"))
	// Another request of this client takes the one it had.
	res, err := http.Post("http://"+s.Addr()+"/v1/chat/completions", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode == http.StatusTooManyRequests {
		t.Fatal("the first request was rate limited")
	}
	step("send", chromedp.SendKeys("#input", "are you there?"), chromedp.Click("#send"))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll('.msg.assistant:not(.pending), .msg.error').length >= 1`)); err != nil {
		t.Fatalf("browser: the answer: %v", err)
	}
	if got, want := eval(pageLog), "msg user: are you there? | msg assistant: echo: are you there? (turn 1)"; got != want {
		t.Fatalf("page %q, want %q", got, want)
	}
	if n := len(r.received()); n != 1 {
		t.Fatalf("%d messages published, want 1", n)
	}
}

// leftBehind is what a tab says when another tab's new conversation
// left the answer to its question behind.
func leftBehind(question string) string {
	return "A new conversation was started in another tab: the answer to “" + question + "” stays with the old conversation and is not shown here."
}
