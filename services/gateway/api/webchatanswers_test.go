package api

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
)

// poller returns poll, which waits (up to 20 s) until a JavaScript
// expression of boolean value holds in the page of ctx, or fails the
// test naming what it waited for, with the page's bubbles.
func poller(t *testing.T, ctx context.Context) func(what, expr string) {
	return func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
			page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](pageLog))
			t.Fatalf("browser: %s: %v\npage: %s", what, err, page)
		}
	}
}

// openWebChat starts a keyless web chat, sets up its responder with
// setup (under the responder's lock; nil for none) and opens its page in
// a headless browser: the responder, and the page's step, eval and poll.
func openWebChat(t *testing.T, setup func(r *responder)) (*responder, func(what string, actions ...chromedp.Action[chromedp.Void]), func(expr string) string, func(what, expr string)) {
	t.Helper()
	browser, s, r := keylessWebChat(t)
	if setup != nil {
		r.mu.Lock()
		setup(r)
		r.mu.Unlock()
	}
	ctx, step := headless(t, browser)
	step("open", chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitVisible("#input"))
	return r, step, evaluator(t, ctx), poller(t, ctx)
}

// markdownShape describes the first answer's elements: its paragraphs,
// the text of its bold, italic, inline code, list items, code block and
// links (with their hrefs), the script and image elements in the log,
// whether a script ran, and whether the HTML and the javascript: link
// show as the text they are.
const markdownShape = `(() => {
	const m = document.querySelector('.msg.assistant');
	const q = s => Array.from(m.querySelectorAll(s)).map(e => e.textContent).join(",");
	return [
		"p=" + m.querySelectorAll("p").length,
		"strong=" + q("strong"), "em=" + q("em"), "code=" + q("p code"),
		"ul=" + q("ul > li"), "ol=" + q("ol > li"), "pre=" + q("pre > code"),
		"a=" + Array.from(m.querySelectorAll("a")).map(a => a.textContent + " " + a.getAttribute("href")).join(","),
		"elements=" + document.querySelectorAll("#log script, #log img, #log [onerror]").length,
		"ran=" + String(window.pwned),
		"html shown=" + m.textContent.includes('<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'),
		"link shown=" + m.textContent.includes("[click me](javascript:window.pwned=3)"),
	].join(" | ");
})()`

// TestWebChatRendersMarkdown: an answer's Markdown shows as such —
// paragraphs, bold, italic, inline code, a fenced code block, lists and
// an http(s) link — built as elements from the text, so that HTML in the
// model's text (a script, an image's onerror) shows as the text it is
// and runs nothing, and a javascript: link is no link. The page showed
// the Markdown's marks as plain text. A reload shows the kept answer the
// same way.
func TestWebChatRendersMarkdown(t *testing.T) {
	_, step, eval, poll := openWebChat(t, func(r *responder) {
		r.answer = func(*eventsv1.MessageReceived, int) []string {
			return []string{"Some **bold** and *italic* with `x < y`.\n\n", "- one\n- two\n\n", "1. first\n2. second\n\n",
				"```go\nfmt.Println(\"<b>hi</b>\") // **not bold**\n```\n\n", "See [the docs](https://example.com/docs?a=1&b=2).\n\n",
				"<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\">\n\n",
				"[click me](javascript:window.pwned=3) [or me](JavaScript:window.pwned=4)"}
		}
	})
	step("send", chromedp.SendKeys("#input", "format something"), chromedp.Click("#send"))
	poll("the answer", `document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1`)
	want := `p=4 | strong=bold | em=italic | code=x < y | ul=one,two | ol=first,second | pre=fmt.Println("<b>hi</b>") // **not bold** | ` +
		`a=the docs https://example.com/docs?a=1&b=2 | elements=0 | ran=undefined | html shown=true | link shown=true`
	if got := eval(markdownShape); got != want {
		t.Fatalf("answer\n%s\nwant\n%s", got, want)
	}
	step("reload", chromedp.Reload(), chromedp.WaitVisible("#input"))
	if got := eval(markdownShape); got != want {
		t.Fatalf("kept answer\n%s\nwant\n%s", got, want)
	}
}

// TestWebChatTypedNewClearsTheTranscript: /new typed in the box starts
// a new conversation on the server, as the New chat button starts one;
// once its answer confirms it, the old transcript is gone from the page
// and from the kept one, as the button's, rather than shown on as if it
// were the new conversation's. The conversation's id stays: the server
// started the new one under it.
func TestWebChatTypedNewClearsTheTranscript(t *testing.T) {
	r, step, eval, poll := openWebChat(t, func(r *responder) {
		r.answer = func(ev *eventsv1.MessageReceived, turn int) []string {
			if ev.GetText() == "/new" {
				return []string{newSessionStarted} // the router's confirmation
			}
			return []string{fmt.Sprintf("echo: %s (turn %d)", ev.GetText(), turn)}
		}
	})
	step("send", chromedp.SendKeys("#input", "hello"), chromedp.Click("#send"))
	poll("the answer", `document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1 && !document.getElementById("send").disabled`)
	session := eval(`localStorage.getItem("sb.session")`)
	step("type /new", chromedp.SendKeys("#input", "/new"), chromedp.Click("#send"))
	poll("the answer to /new", `Array.from(document.querySelectorAll('.msg.assistant:not(.pending)')).some(m => m.textContent === "`+newSessionStarted+`") && !document.getElementById("send").disabled`)
	if got := eval(pageLog); got != "msg assistant: "+newSessionStarted {
		t.Fatalf("page after /new %q, want its answer alone", got)
	}
	step("reload", chromedp.Reload(), chromedp.WaitVisible("#input"))
	if got := eval(pageLog + ` + " | session: " + localStorage.getItem("sb.session")`); got != "msg assistant: "+newSessionStarted+" | session: "+session {
		t.Fatalf("page after a reload %q", got)
	}
	if chats := r.chatIDs(); len(chats) != 2 || chats[0] != session || chats[1] != session {
		t.Fatalf("chats %q, want both in %s", chats, session)
	}
}

// newSessionStarted is the router's answer to a /new that started a new
// conversation (services/router/commands.go).
const newSessionStarted = "✨ New session started."

