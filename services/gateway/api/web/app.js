// Switchboard web chat: streams replies from /v1/chat/completions.
(function () {
  "use strict";
  var store = window.localStorage;
  var log = document.getElementById("log");
  var form = document.getElementById("form");
  var input = document.getElementById("input");
  var send = document.getElementById("send");
  var stop = document.getElementById("stop");
  var keyForm = document.getElementById("key-form");
  var keyInput = document.getElementById("key");
  var fileInput = document.getElementById("file");
  var chip = document.getElementById("chip");
  // A picture travels inline in the request (a data: URL); the gateway's
  // body limit (4 MiB by default) bounds it at about 3 MB.
  var MAX_PICTURE = 3000000;
  var picture = null; // { url, name } while one is attached

  function newSessionId() {
    var a = new Uint8Array(12);
    crypto.getRandomValues(a);
    return "web-" + Array.from(a, function (b) { return b.toString(16).padStart(2, "0"); }).join("");
  }
  function session() {
    var id = store.getItem("sb.session");
    if (!id) { id = newSessionId(); store.setItem("sb.session", id); }
    return id;
  }
  function history() {
    try { return JSON.parse(store.getItem("sb.history") || "[]"); } catch (e) { return []; }
  }
  // saveHistory keeps the last 200 messages of the transcript; when the
  // storage is full (long answers), the oldest go, a quarter at a time,
  // rather than the message being sent.
  function saveHistory(h) {
    h = h.slice(-200);
    for (;;) {
      try { store.setItem("sb.history", JSON.stringify(h)); return; } catch (e) {
        if (!h.length) return;
        h = h.slice(Math.ceil(h.length / 4));
      }
    }
  }

  // Markdown: an answer shows a safe subset of it — paragraphs, **bold**,
  // *italic*, `code`, fenced code blocks, lists, and links whose address
  // is http(s) — built as elements whose text is set as text: HTML in
  // the model's text shows as the text it is and nothing in it runs; a
  // link to any other scheme (javascript:) shows as the text it is.
  function el(tag, cls) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    return e;
  }
  // safeURL is an http(s) address as the browser reads it, or null.
  function safeURL(u) {
    try {
      var x = new URL(u);
      return x.protocol === "http:" || x.protocol === "https:" ? x.href : null;
    } catch (e) { return null; }
  }
  // MEDIA is the gateway's link to a file an answer sent (a voice reply,
  // a /save export: /v1/media/<id>?exp=…&sig=…), a path on its own
  // address unless gateways.api.public_url is set.
  var MEDIA = /^\/v1\/media\/[0-9a-f]+(\?[^\s#]*)?$/;
  // linkURL is a link's address as the browser opens it: an http(s)
  // address, or the gateway's link to a file, on this page's address;
  // else null.
  function linkURL(u) {
    return MEDIA.test(u) ? new URL(u, location.href).href : safeURL(u);
  }
  function link(href, host) {
    var a = el("a");
    a.href = href;
    a.target = "_blank";
    a.rel = "noopener noreferrer nofollow";
    return host.appendChild(a);
  }
  var PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
  // A link is "[text](address)": its text runs to the first "]" (no
  // line break in it), the address follows at once (TARGET).
  var TARGET = /\(\s*<?([^\s()<>]*)>?\s*\)/y;
  // NEST is how deep emphasis nests: deeper, its marks are text, so that
  // a long run of them ("****…") is not parsed again at each of its
  // levels (as markdown-it bounds its nesting).
  var NEST = 20;
  // A bare address is "http(s)://" and what follows it up to a space, a
  // quote or <> (its run), less the punctuation that ends the run (the
  // sentence's), but for one ")" when the address has a "(".
  var BARE = /https?:\/\//y, RUN_END = /[\s<>"'`]/g, TRAILING = ".,;:!?'\")]";
  function isSpace(c) { return c === undefined || /\s/.test(c); }
  function isWord(c) { return c !== undefined && /[\p{L}\p{N}_]/u.test(c); }
  // runAt is the length of the run of c at s[i].
  function runAt(s, i, c) { var j = i; while (s[j] === c) j++; return j - i; }
  // closing finds the delimiter d (of char c) that closes one opened
  // before from: after text, not after a space; "_" not inside a word.
  // dead marks the places a search for d went on from and found nothing
  // from there on: a later search that comes to one stops there, so each
  // unclosed opener does not search the rest of the text again (which
  // made an answer of many of them take seconds per render).
  function closing(s, from, d, c, dead) {
    var seen = [];
    for (var j = s.indexOf(d, from); j >= 0; j = s.indexOf(d, j + 1)) {
      if (j === from) continue;
      if (dead[j]) break;
      seen.push(j);
      if (isSpace(s[j - 1])) continue;
      var n = runAt(s, j, c);
      if (d.length === 1 && n === 2) { j++; continue; } // a ** inside *…*
      if (n > d.length) j += n - d.length; // the run's last ones close
      if (c === "_" && isWord(s[j + d.length])) continue;
      return j;
    }
    for (var k = 0; k < seen.length; k++) dead[seen[k]] = true;
    return -1;
  }
  // inline adds the nodes of a paragraph's text s to host; depth is how
  // many emphases it is inside.
  function inline(host, s, inLink, depth) {
    depth = depth || 0;
    var buf = "";
    // A "[" is a link's start when its text's end, the next "]" or line
    // break, is followed by an address. The "[" before one end share it,
    // and what follows it: a line of "[" that nothing closes, or closes
    // with no address, is searched through once, not once per "[".
    var bracket = -1, lineEnd = -1, target = -1, targetMatch = null;
    function linkAt(i) {
      if (bracket <= i) bracket = after("]", i + 1);
      if (lineEnd <= i) lineEnd = after("\n", i + 1);
      var end = Math.min(bracket, lineEnd);
      if (s[end] !== "]") return null;
      if (target !== end) {
        TARGET.lastIndex = end + 1;
        targetMatch = TARGET.exec(s);
        target = end;
      }
      if (!targetMatch) return null;
      return { all: s.slice(i, end + 1 + targetMatch[0].length), text: s.slice(i + 1, end), href: targetMatch[1] };
    }
    // after is where c is next at or after from (the text's length: nowhere).
    function after(c, from) {
      var k = s.indexOf(c, from);
      return k < 0 ? s.length : k;
    }
    // run: the run of the last bare address looked at ({ end, cut: where
    // it ends less its trailing punctuation, paren: its last "(" before
    // cut or -1, dead }). Every address that starts in a run ends where
    // it ends, so the run is found once for all of them.
    var run = null;
    // bareAt is the bare address at s[i] ({ text, href }), or null. An
    // address is invalid for what follows its "//" up to the first of
    // "/?#\\" (its host and port: nothing after them makes an address
    // invalid), so that is all that is parsed of one unless it is valid:
    // a line of invalid ones ("http://[" again and again) had the rest
    // of the line parsed again for each, a minute for 256 KB.
    function bareAt(i) {
      BARE.lastIndex = i;
      if (!BARE.test(s)) return null;
      var from = BARE.lastIndex;
      if (!run || i >= run.end) run = bareRun(i);
      if (run.end <= from || run.dead) return null;
      var end = run.cut;
      if (s[end] === ")" && run.paren >= i) end++;
      var k = from;
      while (k < end && (s[k] === "/" || s[k] === "\\")) k++; // "http:///x" is "http://x"
      while (k < end && "/?#\\".indexOf(s[k]) < 0) k++;
      if (!safeURL(s.slice(i, Math.min(k + 1, end)))) return null;
      var text = s.slice(i, end), href = safeURL(text);
      // An address with a valid host is valid (the URL standard fails
      // none for its path, query or fragment); were one invalid after
      // all, the rest of its run is text rather than parsed again whole
      // for each address in it.
      if (!href) run.dead = true;
      return href ? { text: text, href: href } : null;
    }
    // bareRun is the run of the bare address at s[from].
    function bareRun(from) {
      RUN_END.lastIndex = from;
      var m = RUN_END.exec(s), end = m ? m.index : s.length, cut = end, paren = -1;
      while (cut > from && TRAILING.indexOf(s[cut - 1]) >= 0) cut--;
      for (var k = cut - 1; k >= from && paren < 0; k--) if (s[k] === "(") paren = k;
      return { end: end, cut: cut, paren: paren, dead: false };
    }
    // dead: per delimiter, closing's places that close nothing after
    // them; noTick: per length of a run of backticks, the place from
    // which no run of that length follows (nor from any later place).
    var dead = { "*": [], "**": [], "_": [], "__": [] }, noTick = [];
    function put(node) {
      if (buf) host.appendChild(document.createTextNode(buf));
      buf = "";
      if (node) host.appendChild(node);
    }
    for (var i = 0; i < s.length;) {
      var c = s[i], m, j;
      if (c === "\\" && PUNCT.indexOf(s[i + 1]) >= 0 && i + 1 < s.length) { buf += s[i + 1]; i += 2; continue; }
      if (c === "`") {
        var n = runAt(s, i, "`");
        j = -1;
        if (!(i + n >= noTick[n])) {
          for (j = s.indexOf("`", i + n); j >= 0 && runAt(s, j, "`") !== n; j = s.indexOf("`", j + runAt(s, j, "`")));
          if (j < 0) noTick[n] = i + n;
        }
        if (j < 0) { buf += s.slice(i, i + n); i += n; continue; }
        var code = s.slice(i + n, j);
        if (code.length > 2 && code[0] === " " && code[code.length - 1] === " ") code = code.slice(1, -1);
        var ce = el("code");
        ce.textContent = code;
        put(ce);
        i = j + n;
        continue;
      }
      if (c === "[" && !inLink && (m = linkAt(i))) {
        var href = linkURL(m.href);
        if (href) {
          put(null);
          // A link without text of its own shows its address, as written.
          if (m.text.trim()) inline(link(href, host), m.text, true, depth);
          else link(href, host).textContent = m.href;
        } else {
          buf += m.all;
        }
        i += m.all.length;
        continue;
      }
      if (c === "h" && !inLink && !isWord(s[i - 1]) && (m = bareAt(i))) {
        put(null);
        link(m.href, host).textContent = m.text;
        i += m.text.length;
        continue;
      }
      if (c === "*" || c === "_") {
        var d = s[i + 1] === c ? c + c : c;
        if (depth < NEST && !isSpace(s[i + d.length]) && !(c === "_" && isWord(s[i - 1]))) {
          j = closing(s, i + d.length, d, c, dead[d]);
          if (j > 0) {
            var e = el(d.length === 2 ? "strong" : "em");
            inline(e, s.slice(i + d.length, j), inLink, depth + 1);
            put(e);
            i = j + d.length;
            continue;
          }
        }
        buf += d;
        i += d.length;
        continue;
      }
      buf += c;
      i++;
    }
    put(null);
  }
  // renderMarkdown replaces host's content with text's blocks:
  // paragraphs (their line breaks kept), fenced code blocks (an unclosed
  // one, still streaming, runs to the end), lists (nested by indent) and
  // headings (shown bold).
  function renderMarkdown(host, text) {
    markdownSteps(host, text)(0);
  }
  // markdownSteps is renderMarkdown in steps: it returns step, which
  // renders text's lines into host until the time (performance.now())
  // until, if any, has come (a line at least, a block's line at most
  // after it), and says whether the whole text is in.
  function markdownSteps(host, text) {
    host.textContent = "";
    var lines = text.split("\n");
    var para = null; // { into, lines }: the text block being read
    var lists = []; // open lists, outermost first: { indent, ordered, node, item }
    var blank = false;
    var i = 0;
    function flush() {
      if (!para) return;
      var into = para.into;
      if (!into) into = host.appendChild(el("p"));
      else if (into.childNodes.length) into = into.appendChild(el("p"));
      inline(into, para.lines.join("\n"));
      para = null;
    }
    return function step(until) {
      for (var from = i; i < lines.length; i++) {
        if (until && i > from && performance.now() >= until) return false;
        block();
      }
      flush();
      return true;
    };
    // block reads the line at i, and the fence's lines after it.
    function block() {
      var line = lines[i], m;
      if ((m = /^([ \t]*)(`{3,}|~{3,})(.*)$/.exec(line)) && !(m[2][0] === "`" && m[3].indexOf("`") >= 0)) {
        // A fence (indented too: a list item's code), its lines without
        // the fence's indent.
        flush();
        lists = [];
        var fence = m[2], cut = new RegExp("^[ \\t]{0," + m[1].length + "}"), code = [];
        for (i++; i < lines.length; i++) {
          var f = /^[ \t]*(`{3,}|~{3,})\s*$/.exec(lines[i]);
          if (f && f[1][0] === fence[0] && f[1].length >= fence.length) break;
          code.push(lines[i].replace(cut, ""));
        }
        var pre = host.appendChild(el("pre"));
        pre.appendChild(el("code")).textContent = code.join("\n");
        blank = false;
        return;
      }
      if (!line.trim()) { flush(); blank = true; return; }
      if ((m = /^(\s*)(?:([-*+])|(\d{1,9})[.)])\s+(.*)$/.exec(line))) {
        flush();
        var indent = m[1].replace(/\t/g, "    ").length, ordered = !m[2];
        while (lists.length && indent < lists[lists.length - 1].indent) lists.pop();
        var top = lists[lists.length - 1];
        if (top && indent < top.indent + 2 && top.ordered !== ordered) {
          lists.pop();
          top = lists[lists.length - 1];
        }
        if (!top || indent >= top.indent + 2) {
          var node = (top ? top.item : host).appendChild(el(ordered ? "ol" : "ul"));
          if (ordered && m[3] !== "1") node.start = parseInt(m[3], 10);
          top = { indent: indent, ordered: ordered, node: node, item: null };
          lists.push(top);
        }
        top.item = top.node.appendChild(el("li"));
        para = { into: top.item, lines: [m[4]] };
        blank = false;
        return;
      }
      if ((m = /^ {0,3}#{1,6}\s+(.*?)(\s+#+)?\s*$/.exec(line))) {
        flush();
        lists = [];
        inline(host.appendChild(el("p", "heading")).appendChild(el("strong")), m[1]);
        blank = false;
        return;
      }
      if (lists.length && (!blank || /^\s/.test(line))) {
        // The list item's text goes on (or, after a blank, its next paragraph).
        var item = lists[lists.length - 1].item;
        if (!para) para = { into: item, lines: [] };
        para.lines.push(line.replace(/^\s+/, ""));
      } else {
        lists = [];
        if (!para) para = { into: null, lines: [] };
        para.lines.push(line);
      }
      blank = false;
    }
  }

  // atEnd: the log is scrolled to its end (near enough), so what comes
  // is followed; a reader who scrolled back stays where they read.
  function atEnd() { return log.scrollHeight - log.scrollTop - log.clientHeight < 40; }
  // bubble shows a message: an answer's text as Markdown, others' as
  // they are.
  function bubble(role, text) {
    var follow = role === "user" || atEnd();
    var d = el("div", "msg " + role);
    if (/^assistant/.test(role)) {
      d.md = d.appendChild(el("div", "md"));
      renderMarkdown(d.md, text);
    } else {
      d.textContent = text;
    }
    log.appendChild(d);
    if (follow) log.scrollTop = log.scrollHeight;
    return d;
  }
  // stopped marks an answer whose turn ended before it was whole (Stop,
  // a failure): the part shown is kept, and says so.
  function stopped(d) {
    d.classList.add("stopped");
    d.appendChild(el("div", "note")).textContent = "⏹ stopped";
  }
  // showTools shows an answer's tool calls, a line each above its text
  // (the tool's emoji and the call's label): running, or done.
  function showTools(d, tools) {
    if (!tools.length) return;
    if (!d.tools) d.tools = d.insertBefore(el("div", "tools"), d.md);
    d.tools.textContent = "";
    tools.forEach(function (t) {
      d.tools.appendChild(el("div", "tool " + (t.done ? "done" : "running"))).textContent = t.text;
    });
  }
  // keptTools is what the transcript keeps of an answer's tool calls.
  function keptTools(tools) {
    return tools.slice(-50).map(function (t) { return t.text; });
  }

  // The kept transcript shows at once, however long it is: an answer's
  // Markdown is rendered when it comes near the screen (those on it,
  // the newest, before the page first shows), and shows its text as
  // written until then. Rendering every kept answer made a reload with
  // a full storage take seconds (20 s under load). After the first
  // frame the others are rendered in the background, newest first, in
  // slices of at most SLICE ms of idle time (a long answer over several
  // of them, a block of lines at a time, into a copy that replaces its
  // text once whole), so that soon every answer shows rendered (found
  // by the browser's search as it shows, the scrollbar exact) without
  // holding up what the reader types or scrolls.
  var later = typeof IntersectionObserver === "function" ? new IntersectionObserver(function (seen) {
    seen.forEach(function (x) { if (x.isIntersecting) rendered(x.target); });
  }, { root: log, rootMargin: "100% 0px" }) : null;
  var SLICE = 8;
  // waiting: the kept answers still to be rendered in the background,
  // newest first; slow: the one being rendered ({ d, host, step }).
  var waiting = [], slow = null, sliceAsked = false;
  // rendered renders the kept answer of d, if it waits for it.
  function rendered(d) {
    if (d.raw == null) return;
    var host = el("div", "md");
    renderMarkdown(host, d.raw);
    replaceText(d, host);
  }
  // replaceText shows host, d's answer rendered, in place of its text;
  // a reader at the log's end stays there.
  function replaceText(d, host) {
    if (later) later.unobserve(d);
    var follow = atEnd();
    d.replaceChild(host, d.md);
    d.md = host;
    d.raw = null;
    delete d.dataset.later;
    if (follow) log.scrollTop = log.scrollHeight;
  }
  function askSlice() {
    if (sliceAsked || !waiting.length && !slow) return;
    sliceAsked = true;
    if (typeof requestIdleCallback === "function") requestIdleCallback(slice, { timeout: 200 });
    else setTimeout(slice, 0);
  }
  // slice renders waiting answers for SLICE ms at most (less when the
  // browser's idle time is shorter), and asks for the next slice.
  function slice(idle) {
    sliceAsked = false;
    var span = SLICE;
    if (idle && !idle.didTimeout) span = Math.max(1, Math.min(SLICE, idle.timeRemaining()));
    var until = performance.now() + span;
    do {
      if (slow && slow.d.raw == null) slow = null; // rendered as it came near the screen
      if (!slow) {
        var d = waiting.shift();
        if (!d) return;
        if (d.raw == null) continue;
        var host = el("div", "md");
        slow = { d: d, host: host, step: markdownSteps(host, d.raw) };
      }
      if (slow.step(until)) {
        replaceText(slow.d, slow.host);
        slow = null;
      }
    } while (performance.now() < until);
    askSlice();
  }
  // showKept adds the kept messages of h to the log, which it scrolls to
  // its end.
  function showKept(h) {
    var all = h.map(function (m) {
      var d = el("div", "msg " + m.role);
      if (/^assistant/.test(m.role)) {
        d.md = d.appendChild(el("div", "md"));
        d.md.textContent = d.raw = m.content;
        d.dataset.later = ""; // laid out when near the screen (app.css)
      } else {
        d.textContent = m.content;
      }
      if (m.tools) showTools(d, m.tools.map(function (text) { return { text: text, done: true }; }));
      if (m.stopped) stopped(d);
      return d;
    });
    var kept = document.createDocumentFragment();
    all.forEach(function (d) { kept.appendChild(d); });
    log.appendChild(kept);
    // From the newest back, the messages on screen at the log's end.
    var top = log.getBoundingClientRect().top;
    for (var k = all.length - 1; k >= 0; k--) {
      log.scrollTop = log.scrollHeight;
      if (all[k].getBoundingClientRect().bottom < top) break;
      rendered(all[k]);
    }
    log.scrollTop = log.scrollHeight;
    all.forEach(function (d) {
      if (d.raw == null) return;
      if (later) later.observe(d); else rendered(d);
    });
    waiting = all.filter(function (d) { return d.raw != null; }).reverse();
    // After the first frame: the page shows first.
    requestAnimationFrame(function () { setTimeout(askSlice, 0); });
  }
  // clearLog empties the log (and what waits to be rendered in it).
  function clearLog() {
    if (later) later.disconnect();
    waiting = [];
    slow = null;
    log.textContent = "";
  }
  showKept(history());
  // A page printed (or saved as a PDF) shows every answer rendered, as
  // on screen, not those never scrolled near as their text, marks and all.
  window.addEventListener("beforeprint", function () {
    Array.prototype.forEach.call(log.querySelectorAll(".msg[data-later]"), rendered);
  });

  // current stops the answer on its way (an AbortController), if any;
  // currentSession is its conversation, currentP its pending message
  // and currentOut its bubble.
  var current = null, currentSession = null, currentP = null, currentOut = null;

  // busy shows whether an answer is on its way: Send waits for it, and
  // Stop can end its turn.
  function busy(on) {
    send.disabled = on;
    stop.hidden = !on;
  }

  // Stop sends the gateway's /stop in the conversation of the answer on
  // its way, a message of its own (Send waits for the answer): the turn
  // stops, and its request is answered interrupted, which ends it here.
  stop.addEventListener("click", function () {
    if (!current) return;
    var headers = { "Content-Type": "application/json", "X-Session-Id": currentSession };
    var key = store.getItem("sb.key");
    if (key) headers["Authorization"] = "Bearer " + key;
    fetch("/v1/chat/completions", {
      method: "POST", headers: headers,
      body: JSON.stringify({ model: "switchboard", messages: [{ role: "user", content: "/stop" }] })
    }).then(function (res) {
      if (!res.ok) bubble("error", "The stop was not taken (HTTP " + res.status + "); try again.");
    }, function () {
      bubble("error", "The stop could not be sent; try again.");
    });
    input.focus();
  });

  document.getElementById("new").addEventListener("click", function () {
    // The answer on its way is the old conversation's: it is no longer
    // waited for (its turn runs on), nor written into the new one.
    if (current) { current.abort(); current = null; }
    busy(false);
    var old = store.getItem("sb.session");
    store.removeItem("sb.session");
    store.removeItem("sb.history");
    // The old conversation's messages are no longer waited for, here
    // or in another tab.
    pendings().forEach(function (q) { if (q.session === old) done(q); });
    refused = null;
    clearLog();
    cleared(Date.now());
    input.focus();
  });
  // cleared tells the page's other tabs that this one started a new
  // conversation (New chat, or a /new its answer confirmed) at the
  // time at (a message sent before it is the old conversation's, one
  // sent since the new one's): each shows it at once (storage event),
  // not its old transcript until reloaded.
  function cleared(at) { store.setItem("sb.cleared", JSON.stringify({ id: newKey(), at: at })); }
  window.addEventListener("storage", function (e) {
    if (e.key !== "sb.cleared" && e.key !== null) return; // null: the storage was cleared
    // The answer on its way here is the old conversation's: no longer
    // waited for, as New chat leaves it here; unless its message was
    // sent since the new conversation began (after the /new, or after
    // New chat before this event came), in it: the new conversation's,
    // still waited for and shown.
    var c = null;
    try { c = JSON.parse(store.getItem("sb.cleared")); } catch (err) { /* the storage was cleared */ }
    var ours = currentP && c && currentP.session === store.getItem("sb.session") && currentP.at > c.at;
    var left = current && !ours ? currentP : null;
    if (left) { current.abort(); current = null; }
    if (!current) busy(false);
    refused = null;
    clearLog();
    showKept(history());
    if (current) {
      log.appendChild(currentOut);
      log.scrollTop = log.scrollHeight;
    }
    // The tab is told of the answer it no longer waits for, which went
    // from the screen with its question: it vanished without a word.
    // (A typed /new stopped its turn; New chat left it running in the
    // old conversation, which this page no longer shows.)
    if (left) {
      bubble("notice", "A new conversation was started in another tab: the answer to " +
        (left.asked ? "“" + (left.asked.length > 80 ? left.asked.slice(0, 79) + "…" : left.asked) + "”" : "your message") + " stays with the old conversation and is not shown here.");
    }
  });
  // refused is the message a 401 turned back, sent again with the key.
  var refused = null;
  keyForm.addEventListener("submit", function (e) {
    e.preventDefault();
    store.setItem("sb.key", keyInput.value.trim());
    keyForm.hidden = true;
    form.hidden = false;
    input.focus();
    var p = refused;
    refused = null;
    if (p && p.session === store.getItem("sb.session")) ask(p);
  });
  input.addEventListener("keydown", function (e) {
    // The Enter that confirms an input method's composition (isComposing;
    // Safari's comes as keyCode 229) is the input method's, not a send.
    if (e.isComposing || e.keyCode === 229) return;
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); form.requestSubmit(); }
  });

  function setPicture(p) {
    picture = p;
    chip.hidden = !p;
    chip.textContent = p ? "🖼 " + p.name + " ✕" : "";
  }
  chip.addEventListener("click", function () { setPicture(null); input.focus(); });
  fileInput.addEventListener("change", function () {
    var f = fileInput.files[0];
    fileInput.value = "";
    if (!f) return;
    if (f.size > MAX_PICTURE) {
      bubble("error", "That picture is " + (f.size / 1e6).toFixed(1) + " MB; pictures can be up to " + (MAX_PICTURE / 1e6) + " MB here.");
      return;
    }
    var reader = new FileReader();
    reader.onload = function () { setPicture({ url: reader.result, name: f.name }); input.focus(); };
    reader.onerror = function () { bubble("error", "That picture could not be read."); };
    reader.readAsDataURL(f);
  });

  form.addEventListener("submit", function (e) {
    e.preventDefault();
    // One message at a time, as the disabled Send button says: Enter
    // (requestSubmit) is not held back by it, and a message sent while
    // an answer is on its way would interrupt that answer's turn. The
    // text stays in the box until the answer is in.
    if (send.disabled) return;
    var text = input.value.trim();
    if (!text && !picture) return;
    var pic = picture;
    input.value = "";
    setPicture(null);
    chat(text, pic);
  });

  // A message is sent with an Idempotency-Key and kept as pending until
  // its answer is in: after a reload, or a connection lost mid-answer,
  // it is sent again with the same key, and the gateway answers it once
  // (the turn is not run again, the answer not lost).
  function newKey() { return newSessionId().replace("web-", "msg-"); }
  // Each pending message has a record of its own (sb.pending.<key>,
  // the part of its answer shown so far sb.part.<key>), with the tab
  // that sent it and when: two tabs sending at once keep both. One
  // record for all let the second tab's message take the first's
  // place, and a reload lost the first (its answer never shown nor
  // kept).
  var PENDING = "sb.pending.", PART = "sb.part.";
  // tab names this tab, and its reloads (sessionStorage): a reload asks
  // again for the answers its tab waited for, not another open tab's.
  var tab = (function () {
    try {
      var t = sessionStorage.getItem("sb.tab");
      if (!t) { t = newKey().replace("msg-", "tab-"); sessionStorage.setItem("sb.tab", t); }
      return t;
    } catch (e) { return newKey().replace("msg-", "tab-"); }
  })();
  // While the tab is open it holds a lock of its name (Web Locks,
  // where the browser has them): a tab that finds no holder of a
  // pending message's tab takes the message on (its tab was closed
  // before the answer came).
  if (navigator.locks) navigator.locks.request("sb.tab." + tab, function () { return new Promise(function () {}); });
  function record(name) {
    try { return JSON.parse(store.getItem(name) || "null"); } catch (e) { return null; }
  }
  // pendings is the pending messages, the first sent first.
  function pendings() {
    var all = [];
    for (var i = 0; i < store.length; i++) {
      var k = store.key(i), p = k && k.indexOf(PENDING) === 0 ? record(k) : null;
      if (p && p.key) all.push(p);
    }
    return all.sort(function (a, b) { return (a.at || 0) - (b.at || 0); });
  }
  // done ends p's pending record and the part kept of its answer.
  function done(p) {
    store.removeItem(PENDING + p.key);
    store.removeItem(PART + p.key);
  }
  // taken ends p's pending record and says whether this tab is to keep
  // its answer in the transcript: not when the record was gone (the
  // answer was kept by another tab that asked for it too, or the
  // conversation was left).
  function taken(p) {
    var was = p.unkept || store.getItem(PENDING + p.key) != null;
    done(p);
    return was;
  }
  // The part of the answer on its way shown so far is kept beside its
  // pending message (sb.part.<key>), so that a reload shows it until
  // the answer comes: a retry of the message is given the answer as it
  // is sent, not the text streamed before. It is written as the page
  // goes (a reload: nothing shown is lost) and, for a page that ends
  // without going (a crash), at most once a second as it streams: each
  // write goes to every open tab of the page, and was one of the whole
  // pending message (a picture's megabytes) four times a second.
  var PART_EVERY = 1000;
  var part = null, partTimer = 0, partWritten = 0;
  function keepPart() {
    clearTimeout(partTimer);
    partTimer = 0;
    if (!part || part.kept) return;
    part.kept = true;
    if (store.getItem(PENDING + part.p.key) == null) return; // no longer pending
    partWritten = Date.now();
    try {
      store.setItem(PART + part.p.key, JSON.stringify({ shown: part.text, tools: part.tools }));
    } catch (e) { /* full: the answer shows when it comes */ }
  }
  function showPart(p, text, tools) {
    part = { p: p, text: text, tools: tools };
    if (!partTimer) partTimer = setTimeout(keepPart, Math.max(0, partWritten + PART_EVERY - Date.now()));
  }
  window.addEventListener("pagehide", keepPart);
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "hidden") keepPart();
  });
  // A message whose answer did not come (a lost connection, a busy
  // gateway) is asked for again, with its key, for as long as the
  // gateway keeps the answer for it (gateways.api.idempotency_ttl, 24 h
  // by default, after the message went): after a second, then twice as
  // long each time the gateway is not reached, up to half a minute, and
  // at once when the browser is online again; meanwhile its bubble says
  // it is reconnecting. (It gave up after three tries, six seconds: on a
  // flaky network the answer showed only after a reload.)
  var KEPT_FOR = 24 * 3600 * 1000, RETRY_FIRST = 1000, RETRY_MAX = 30000;
  // pause waits ms, or until the browser is online again or the answer
  // is no longer waited for (signal).
  function pause(ms, signal) {
    return new Promise(function (ok) {
      var timer = setTimeout(end, ms);
      function end() {
        clearTimeout(timer);
        window.removeEventListener("online", end);
        signal.removeEventListener("abort", end);
        ok();
      }
      window.addEventListener("online", end);
      signal.addEventListener("abort", end);
    });
  }
  // reconnecting shows (text) or takes off (no text) the line of an
  // answer's bubble that says it is being asked for again.
  function reconnecting(out, text) {
    if (!text) {
      if (out.retry) out.retry.remove();
      out.retry = null;
      return;
    }
    if (!out.retry) out.retry = out.appendChild(el("div", "note reconnecting"));
    out.retry.textContent = text;
  }

  // NEW_STARTED is how the router answers a /new that started a new
  // conversation (services/router/commands.go), after the notice of a
  // reset due before it, if any.
  var NEW_STARTED = /(^|\n)✨ New session started/;

  async function chat(text, pic) {
    var h = history();
    var shown = pic ? (text ? text + "\n" : "") + "🖼 " + pic.name : text;
    bubble("user", shown);
    h.push({ role: "user", content: shown });
    saveHistory(h);
    var content = text;
    if (pic) {
      content = [{ type: "image_url", image_url: { url: pic.url } }];
      if (text) content.unshift({ type: "text", text: text });
    }
    var p = {
      key: newKey(), session: session(), tab: tab, at: Date.now(), asked: shown,
      body: JSON.stringify({ model: "switchboard", stream: true, messages: [{ role: "user", content: content }] })
    };
    // /new (or /reset, its alias, with or without a title) starts a new
    // conversation under the same session id: once its answer confirms
    // it (NEW_STARTED), the transcript is cleared, as New chat clears it.
    // Another answer (reserved for admins; not read as a command) left
    // the conversation as it was, and the transcript with it.
    if (/^\/(new|reset)(@\S*)?(\s|$)/i.test(text)) p.reset = true;
    try { store.setItem(PENDING + p.key, JSON.stringify(p)); } catch (e) { p.unkept = true; /* too big to keep (a picture): sent once */ }
    await ask(p);
  }

  // ask sends a pending message and shows its answer; a connection lost
  // before the answer is whole is tried again, with the same key.
  async function ask(p) {
    // What a page reloaded mid-answer had shown of it shows until the
    // answer comes (each attempt's text takes its place).
    var shown = p.shown || "";
    var out = bubble("assistant pending", shown);
    // tools are the turn's tool calls the stream showed: { id, text, done }.
    var tools = p.tools || [];
    showTools(out, tools);
    var ctl = new AbortController();
    current = ctl;
    currentSession = p.session;
    currentP = p;
    currentOut = out;
    busy(true);
    try {
      // failed counts the tries in a row that did not reach the gateway
      // or were turned back by it.
      var failed = 0;
      for (;;) {
        var fresh = true;
        var res = null, answer, wait = 0, lost = false;
        try {
          var headers = { "Content-Type": "application/json", "X-Session-Id": p.session, "Idempotency-Key": p.key };
          var key = store.getItem("sb.key");
          if (key) headers["Authorization"] = "Bearer " + key;
          res = await fetch("/v1/chat/completions", { method: "POST", headers: headers, body: p.body, signal: ctl.signal });
          if (res.ok) {
            reconnecting(out, "");
            failed = 0;
            // The text streamed shows at most once a frame (each render
            // is of the whole answer); what came last shows when the
            // stream ends, however it ends.
            var frame = 0;
            var paint = function () {
              frame = 0;
              var follow = atEnd();
              renderMarkdown(out.md, shown);
              if (follow) log.scrollTop = log.scrollHeight;
            };
            try {
              answer = await readStream(res, function (piece) {
                if (fresh) shown = "";
                fresh = false;
                shown += piece;
                if (!frame) frame = requestAnimationFrame(paint);
                showPart(p, shown, tools);
              }, function (ev) {
                // A tool call started (its emoji and label) or ended.
                var follow = atEnd();
                var id = String(ev.toolCallId || "");
                var t = tools.filter(function (x) { return x.id === id; })[0];
                if (ev.status === "running" && !t) {
                  tools.push({ id: id, text: (ev.emoji || "⚡") + " " + (ev.label || ev.tool || ""), done: false });
                } else if (ev.status === "completed" && t) {
                  t.done = true;
                } else {
                  return;
                }
                showTools(out, tools);
                showPart(p, shown, tools);
                if (follow) log.scrollTop = log.scrollHeight;
              });
            } finally {
              if (frame) {
                cancelAnimationFrame(frame);
                paint();
              }
            }
            if (fresh) renderMarkdown(out.md, shown = answer); // an empty answer
          }
        } catch (err) {
          if (!(err instanceof TypeError)) throw err; // the gateway's error
          answer = null;
          lost = !err.waitEnded; // the connection was lost, not the wait ended
        }
        if (res && res.status === 401) {
          // The message stays pending: it goes out once the key is in
          // (or, after a reload, asks for the key again).
          refused = p;
          out.remove();
          bubble("error", "This gateway needs an API key. Enter it below; your message goes out with it.");
          form.hidden = true;
          keyForm.hidden = false;
          keyInput.focus();
          return;
        }
        if (res && !res.ok && (res.status === 429 || res.status >= 500) && res.headers.get("X-Should-Retry") !== "false") {
          // Turned back before the gateway took it (its rate limit, a
          // bus it could not publish to) or its wait ended: the message
          // stays pending and goes again with its key, after the wait
          // asked. A turn that failed says X-Should-Retry: false.
          wait = Math.min(parseInt(res.headers.get("Retry-After"), 10) || 0, 60) * 1000;
          answer = null;
        } else if (res && !res.ok) {
          var body = await res.json().catch(function () { return {}; });
          throw new Error((body.error && body.error.message) || ("HTTP " + res.status));
        }
        if (ctl.signal.aborted) return;
        if (answer != null) {
          var mine = taken(p);
          // The turn ended, its tool calls with it: a retry (after a
          // reload, a lost connection) is not told the end of a call it
          // did not see start.
          if (tools.some(function (t) { return !t.done; })) {
            tools.forEach(function (t) { t.done = true; });
            showTools(out, tools);
          }
          // The transcript as it is now: another tab may have added to
          // it since the question went out, or started a new chat.
          if (mine && store.getItem("sb.session") === p.session) {
            var h = history(), renewed = p.reset && NEW_STARTED.test(answer);
            if (renewed) {
              // The conversation shown ended: its answer starts the new
              // one. The messages sent before the /new were the old
              // one's (stopped or dropped with it).
              h = [];
              clearLog();
              log.appendChild(out);
              pendings().forEach(function (q) { if (q.session === p.session && q.at < p.at) done(q); });
            }
            var a = { role: "assistant", content: answer };
            if (tools.length) a.tools = keptTools(tools);
            h.push(a);
            saveHistory(h);
            if (renewed) cleared(p.at);
          }
          return;
        }
        var turnedBack = res && !res.ok;
        if (p.at && Date.now() - p.at >= KEPT_FOR) {
          // The gateway keeps the answer no more: sent again, the
          // message would be a new one.
          throw new Error(turnedBack ?
            "The gateway stayed busy (HTTP " + res.status + "); send your message again." :
            "The connection was lost before the answer came, and the gateway keeps it no more; send your message again.");
        }
        var delay = RETRY_FIRST;
        if (lost || turnedBack) {
          delay = Math.max(Math.min(RETRY_FIRST * Math.pow(2, failed), RETRY_MAX), wait);
          failed++;
          reconnecting(out, turnedBack ? "The gateway is busy; trying again…" : "Connection lost; reconnecting…");
        }
        await pause(delay, ctl.signal);
        if (ctl.signal.aborted) return;
      }
    } catch (err) {
      if (ctl.signal.aborted) return; // New chat: nothing to show or keep
      var ended = taken(p);
      if (shown || tools.length) {
        // The part of the answer that was shown stays, marked.
        stopped(out);
        if (ended && store.getItem("sb.session") === p.session) {
          var kept = history();
          kept.push({ role: "assistant", content: shown, stopped: true, tools: keptTools(tools) });
          saveHistory(kept);
        }
      }
      bubble("error", String(err.message || err));
    } finally {
      if (part && part.p === p) {
        keepPart(); // for a reload, if it is still pending
        part = null;
      }
      reconnecting(out, "");
      out.classList.remove("pending");
      if (!out.textContent) out.remove();
      if (current === ctl) {
        current = null;
        busy(false);
      }
    }
  }

  // readStream parses OpenAI server-sent events and calls onText per
  // delta and onTool per hermes.tool.progress event (a tool call's start
  // or end); it returns the answer at data: [DONE], throws the gateway's
  // in-stream error, and throws a TypeError when the stream ends before
  // either (the connection was cut), the gateway stopped waiting (its
  // error comes after a ": wait ended" comment; a turn that failed, with
  // the same code timeout perhaps, has none: that error is its answer)
  // or the answer is not what streamed (the turn ran again after its
  // worker died: ": answer changed"; asked again with the message's
  // key, the whole answer comes; a turn /stop ended has none).
  async function readStream(res, onText, onTool) {
    var reader = res.body.getReader();
    var decoder = new TextDecoder();
    var buf = "", all = "", waitEnded = false;
    for (;;) {
      var r = await reader.read();
      if (r.done) throw new TypeError("the answer's stream ended early");
      buf += decoder.decode(r.value, { stream: true });
      var idx;
      while ((idx = buf.indexOf("\n\n")) >= 0) {
        var ev = buf.slice(0, idx);
        buf = buf.slice(idx + 2);
        var lines = ev.split("\n"), name = "";
        for (var i = 0; i < lines.length; i++) {
          var line = lines[i];
          if (line === ": wait ended" || line === ": answer changed") waitEnded = true;
          if (line.indexOf("event:") === 0) name = line.slice(6).trim();
          if (line.indexOf("data:") !== 0) continue;
          var data = line.slice(5).trim();
          if (data === "[DONE]") return all;
          var msg = JSON.parse(data);
          if (name === "hermes.tool.progress") { onTool(msg); continue; }
          if (msg.error && waitEnded) {
            // The wait ended, not the turn, or the answer changed: asked
            // again with the same key, the gateway gives the (whole)
            // answer when it comes.
            var ended = new TypeError(msg.error.message);
            ended.waitEnded = true;
            throw ended;
          }
          if (msg.error) throw new Error(msg.error.message);
          var c = msg.choices && msg.choices[0] && msg.choices[0].delta && msg.choices[0].delta.content;
          if (c) { all += c; onText(c); }
        }
      }
    }
  }

  // The messages whose answers a reload (or a lost connection) cut off
  // get them now, one after another: this tab's, and those of tabs
  // closed since (no one holds their lock); not another open tab's,
  // which waits for its own. Another conversation's are no longer
  // waited for.
  (function () {
    // The one record of the release before (sb.pending, sb.part), this
    // tab's now. It goes before its copy is written: a picture's record
    // is megabytes, and the storage has room for one copy, not two.
    var legacy = record("sb.pending"), legacyPart = record("sb.part");
    store.removeItem("sb.pending");
    store.removeItem("sb.part");
    if (legacy && legacy.key) {
      legacy.tab = tab;
      legacy.at = 0;
      try {
        store.setItem(PENDING + legacy.key, JSON.stringify(legacy));
        if (legacyPart && legacyPart.key === legacy.key) store.setItem(PART + legacy.key, JSON.stringify(legacyPart));
      } catch (e) { /* full: as a message too big to keep */ }
    }
    var now = store.getItem("sb.session"), mine = [], others = [];
    pendings().forEach(function (p) {
      if (p.session !== now) done(p);
      else (p.tab === tab ? mine : others).push(p);
    });
    if (!others.length) { resume(mine); return; }
    if (!navigator.locks) { resume(mine.concat(others)); return; } // as before: any tab's
    navigator.locks.query().then(function (locks) {
      var open = {};
      locks.held.concat(locks.pending).forEach(function (l) { open[l.name] = true; });
      resume(mine.concat(others.filter(function (p) { return !open["sb.tab." + p.tab]; })).sort(function (a, b) { return a.at - b.at; }));
    }, function () { resume(mine); });
  })();
  async function resume(list) {
    for (var i = 0; i < list.length; i++) {
      var p = list[i];
      if (store.getItem(PENDING + p.key) == null || p.session !== store.getItem("sb.session")) continue;
      var kept = record(PART + p.key);
      if (kept) {
        p.shown = kept.shown;
        p.tools = kept.tools;
      }
      await ask(p);
    }
  }
})();
