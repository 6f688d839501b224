// Switchboard web chat: streams replies from /v1/chat/completions.
(function () {
  "use strict";
  var store = window.localStorage;
  var log = document.getElementById("log");
  var form = document.getElementById("form");
  var input = document.getElementById("input");
  var send = document.getElementById("send");
  var keyForm = document.getElementById("key-form");
  var keyInput = document.getElementById("key");

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
  function saveHistory(h) { store.setItem("sb.history", JSON.stringify(h.slice(-200))); }

  function bubble(role, text) {
    var d = document.createElement("div");
    d.className = "msg " + role;
    d.textContent = text;
    log.appendChild(d);
    log.scrollTop = log.scrollHeight;
    return d;
  }
  history().forEach(function (m) { bubble(m.role, m.content); });

  document.getElementById("new").addEventListener("click", function () {
    store.removeItem("sb.session");
    store.removeItem("sb.history");
    log.textContent = "";
    input.focus();
  });
  keyForm.addEventListener("submit", function (e) {
    e.preventDefault();
    store.setItem("sb.key", keyInput.value.trim());
    keyForm.hidden = true;
    form.hidden = false;
    input.focus();
  });
  input.addEventListener("keydown", function (e) {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); form.requestSubmit(); }
  });

  form.addEventListener("submit", function (e) {
    e.preventDefault();
    var text = input.value.trim();
    if (!text) return;
    input.value = "";
    chat(text);
  });

  async function chat(text) {
    var h = history();
    bubble("user", text);
    h.push({ role: "user", content: text });
    saveHistory(h);
    var out = bubble("assistant pending", "");
    send.disabled = true;
    var headers = { "Content-Type": "application/json", "X-Session-Id": session() };
    var key = store.getItem("sb.key");
    if (key) headers["Authorization"] = "Bearer " + key;
    try {
      var res = await fetch("/v1/chat/completions", {
        method: "POST", headers: headers,
        body: JSON.stringify({ model: "switchboard", stream: true, messages: [{ role: "user", content: text }] })
      });
      if (res.status === 401) {
        out.remove();
        bubble("error", "This gateway needs an API key. Enter it below and send again.");
        form.hidden = true;
        keyForm.hidden = false;
        keyInput.focus();
        return;
      }
      if (!res.ok) {
        var body = await res.json().catch(function () { return {}; });
        throw new Error((body.error && body.error.message) || ("HTTP " + res.status));
      }
      var answer = await readStream(res, function (piece) {
        out.textContent += piece;
        log.scrollTop = log.scrollHeight;
      });
      h.push({ role: "assistant", content: answer });
      saveHistory(h);
    } catch (err) {
      bubble("error", String(err.message || err));
    } finally {
      out.classList.remove("pending");
      if (!out.textContent) out.remove();
      send.disabled = false;
    }
  }

  // readStream parses OpenAI server-sent events and calls onText per delta.
  async function readStream(res, onText) {
    var reader = res.body.getReader();
    var decoder = new TextDecoder();
    var buf = "", all = "";
    for (;;) {
      var r = await reader.read();
      if (r.done) break;
      buf += decoder.decode(r.value, { stream: true });
      var idx;
      while ((idx = buf.indexOf("\n\n")) >= 0) {
        var ev = buf.slice(0, idx);
        buf = buf.slice(idx + 2);
        var lines = ev.split("\n");
        for (var i = 0; i < lines.length; i++) {
          var line = lines[i];
          if (line.indexOf("data:") !== 0) continue;
          var data = line.slice(5).trim();
          if (data === "[DONE]") return all;
          var msg = JSON.parse(data);
          if (msg.error) throw new Error(msg.error.message);
          var c = msg.choices && msg.choices[0] && msg.choices[0].delta && msg.choices[0].delta.content;
          if (c) { all += c; onText(c); }
        }
      }
    }
    return all;
  }
})();