// TestWebChatTypedNewKeepsTheTranscriptWhenRefused: a typed /new the
// router answers without starting a new conversation (reserved for
// admins, or not a command at all) leaves the transcript as it was, on
// screen and kept: the page cleared it on any answer, the conversation
// it showed gone though the server went on with it.
func TestWebChatTypedNewKeepsTheTranscriptWhenRefused(t *testing.T) {
	const refusal = "/new is reserved for admins here. /help and /whoami are available."
	_, step, eval, poll := openWebChat(t, func(r *responder) {
		r.answer = func(ev *eventsv1.MessageReceived, turn int) []string {
			if ev.GetText() == "/new" {
				return []string{refusal}
			}
			return []string{fmt.Sprintf("echo: %s (turn %d)", ev.GetText(), turn)}
		}
	})
	step("send", chromedp.SendKeys("#input", "hello"), chromedp.Click("#send"))
	poll("the answer", `document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1 && !document.getElementById("send").disabled`)
	step("type /new", chromedp.SendKeys("#input", "/new"), chromedp.Click("#send"))
	poll("the answer to /new", `Array.from(document.querySelectorAll('.msg.assistant:not(.pending)')).some(m => m.textContent === "`+refusal+`") && !document.getElementById("send").disabled`)
	const want = "msg user: hello | msg assistant: echo: hello (turn 1) | msg user: /new | msg assistant: " + refusal
	if got := eval(pageLog); got != want {
		t.Fatalf("page after a refused /new %q, want %q", got, want)
	}
	step("reload", chromedp.Reload(), chromedp.WaitVisible("#input"))
	if got := eval(pageLog); got != want {
		t.Fatalf("page after a reload %q, want %q", got, want)
	}
}

// TestWebChatKeepsAStoppedAnswersPart: the part of an answer that
// streamed before Stop ended its turn stays, in the page and in the
// kept transcript, marked as stopped; a reload showed the question
// alone, what the user had read gone.
func TestWebChatKeepsAStoppedAnswersPart(t *testing.T) {
	gate := make(chan struct{})
	var opened sync.Once
	open := func() { opened.Do(func() { close(gate) }) }
	defer open()
	var held atomic.Bool
	r, step, eval, poll := openWebChat(t, func(r *responder) {
		r.answer = func(*eventsv1.MessageReceived, int) []string { return []string{"The first part", " and more"} }
		r.before = func(i int) {
			if i == 1 && held.CompareAndSwap(false, true) {
				<-gate // the first answer's rest, once Stop was pressed
			}
		}
	})
	step("send", chromedp.SendKeys("#input", "a long task"), chromedp.Click("#send"))
	poll("the answer's first part", `(document.querySelector('.msg.assistant') || {}).textContent === "The first part"`)
	step("stop", chromedp.Click("#stop"))
	platformtest.WaitFor(t, "the /stop", func() bool { return len(r.received()) == 2 })
	r.mu.Lock()
	r.failure = "interrupted" // the worker answers the stopped request interrupted
	r.mu.Unlock()
	open()
	poll("the stopped answer's end", `document.querySelectorAll('.msg.error').length >= 1 && !document.getElementById("send").disabled`)
	const want = "msg user: a long task | msg assistant stopped: The first part and more⏹ stopped"
	if got := eval(`Array.from(document.querySelectorAll('.msg:not(.error)')).map(m => m.className + ": " + m.textContent).join(" | ")`); got != want {
		t.Errorf("page %q, want %q", got, want)
	}
	step("reload", chromedp.Reload(), chromedp.WaitVisible("#input"))
	if got := eval(pageLog); got != want {
		t.Errorf("page after a reload %q, want %q", got, want)
	}
}

// TestWebChatShowsThePartStreamedBeforeAReload: a page reloaded while
// an answer streams shows the part it had shown, still on its way,
// rather than an empty bubble until the whole answer comes; the whole
// answer then takes its place, once.
func TestWebChatShowsThePartStreamedBeforeAReload(t *testing.T) {
	gate := make(chan struct{})
	var opened sync.Once
	open := func() { opened.Do(func() { close(gate) }) }
	defer open()
	var held atomic.Bool
	r, step, eval, poll := openWebChat(t, func(r *responder) {
		r.answer = func(*eventsv1.MessageReceived, int) []string {
			return []string{"Part one, ", "part two, ", "part three."}
		}
		r.before = func(i int) {
			if i == 2 && held.CompareAndSwap(false, true) {
				<-gate
			}
		}
	})
	step("send", chromedp.SendKeys("#input", "tell me"), chromedp.Click("#send"))
	const part = `(document.querySelector('.msg.assistant.pending') || {}).textContent === "Part one, part two, "`
	poll("the answer's first part", part)
	step("reload mid-answer", chromedp.Reload(), chromedp.WaitVisible("#input"))
	poll("the first part after the reload", part)
	open()
	poll("the whole answer", `document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1`)
	if got := eval(pageLog); got != "msg user: tell me | msg assistant: Part one, part two, part three." {
		t.Fatalf("page %q", got)
	}
	if n := len(r.received()); n != 1 {
		t.Fatalf("%d messages published, want the one", n)
	}
}

// TestWebChatShowsToolProgress: the tool calls the stream shows
// (hermes.tool.progress) show in the answer's bubble, a line each (the
// tool's emoji and the call's label), running until they end; the page
// skipped them, nothing on screen while a turn ran its tools. They are
// kept with the answer. Internal tools and the end of a call never
// started stay hidden, as the stream leaves them out.
func TestWebChatShowsToolProgress(t *testing.T) {
	r, step, eval, poll := openWebChat(t, nil)
	shown, _ := toolTurn(r)
	step("send", chromedp.SendKeys("#input", "what time is it?"), chromedp.Click("#send"))
	poll("the answer", `document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1`)
	const tools = `Array.from(document.querySelectorAll('.msg.assistant .tool')).map(e => e.className + ": " + e.textContent).join(" | ")`
	const want = "tool done: 💻 date | tool done: ⚡ clock"
	text := `Array.from(document.querySelectorAll('.msg.assistant p')).map(p => p.textContent).join("\n\n")`
	if got := eval(tools); got != want {
		t.Errorf("tool lines %q, want %q", got, want)
	}
	if got := eval(text); got != shown {
		t.Errorf("answer %q, want %q", got, shown)
	}
	step("reload", chromedp.Reload(), chromedp.WaitVisible("#input"))
	if got := eval(tools); got != want {
		t.Errorf("kept tool lines %q, want %q", got, want)
	}
}

// TestWebChatEndsToolLinesOfAReloadedAnswer: a tool call shown running
// when the page was reloaded mid-answer shows done once the answer is
// in (the turn ended, its calls with it): the retry the reloaded page
// sends joins the turn midway and is not told of the end of a call it
// did not see start, and the line stayed "running" beside the whole
// answer.
func TestWebChatEndsToolLinesOfAReloadedAnswer(t *testing.T) {
	const tools = `Array.from(document.querySelectorAll('.msg.assistant .tool')).map(e => e.className + ": " + e.textContent).join(" | ")`
	gate := make(chan struct{})
	var opened sync.Once
	open := func() { opened.Do(func() { close(gate) }) }
	defer open()
	var held atomic.Bool
	date := &deliveryv1.ToolStep{ToolCallId: "call_1", ToolName: "terminal", Phase: "started", Detail: "date", Emoji: "💻"}
	r, step, eval, poll := openWebChat(t, func(r *responder) {
		r.answer = func(*eventsv1.MessageReceived, int) []string { return []string{"Looking. ", "It's 5pm."} }
		r.tools = map[int][]*deliveryv1.ToolStep{
			0: {date},
			1: {{ToolCallId: "call_1", ToolName: "terminal", Phase: "finished", Detail: "Sat Dec  5 17:00:00 UTC 2026"}},
		}
		r.before = func(i int) {
			if i == 1 && held.CompareAndSwap(false, true) {
				<-gate // the call's end and the rest, once the page was reloaded
			}
		}
	})
	step("send", chromedp.SendKeys("#input", "what time is it?"), chromedp.Click("#send"))
	poll("the running call", tools+` === "tool running: 💻 date" && (document.querySelector('.msg.assistant .md') || {}).textContent === "Looking. "`)
	step("reload mid-answer", chromedp.Reload(), chromedp.WaitVisible("#input"))
	poll("the running call after the reload", tools+` === "tool running: 💻 date"`)
	open()
	poll("the whole answer", `document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1`)
	if got := eval(tools); got != "tool done: 💻 date" {
		t.Errorf("tool lines with the answer %q, want the call done", got)
	}
	if n := len(r.received()); n != 1 {
		t.Fatalf("%d messages published, want the one", n)
	}
}

// TestWebChatShowsALinkWithoutText: a Markdown link with no text of its
// own ("[](https://…)") shows its address as its text; it was an empty
// link, nothing of it on screen to read or click.
func TestWebChatShowsALinkWithoutText(t *testing.T) {
	_, step, eval, poll := openWebChat(t, func(r *responder) {
		r.answer = func(*eventsv1.MessageReceived, int) []string {
			return []string{"The page: [](https://example.com/a) and [ ](https://example.com/b)."}
		}
	})
	step("send", chromedp.SendKeys("#input", "a link"), chromedp.Click("#send"))
	poll("the answer", `document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1`)
	const links = `Array.from(document.querySelectorAll('.msg.assistant a')).map(a => a.textContent + " " + a.getAttribute("href")).join(", ")`
	if got, want := eval(links), "https://example.com/a https://example.com/a, https://example.com/b https://example.com/b"; got != want {
		t.Errorf("links %q, want %q", got, want)
	}
}

// TestWebChatShowsUnclosedEmphasisAsText: a long answer full of
// emphasis openers that nothing closes ("*a *a …", some 20 KB, streamed
// a few openers a piece) shows every character of it as text once it is
// in. Each unclosed opener searched the rest of the text for its closer,
// and the whole answer was rendered again on every piece: the page froze
// on such an answer (this test's page past its browser's time limit).
func TestWebChatShowsUnclosedEmphasisAsText(t *testing.T) {
	text := strings.Repeat("*a ", 6800) + "*a"
	_, step, eval, poll := openWebChat(t, func(r *responder) {
		r.answer = answerInPieces(text, 12) // four openers a piece, as a model streams them
	})
	step("send", chromedp.SendKeys("#input", "stars"), chromedp.Click("#send"))
	poll("the answer", `document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1`)
	got := eval(`(() => {
		const m = document.querySelector('.msg.assistant .md');
		return m.querySelectorAll("em, strong").length + " " + m.textContent;
	})()`)
	if want := "0 " + text; got != want {
		t.Fatalf("answer of %d characters shown as %d: %.80q…", len(text), len(got)-2, got)
	}
}

// TestWebChatRendersKeptAnswersWhenSeen: a reload shows a long kept
// transcript with the answers on screen (the newest) rendered as
// Markdown in its first frame and the others as they come near the
// screen, or in the background after it; every kept answer was rendered
// before the page showed, which took seconds for a full storage.
func TestWebChatRendersKeptAnswersWhenSeen(t *testing.T) {
	browser, s, _ := keylessWebChat(t)
	ctx, step := headless(t, browser)
	eval, poll := evaluator(t, ctx), poller(t, ctx)
	traceRendering(t, ctx)
	step("open", chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitVisible("#input"))
	eval(`(() => {
		const h = [];
		for (let i = 0; i < 60; i++) {
			h.push({ role: "user", content: "question " + i });
			h.push({ role: "assistant", content: "**answer " + i + "**\n\n" + "- a line\n".repeat(30) });
		}
		localStorage.setItem("sb.history", JSON.stringify(h));
		return "";
	})()`)
	step("reload", chromedp.Reload(), chromedp.WaitVisible("#input"))
	poll("the first frame", `!!window.sbTrace.firstFrame`)
	// The newest answer's bold text and count of list items, and the
	// oldest's ("undefined 0" while it waits to be rendered) and the
	// start of its text, in the page's first frame.
	if got, want := eval(`(f => f.newest + " | " + f.oldest + " | " + f.oldestText)(window.sbTrace.firstFrame)`), "answer 59 30 | undefined 0 | **answer 0**"; got != want {
		t.Fatalf("the first frame shows %q, want %q", got, want)
	}
	eval(`String(document.getElementById("log").scrollTop = 0)`) // the reader goes back to the start
	poll("the oldest answer rendered", `(m => (m.querySelector("strong") || {}).textContent + " " + m.querySelectorAll("li").length)(document.querySelectorAll(".msg.assistant")[0]) === "answer 0 30"`)
	if got := eval(`String(document.querySelectorAll(".msg.assistant").length)`); got != "60" {
		t.Fatalf("%s answers shown, want 60", got)
	}
}

// traceRendering has every page of ctx record, in window.sbTrace, its
// first frame (firstFrame: when, its count of answers and of those not
// rendered yet, the newest's and the oldest's bold text and count of
// list items, and the oldest's first 12 characters), the longest task after it
// (longest, ms; 0 when none took 50 ms), the answers rendered after it
// task by task (batches: each task's answers, by their place in the
// log), when the last answer waiting was rendered (done), and how many
// answers waited when a key was typed in the box (typed).
func traceRendering(t *testing.T, ctx context.Context) {
	t.Helper()
	const script = `(() => {
		const unrendered = () => document.querySelectorAll(".msg.assistant[data-later]").length;
		const shape = m => m ? (m.querySelector("strong") || {}).textContent + " " + m.querySelectorAll("li").length : "none";
		const trace = window.sbTrace = { longest: 0, typed: -1, batches: [] };
		document.addEventListener("DOMContentLoaded", () => requestAnimationFrame(() => {
			const a = document.querySelectorAll(".msg.assistant");
			trace.firstFrame = { at: performance.now(), answers: a.length, unrendered: unrendered(), newest: shape(a[a.length - 1]), oldest: shape(a[0]), oldestText: a.length ? a[0].textContent.slice(0, 12) : "" };
		}));
		new PerformanceObserver(l => l.getEntries().forEach(e => {
			if (trace.firstFrame && e.startTime >= trace.firstFrame.at) trace.longest = Math.max(trace.longest, e.duration);
		})).observe({ type: "longtask" });
		// A mutation observer's records come once a task (at its end):
		// a batch is what one task rendered.
		new MutationObserver(records => {
			if (!trace.firstFrame) return;
			const a = Array.from(document.querySelectorAll(".msg.assistant"));
			const batch = records.filter(r => !r.target.hasAttribute("data-later")).map(r => a.indexOf(r.target)).filter(i => i >= 0);
			if (batch.length) trace.batches.push(batch);
			if (!trace.done && !unrendered()) trace.done = performance.now();
		}).observe(document, { subtree: true, attributes: true, attributeFilter: ["data-later"] });
		document.addEventListener("input", () => { trace.typed = unrendered(); }, true);
	})()`
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: script}); err != nil {
		t.Fatalf("browser: trace the rendering: %v", err)
	}
}

// TestWebChatRendersEveryKeptAnswerAfterAReload: shortly after a reload
// every kept answer shows rendered, with no scrolling, so that the
// browser's search finds them as they show and the scrollbar is exact:
// those never scrolled near showed their Markdown's marks, and were
// laid out as an estimate. The first frame still shows the newest
// rendered alone; the rest is rendered in the background in slices,
// between which the page takes what is typed (a key typed at once is
// taken while answers still wait), and no task of it runs long beside
// the whole (each answer's blocks over several slices). The reader
// stays at the log's end.
func TestWebChatRendersEveryKeptAnswerAfterAReload(t *testing.T) {
	const answers = 12
	browser, s, _ := keylessWebChat(t)
	ctx, step := headless(t, browser)
	eval, poll := evaluator(t, ctx), poller(t, ctx)
	traceRendering(t, ctx)
	step("open", chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitVisible("#input"))
	// Long answers (some 30 KB each) of paragraphs, lists and code.
	eval(fmt.Sprintf(`(() => {
		const h = [];
		const block = "A paragraph with **bold**, *italic* and a [link](https://example.com/x) in it.\n\n- an item with `+"`code`"+`\n- another\n\n";
		for (let i = 0; i < %d; i++) {
			h.push({ role: "user", content: "question " + i });
			h.push({ role: "assistant", content: "**answer " + i + "**\n\n" + block.repeat(250) + "`+"```"+`\ncode\n`+"```"+`" });
		}
		localStorage.setItem("sb.history", JSON.stringify(h));
		return "";
	})()`, answers))
	step("reload", chromedp.Reload(), chromedp.WaitVisible("#input"))
	poll("the first frame", `!!window.sbTrace.firstFrame`)
	step("type at once", chromedp.SendKeys("#input", "x"))
	first := eval(`(f => f.answers + " answers, " + f.unrendered + " not rendered, the newest " + f.newest)(window.sbTrace.firstFrame)`)
	var shown, waited int
	if _, err := fmt.Sscanf(first, "%d answers, %d not rendered", &shown, &waited); err != nil || shown != answers || waited < answers/2 ||
		!strings.HasSuffix(first, fmt.Sprintf("the newest answer %d 500", answers-1)) {
		t.Fatalf("first frame: %s (%v); want the newest rendered, most others not yet", first, err)
	}
	if typed := eval(`String(window.sbTrace.typed)`); typed == "-1" || typed == "0" {
		t.Errorf("the key typed at once was taken with %s answers waiting: want it taken between the slices, while answers wait", typed)
	}
	// A minute: on a loaded machine the browser gets little of the CPU.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll(".msg.assistant[data-later]").length === 0 && !!window.sbTrace.done`, chromedp.WithPollingTimeout(time.Minute))); err != nil {
		t.Fatalf("browser: every answer rendered: %v (%s answers waiting)", err, eval(`String(document.querySelectorAll(".msg.assistant[data-later]").length)`))
	}
	got := eval(`(() => {
		const log = document.getElementById("log");
		const a = Array.from(document.querySelectorAll(".msg.assistant"));
		const bold = a.filter((m, i) => (m.querySelector("p strong") || {}).textContent === "answer " + i).length;
		return bold + " rendered, marks shown: " + log.textContent.includes("**") + ", at the end: " + (log.scrollHeight - log.scrollTop - log.clientHeight < 40) + ", input: " + document.getElementById("input").value;
	})()`)
	if want := fmt.Sprintf("%d rendered, marks shown: false, at the end: true, input: x", answers); got != want {
		t.Fatalf("after the background rendering: %s, want %s", got, want)
	}
	// The rendering's structure, not its times: on a loaded machine (CI
	// runs every package at once on two cores) a garbage collection or a
	// renderer descheduled mid-slice makes one task long beside the
	// whole, slices or not. What a loaded machine cannot change: the
	// answers the first frame left were rendered newest first, over
	// tasks of about an answer each at most (the slices' budget is of
	// time, and an answer of these takes longer than a slice: a slower
	// machine renders less in each, never more), not in one or two (one
	// task for all, and one for the answer near the screen).
	batches := eval(`JSON.stringify(window.sbTrace.batches)`)
	var tasks [][]int
	if err := json.Unmarshal([]byte(batches), &tasks); err != nil {
		t.Fatalf("batches %s: %v", batches, err)
	}
	var order []int
	for _, b := range tasks {
		order = append(order, b...)
	}
	if len(order) != waited || !sort.SliceIsSorted(order, func(i, j int) bool { return order[i] > order[j] }) || len(tasks) < waited/2 {
		t.Errorf("rendered task by task %s: want the %d answers waiting, newest first, over %d tasks at least", batches, waited, waited/2)
	}
	t.Logf("rendered in %s ms after the first frame in %d tasks, longest task %s ms", eval(`String(Math.round(window.sbTrace.done - window.sbTrace.firstFrame.at))`), len(tasks), eval(`String(Math.round(window.sbTrace.longest))`))
}

// TestWebChatParsesLongRunsOfMarks: an answer of long runs of Markdown
// marks shows as text, whole, with its links and at most NEST levels of
// emphasis: a line of "[" that nothing closes searched the rest of the
// line again for each "[", and a run of "*" was parsed again for each
// level of emphasis it opened (some 25,000 of them for 100,000 "*",
// past the script's stack).
func TestWebChatParsesLongRunsOfMarks(t *testing.T) {
	const n = 100000
	paragraphs := []string{
		strings.Repeat("[", n),
		strings.Repeat("[", n) + "]" + strings.Repeat("x", n), // closed, no address
		"[[[x](https://example.com/a) and [y](https://example.com/b)",
		strings.Repeat("*", n),
		strings.Repeat("_", n+1),
	}
	text := strings.Join(paragraphs, "\n\n")
	_, step, eval, poll := openWebChat(t, func(r *responder) {
		r.answer = answerInPieces(text, 20000)
	})
	step("send", chromedp.SendKeys("#input", "marks"), chromedp.Click("#send"))
	poll("the answer", `document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1`)
	// Each paragraph: its text's length, its links, and its emphasis
	// (each level's tag and the length of the text it holds).
	got := eval(`Array.from(document.querySelectorAll('.msg.assistant .md > p')).map(p => {
		const links = Array.from(p.querySelectorAll("a")).map(a => a.textContent + ">" + a.getAttribute("href"));
		const levels = [];
		for (let e = p.querySelector("strong, em"); e; e = e.querySelector("strong, em")) levels.push(e.tagName.toLowerCase());
		return p.textContent.length + " [" + links.join(" ") + "] " + levels.length + (levels.length ? " " + levels[0] + "…" + levels[levels.length - 1] : "");
	}).join(" | ")`)
	want := fmt.Sprintf("%d [] 0 | %d [] 0 | 9 [[[x>https://example.com/a y>https://example.com/b] 0 | %d [] 20 strong…strong | %d [] 20 strong…strong", n, 2*n+1, n-80, n+1-80)
	if got != want {
		t.Fatalf("paragraphs\n%s\nwant\n%s", got, want)
	}
}

// TestWebChatParsesLongLinesOfAddresses: a line of many bare addresses
// that are no address ("http://[" again and again, 512 KB) shows as
// text, whole, and a valid one after them as a link; an address with
// long runs of punctuation in it and after it links up to its last
// character that is not punctuation, the rest text; bare addresses
// and links in an ordinary line show as before (http and https only,
// the sentence's punctuation left out, each link opening apart). Each
// "http://" of such a line had the rest of the line taken for its
// address and parsed again (64 KB took seconds, 256 KB a minute), and
// the punctuation ending an address was looked for from each character
// of a run of it.
func TestWebChatParsesLongLinesOfAddresses(t *testing.T) {
	const n = 65536
	paragraphs := []string{
		strings.Repeat("http://[", n) + "http://example.com/end",
		"http://a/" + strings.Repeat(".", 2*n) + "x" + strings.Repeat(".", 2*n) + " end",
		"See [t](https://example.com/t) http://example.com/a_(b), https://example.com/x?y=1#z. (http://example.com/p) " +
			"http://[::1]:8080/ok http://host:port/x/**bold** http://[http://example.com/q \"https://example.com/quoted\" " +
			"http://example.com/<script> javascript:alert(1) ftp://example.com/f wordhttp://example.com/w https:////example.com/slashes",
	}
	text := strings.Join(paragraphs, "\n\n")
	_, step, eval, poll := openWebChat(t, func(r *responder) {
		r.answer = answerInPieces(text, 20000)
	})
	step("send", chromedp.SendKeys("#input", "addresses"), chromedp.Click("#send"))
	poll("the answer", `document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1`)
	// Each paragraph: its text's length, its links (text>href, a long
	// one's start and length, and whether each opens apart, without the
	// page), and its bold text.
	got := eval(`Array.from(document.querySelectorAll('.msg.assistant .md > p')).map(p => {
		const short = t => t.length > 100 ? t.slice(0, 12) + "…(" + t.length + ")" : t;
		const links = Array.from(p.querySelectorAll("a")).map(a => short(a.textContent) + ">" + short(a.getAttribute("href")) + (a.target === "_blank" && a.rel === "noopener noreferrer nofollow" ? "" : " (opens in the page)"));
		return p.textContent.length + " [" + links.join(" ") + "] " + Array.from(p.querySelectorAll("strong")).map(e => e.textContent).join(",");
	}).join(" | ")`)
	ordinary := []string{
		"t>https://example.com/t",
		"http://example.com/a_(b)>http://example.com/a_(b)",
		"https://example.com/x?y=1#z>https://example.com/x?y=1#z",
		"http://example.com/p>http://example.com/p",
		"http://[::1]:8080/ok>http://[::1]:8080/ok",
		"http://example.com/q>http://example.com/q",
		"https://example.com/quoted>https://example.com/quoted",
		"http://example.com/>http://example.com/",
		"https:////example.com/slashes>https://example.com/slashes",
	}
	want := fmt.Sprintf("%d [http://example.com/end>http://example.com/end] "+
		" | %d [http://a/...…(%[3]d)>http://a/...…(%[3]d)] "+
		" | %d [%s] bold",
		8*n+22, len(paragraphs[1]), len("http://a/")+2*n+1, len(paragraphs[2])-len("[](https://example.com/t)")-4, strings.Join(ordinary, " "))
	if got != want {
		t.Fatalf("paragraphs\n%s\nwant\n%s", got, want)
	}
}

// TestWebChatKeepsTheStreamedPartAtMostOnceASecond: the part of an
// answer streamed so far is written to the storage (for a reload) at
// most once a second while it streams, and still written: it was
// written four times a second, each write (the whole pending message,
// a picture's megabytes with it) going to every open tab of the page.
func TestWebChatKeepsTheStreamedPartAtMostOnceASecond(t *testing.T) {
	_, step, eval, poll := openWebChat(t, func(r *responder) {
		r.answer = func(*eventsv1.MessageReceived, int) []string {
			pieces := make([]string, 30)
			for i := range pieces {
				pieces[i] = fmt.Sprintf("piece %d. ", i)
			}
			return pieces
		}
		r.pace = 100 * time.Millisecond // three seconds of streaming
	})
	// The page's writes of what it keeps of the answer on its way: when
	// (ms), and how much of it.
	eval(`(() => {
		window.partWrites = [];
		const set = Storage.prototype.setItem;
		Storage.prototype.setItem = function (k, v) {
			if ((k.startsWith("sb.pending") || k.startsWith("sb.part")) && v.includes('"shown"')) window.partWrites.push([performance.now(), JSON.parse(v).shown]);
			return set.apply(this, arguments);
		};
		return "";
	})()`)
	step("send", chromedp.SendKeys("#input", "stream slowly"), chromedp.Click("#send"))
	poll("the answer", `document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1`)
	got := eval(`(() => {
		const w = window.partWrites, gaps = w.slice(1).map((x, i) => x[0] - w[i][0]);
		return w.length + " writes, " + (w.length ? "first of " + w[0][1].length + " characters, " : "") + "shortest gap " + (gaps.length ? Math.round(Math.min(...gaps)) : "none") + " ms";
	})()`)
	var writes, first, gap int
	if _, err := fmt.Sscanf(got, "%d writes, first of %d characters, shortest gap %d ms", &writes, &first, &gap); err != nil && !strings.Contains(got, "gap none") {
		t.Fatalf("writes: %s (%v)", got, err)
	}
	if writes == 0 || first == 0 {
		t.Fatalf("%s: the part streamed was not kept while it streamed", got)
	}
	if writes > 1 && gap < 990 {
		t.Fatalf("%s: want at most one a second", got)
	}
}

// TestWebChatOtherTabsShowANewConversation: a new conversation started
// in one tab (a typed /new its answer confirmed, or New chat) shows in
// the page's other open tabs at once: they showed the old transcript
// until reloaded, and added their next exchange to it on screen.
func TestWebChatOtherTabsShowANewConversation(t *testing.T) {
	browser, s, r := keylessWebChat(t)
	r.mu.Lock()
	r.answer = func(ev *eventsv1.MessageReceived, turn int) []string {
		if ev.GetText() == "/new" {
			return []string{newSessionStarted}
		}
		return []string{fmt.Sprintf("echo: %s (turn %d)", ev.GetText(), turn)}
	}
	r.mu.Unlock()
	tabA, stepA := headless(t, browser)
	url := "http://" + s.Addr() + "/"
	stepA("open tab A", chromedp.Navigate(url), chromedp.WaitVisible("#input"))
	pollA := poller(t, tabA)
	stepA("send in A", chromedp.SendKeys("#input", "hello"), chromedp.Click("#send"))
	pollA("A's answer", `document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1 && !document.getElementById("send").disabled`)
	tabB, cancelB := chromedp.NewContext(tabA) // another tab of the same browser
	defer cancelB()
	pollB := poller(t, tabB)
	if err := chromedp.Do(tabB, chromedp.Navigate(url), chromedp.WaitVisible("#input"), chromedp.SendKeys("#input", "/new"), chromedp.Click("#send")); err != nil {
		t.Fatalf("browser: /new in tab B: %v", err)
	}
	pollB("B's answer to /new", `Array.from(document.querySelectorAll('.msg.assistant:not(.pending)')).some(m => m.textContent === "`+newSessionStarted+`")`)
	pollA("the new conversation in A", pageLog+` === "msg assistant: `+newSessionStarted+`"`)
	if err := chromedp.Do(tabB, chromedp.Click("#new")); err != nil {
		t.Fatalf("browser: New chat in tab B: %v", err)
	}
	pollA("the new chat in A", pageLog+` === ""`)
}

// TestWebChatOtherTabsKeepWaitingForTheNewConversationsMessage: a tab
// that sent a message after another tab's /new went out (the message
// the new conversation's first, pending) still shows its answer when
// the /new's confirmation clears the tabs: it stopped waiting for it, as
// for the old conversation's, and never showed it (nor kept it).
func TestWebChatOtherTabsKeepWaitingForTheNewConversationsMessage(t *testing.T) {
	browser, s, r := keylessWebChat(t)
	newGate, laterGate := make(chan struct{}), make(chan struct{})
	var newOnce, laterOnce sync.Once
	openNew := func() { newOnce.Do(func() { close(newGate) }) }
	openLater := func() { laterOnce.Do(func() { close(laterGate) }) }
	defer openNew()
	defer openLater()
	r.mu.Lock()
	r.answer = func(ev *eventsv1.MessageReceived, turn int) []string {
		if ev.GetText() == "/new" {
			<-newGate
			return []string{newSessionStarted}
		}
		<-laterGate
		return []string{"echo: " + ev.GetText()}
	}
	r.mu.Unlock()
	tabA, stepA := headless(t, browser)
	url := "http://" + s.Addr() + "/"
	stepA("open tab A", chromedp.Navigate(url), chromedp.WaitVisible("#input"))
	pollA := poller(t, tabA)
	tabB, cancelB := chromedp.NewContext(tabA) // another tab of the same browser
	defer cancelB()
	pollB := poller(t, tabB)
	if err := chromedp.Do(tabB, chromedp.Navigate(url), chromedp.WaitVisible("#input"), chromedp.SendKeys("#input", "/new"), chromedp.Click("#send")); err != nil {
		t.Fatalf("browser: /new in tab B: %v", err)
	}
	platformtest.WaitFor(t, "the /new", func() bool { return len(r.received()) == 1 })
	stepA("send in A", chromedp.SendKeys("#input", "first of the new"), chromedp.Click("#send"))
	platformtest.WaitFor(t, "A's message", func() bool { return len(r.received()) == 2 })
	pollB("A's message pending in B's view", pendingRecords+`.includes("first of the new")`)
	openNew()
	pollB("B's answer to /new", `Array.from(document.querySelectorAll('.msg.assistant:not(.pending)')).some(m => m.textContent === "`+newSessionStarted+`")`)
	pollA("the new conversation in A", `document.querySelector(".msg.assistant").textContent === "`+newSessionStarted+`"`)
	openLater()
	pollA("A's answer", `Array.from(document.querySelectorAll('.msg.assistant:not(.pending)')).some(m => m.textContent === "echo: first of the new") && !document.getElementById("send").disabled`)
	if got, err := chromedp.Run(tabA, chromedp.Evaluate[string](`localStorage.getItem("sb.history") + " | pending: " + `+pendingRecords)); err != nil || !strings.Contains(got, `{"role":"assistant","content":"echo: first of the new"}]`) || !strings.HasSuffix(got, "pending: null") {
		t.Fatalf("kept %s (%v), want A's answer kept, nothing pending", got, err)
	}
}

// TestWebChatPrintsKeptAnswersRendered: a reloaded transcript printed
// (or saved as a PDF) shows every answer as Markdown, as on screen: the
// answers never scrolled near printed as their text, marks and all.
func TestWebChatPrintsKeptAnswersRendered(t *testing.T) {
	browser, s, _ := keylessWebChat(t)
	ctx, step := headless(t, browser)
	eval := evaluator(t, ctx)
	step("open", chromedp.Navigate("http://"+s.Addr()+"/"), chromedp.WaitVisible("#input"))
	eval(`(() => {
		const h = [];
		for (let i = 0; i < 30; i++) {
			h.push({ role: "user", content: "question " + i });
			h.push({ role: "assistant", content: "**answer " + i + "**\n\n" + "- a line\n".repeat(30) });
		}
		localStorage.setItem("sb.history", JSON.stringify(h));
		return "";
	})()`)
	step("reload", chromedp.Reload(), chromedp.WaitVisible("#input"))
	if _, err := chromedp.Run(ctx, chromedp.PrintToPDF()); err != nil {
		t.Fatalf("browser: print: %v", err)
	}
	if got := eval(`Array.from(document.querySelectorAll(".msg.assistant")).filter(m => !m.querySelector("strong")).length + " of " + document.querySelectorAll(".msg.assistant").length`); got != "0 of 30" {
		t.Fatalf("%s answers printed unrendered", got)
	}
}

// answerInPieces answers every turn with text streamed in pieces of at
// most size bytes, as a model streams a long answer.
func answerInPieces(text string, size int) func(*eventsv1.MessageReceived, int) []string {
	return func(*eventsv1.MessageReceived, int) []string {
		var pieces []string
		for rest := text; rest != ""; {
			n := min(len(rest), size)
			pieces = append(pieces, rest[:n])
			rest = rest[n:]
		}
		return pieces
	}
}

// TestWebChatKeepsEachTabsPendingMessage: two tabs that each sent a
// message keep both pending, each in a record of its own, and each
// tab, reloaded before its answer came, asks again for its own message
// and shows its answer, which the transcript keeps once. One record for
// all (finding 27) kept the message sent last: the first tab, reloaded,
// asked for the other tab's message, and its own answer was lost.
func TestWebChatKeepsEachTabsPendingMessage(t *testing.T) {
	browser, s, r := keylessWebChat(t)
	release := r.hold()
	defer release()
	gateB := make(chan struct{})
	var openB sync.Once
	releaseB := func() { openB.Do(func() { close(gateB) }) }
	defer releaseB()
	r.mu.Lock()
	r.answer = func(ev *eventsv1.MessageReceived, turn int) []string {
		if ev.GetText() == "from B" {
			<-gateB // after A's answer is kept: the two tabs' writes of the transcript do not race
		}
		return []string{"echo: " + ev.GetText()}
	}
	r.mu.Unlock()
	tabA, stepA := headless(t, browser)
	url := "http://" + s.Addr() + "/"
	stepA("open tab A", chromedp.Navigate(url), chromedp.WaitVisible("#input"))
	pollA := poller(t, tabA)
	tabB, cancelB := chromedp.NewContext(tabA) // another tab of the same browser
	defer cancelB()
	pollB := poller(t, tabB)
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
	pollA("both pending in A's view", pendingRecords+`.includes("from A") && `+pendingRecords+`.includes("from B")`)
	stepA("reload A before its answer", chromedp.Reload(), chromedp.WaitVisible("#input"))
	stepB("reload B before its answer", chromedp.Reload(), chromedp.WaitVisible("#input"))
	release()
	const answered = `Array.from(document.querySelectorAll('.msg.assistant:not(.pending)')).map(m => m.textContent).join(",")`
	pollA("A's answer", answered+` === "echo: from A" && !document.getElementById("send").disabled`)
	pollB("A's answer kept, in B's view", `(localStorage.getItem("sb.history") || "").includes("echo: from A")`)
	releaseB()
	pollB("B's answer", answered+` === "echo: from B" && !document.getElementById("send").disabled`)
	pollA("nothing pending", pendingRecords+` === "null"`)
	stepA("reload A", chromedp.Reload(), chromedp.WaitVisible("#input"))
	got, err := chromedp.Run(tabA, chromedp.Evaluate[string](`JSON.parse(localStorage.getItem("sb.history")).map(m => m.content).sort().join(" | ")`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "echo: from A | echo: from B | from A | from B"; got != want {
		t.Fatalf("kept transcript %q, want %q", got, want)
	}
	if n := len(r.received()); n != 2 {
		t.Fatalf("%d messages published, want 2", n)
	}
}

// TestWebChatTellsATabWhoseAnswerAnotherTabsNewLeft: a /new typed in one
// tab (as New chat pressed there) ends the conversation another tab
// waits for an answer in; that tab shows the new conversation and says
// that the answer to its question stays with the old one, rather than
// its question and the answer on its way vanishing without a word. It
// waits for it no longer, and a reload does not ask for it again.
func TestWebChatTellsATabWhoseAnswerAnotherTabsNewLeft(t *testing.T) {
	browser, s, r := keylessWebChat(t)
	gate := make(chan struct{})
	var opened sync.Once
	open := func() { opened.Do(func() { close(gate) }) }
	defer open()
	r.mu.Lock()
	r.answer = func(ev *eventsv1.MessageReceived, turn int) []string {
		if ev.GetText() == "/new" {
			return []string{newSessionStarted}
		}
		<-gate
		return []string{"echo: " + ev.GetText()}
	}
	r.mu.Unlock()
	tabA, stepA := headless(t, browser)
	url := "http://" + s.Addr() + "/"
	stepA("open tab A", chromedp.Navigate(url), chromedp.WaitVisible("#input"))
	pollA := poller(t, tabA)
	tabB, cancelB := chromedp.NewContext(tabA) // another tab of the same browser
	defer cancelB()
	pollB := poller(t, tabB)
	if err := chromedp.Do(tabB, chromedp.Navigate(url), chromedp.WaitVisible("#input")); err != nil {
		t.Fatalf("browser: open tab B: %v", err)
	}
	stepA("send in A", chromedp.SendKeys("#input", "a long question"), chromedp.Click("#send"))
	platformtest.WaitFor(t, "A's message", func() bool { return len(r.received()) == 1 })
	if err := chromedp.Do(tabB, chromedp.SendKeys("#input", "/new"), chromedp.Click("#send")); err != nil {
		t.Fatalf("browser: /new in tab B: %v", err)
	}
	pollB("B's answer to /new", pageLog+` === "msg assistant: `+newSessionStarted+`"`)
	want := "msg assistant: " + newSessionStarted + " | msg notice: " + leftBehind("a long question")
	pollA("the new conversation in A, and what it left", pageLog+` === "`+want+`" && !document.getElementById("send").disabled`)
	if got, err := chromedp.Run(tabA, chromedp.Evaluate[string](pendingRecords)); err != nil || got != "null" {
		t.Fatalf("pending %s (%v), want nothing", got, err)
	}
	open()
	stepA("reload A", chromedp.Reload(), chromedp.WaitVisible("#input"))
	if got, err := chromedp.Run(tabA, chromedp.Evaluate[string](pageLog)); err != nil || got != "msg assistant: "+newSessionStarted {
		t.Fatalf("A after a reload %q (%v), want the new conversation alone", got, err)
	}
	if n := len(r.received()); n != 2 {
		t.Fatalf("%d messages published, want the question and the /new", n)
	}
}

// TestWebChatTakesOnThePendingRecordOfTheReleaseBefore: a message left
// pending in the one record the page kept before (sb.pending, its
// answer's part in sb.part) when the gateway was upgraded is asked for
// again after the reload, in this tab's record, not lost.
func TestWebChatTakesOnThePendingRecordOfTheReleaseBefore(t *testing.T) {
	r, step, eval, poll := openWebChat(t, func(r *responder) {
		r.answer = func(ev *eventsv1.MessageReceived, turn int) []string { return []string{"echo: " + ev.GetText()} }
	})
	eval(`(() => {
		localStorage.setItem("sb.session", "web-0123456789abcdef01234567");
		localStorage.setItem("sb.history", JSON.stringify([{ role: "user", content: "before the upgrade" }]));
		localStorage.setItem("sb.pending", JSON.stringify({ key: "msg-0123456789abcdef01234567", session: "web-0123456789abcdef01234567",
			body: JSON.stringify({ model: "switchboard", stream: true, messages: [{ role: "user", content: "before the upgrade" }] }) }));
		localStorage.setItem("sb.part", JSON.stringify({ key: "msg-0123456789abcdef01234567", shown: "the part shown" }));
		return "";
	})()`)
	step("reload", chromedp.Reload(), chromedp.WaitVisible("#input"))
	poll("the answer", `document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1`)
	if got, want := eval(pageLog+` + " | pending: " + `+pendingRecords+` + " | old: " + localStorage.getItem("sb.pending") + " " + localStorage.getItem("sb.part")`),
		"msg user: before the upgrade | msg assistant: echo: before the upgrade | pending: null | old: null null"; got != want {
		t.Fatalf("page %q, want %q", got, want)
	}
	if got := r.received(); len(got) != 1 || got[0].GetSource().GetChatId() != "web-0123456789abcdef01234567" {
		t.Fatalf("published %v, want the pending message in its conversation", got)
	}
}

// TestWebChatTakesOnABigPendingRecordOfTheReleaseBefore: the one record
// of the release before is taken on however big it is (a picture's is
// megabytes): the page makes room for its copy by removing it first.
// Copied while it still took its room, a record of more than the
// storage's free room was not kept, and the message was lost.
func TestWebChatTakesOnABigPendingRecordOfTheReleaseBefore(t *testing.T) {
	r, step, eval, poll := openWebChat(t, func(r *responder) {
		r.answer = func(ev *eventsv1.MessageReceived, turn int) []string { return []string{"echo: " + ev.GetText()} }
	})
	// The record is of a megabyte and a half (as a picture's); the rest of
	// the storage is full but for some 100 KB.
	eval(`(() => {
		localStorage.setItem("sb.session", "web-0123456789abcdef01234567");
		localStorage.setItem("sb.history", JSON.stringify([{ role: "user", content: "a big one" }]));
		localStorage.setItem("sb.pending", JSON.stringify({ key: "msg-0123456789abcdef01234567", session: "web-0123456789abcdef01234567",
			body: JSON.stringify({ model: "switchboard", stream: true, messages: [{ role: "user", content: "a big one" }] }), picture: "x".repeat(1500000) }));
		const fill = "f".repeat(100000);
		let i = 0;
		try { for (;; i++) localStorage.setItem("fill." + i, fill); } catch (e) { /* full */ }
		localStorage.removeItem("fill." + (i - 1));
		return "";
	})()`)
	step("reload", chromedp.Reload(), chromedp.WaitVisible("#input"))
	poll("the answer", `document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1`)
	if got, want := eval(pageLog+` + " | pending: " + `+pendingRecords+` + " | old: " + localStorage.getItem("sb.pending")`),
		"msg user: a big one | msg assistant: echo: a big one | pending: null | old: null"; got != want {
		t.Fatalf("page %q, want %q", got, want)
	}
	if n := len(r.received()); n != 1 {
		t.Fatalf("%d messages published, want the pending one", n)
	}
}

// TestWebChatLinksTheFilesAnAnswerSent: a file a turn sends from the
// attachment store (a voice reply, a /save export) is linked by the
// gateway as a path on its own address (/v1/media/<id>?exp=…&sig=…,
// without gateways.api.public_url), which the page took for an address
// it cannot open and showed as the Markdown it was written in; it is a
// link the reader opens, signed, without a key.
func TestWebChatLinksTheFilesAnAnswerSent(t *testing.T) {
	browser, s, r := keylessWebChat(t)
	store := attachment.New(s.bus.JetStream(), s.bus.Topology(), attachment.Config{Enabled: true})
	if _, err := store.Keep(context.Background(), "test/notes.txt", "text/plain", strings.NewReader("the notes")); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.answer = func(*eventsv1.MessageReceived, int) []string { return []string{"Here are", " your notes."} }
	r.media = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT,
		Location: &eventsv1.Attachment_BytesRef{BytesRef: "test/notes.txt"}, FileName: "notes.txt"}}
	r.mu.Unlock()
	ctx, step := headless(t, browser)
	eval, poll := evaluator(t, ctx), poller(t, ctx)
	base := "http://" + s.Addr()
	step("open", chromedp.Navigate(base+"/"), chromedp.WaitVisible("#input"))
	step("send", chromedp.SendKeys("#input", "my notes"), chromedp.Click("#send"))
	poll("the answer", `document.querySelectorAll('.msg.assistant:not(.pending)').length >= 1`)
	const links = `Array.from(document.querySelectorAll('.msg.assistant a')).map(a => a.textContent + " " + a.href).join(",")`
	check := func(when string) string {
		t.Helper()
		got := eval(`document.querySelector('.msg.assistant').textContent + " | " + ` + links)
		text, link, _ := strings.Cut(got, " | ")
		if text != "Here are your notes.notes.txt" || !strings.HasPrefix(link, "notes.txt "+base+"/v1/media/") || strings.Contains(link, ",") {
			t.Fatalf("%s: answer %q, links %q: want the file linked on the gateway's address", when, text, link)
		}
		return strings.TrimPrefix(link, "notes.txt ")
	}
	href := check("streamed")
	eval(`(fetch(` + "`" + href + "`" + `).then(r => r.text().then(b => window.fetched = r.status + " " + b)), "")`)
	poll("the file", `window.fetched !== undefined`)
	if got := eval(`window.fetched`); got != "200 the notes" {
		t.Fatalf("the link opens %q, want the file", got)
	}
	step("reload", chromedp.Reload(), chromedp.WaitVisible("#input"))
	poll("the kept answer rendered", `!document.querySelector('.msg[data-later]')`)
	check("kept")
}
