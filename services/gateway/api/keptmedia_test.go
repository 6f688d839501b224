package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// keptLink finds the links to kept files in an answer.
var keptLink = regexp.MustCompile(`\]\((/v1/media/[0-9a-f]{32}\?exp=[0-9]+&sig=[A-Za-z0-9_-]{43})\)`)

// Media a turn sends that exists only in the attachment store (a voice
// reply, a /save export: a send whose attachment names bytes_ref) is
// linked after the answer's text as the gateway's GET /v1/media/{id},
// which serves its bytes to the client whose conversation it was sent to
// — on any replica — and to no other key; a file the store no longer
// keeps is 410, one over media_max_bytes 413.
func TestKeptMediaIsLinkedAndServed(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	const alice = "alice-key-0123456789abcdefghij"
	s := startService(t, b, func(c *Config) { c.Keys = map[string]string{"alice": alice} })
	small := startService(t, b, func(c *Config) { c.Keys = map[string]string{"alice": alice}; c.MediaMaxBytes = 32 })
	r := startResponder(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store := attachment.New(b.JetStream(), b.Topology(), attachment.Config{Enabled: true})
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{7}, 64)...)
	if _, err := store.Keep(ctx, "test/chart.png", "image/png", bytes.NewReader(png)); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Keep(ctx, "test/notes.html", "text/html", strings.NewReader("<script>alert(1)</script>")); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.answer = func(*eventsv1.MessageReceived, int) []string { return []string{"Here is", " the chart."} }
	r.media = []*eventsv1.Attachment{
		{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_BytesRef{BytesRef: "test/chart.png"}, MimeType: "image/png", FileName: "chart.png"},
		{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, Location: &eventsv1.Attachment_BytesRef{BytesRef: "test/notes.html"}, FileName: "notes.html"},
	}
	r.mu.Unlock()
	chat := openai.ChatCompletionNewParams{Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("chart it")}}
	links := func(key string, opts ...option.RequestOption) (chart, notes string) {
		t.Helper()
		client := sdkClient(s, append(opts, option.WithAPIKey(key))...)
		resp, err := client.Chat.Completions.New(ctx, chat)
		if err != nil {
			t.Fatal(err)
		}
		text := resp.Choices[0].Message.Content
		found := keptLink.FindAllStringSubmatch(text, -1)
		if len(found) != 2 || !strings.HasPrefix(text, "Here is the chart.\n\n![chart.png](/v1/media/") ||
			!strings.Contains(text, "\n[notes.html](/v1/media/") {
			t.Fatalf("answer %q does not link the kept files", text)
		}
		return found[0][1], found[1][1]
	}
	get := func(on *Service, link, key string) httpResult {
		t.Helper()
		return do(t, http.MethodGet, "http://"+on.Addr()+link, key, "", nil)
	}
	chart, notes := links(testKey)
	for _, on := range []*Service{s, small} {
		if got := get(on, notes, testKey); got.code != http.StatusOK || string(got.body) != "<script>alert(1)</script>" ||
			got.header.Get("Content-Type") != "text/html" || got.header.Get("Content-Disposition") != `attachment; filename=notes.html` {
			t.Errorf("a kept file: %d %q %v", got.code, got.body, got.header)
		}
	}
	got := get(s, chart, testKey)
	if got.code != http.StatusOK || !bytes.Equal(got.body, png) || got.header.Get("Content-Type") != "image/png" ||
		got.header.Get("Content-Disposition") != `inline; filename=chart.png` {
		t.Errorf("a kept picture: %d %v", got.code, got.header)
	}
	if got := get(small, chart, testKey); got.code != http.StatusRequestEntityTooLarge || errorCode(t, got) != "media_too_large" {
		t.Errorf("a file over media_max_bytes: %d %s", got.code, got.body)
	}
	if unsigned, _, _ := strings.Cut(chart, "?"); get(s, unsigned, "").code != http.StatusUnauthorized {
		t.Errorf("without a key or a signature: %d", get(s, unsigned, "").code)
	}
	if got := get(s, chart, alice); got.code != http.StatusNotFound || errorCode(t, got) != "media_not_found" {
		t.Errorf("another key's file: %d %s", got.code, got.body)
	}
	for _, link := range []string{"/v1/media/" + strings.Repeat("0", 32), "/v1/media/nope"} {
		if got := get(s, link, testKey); got.code != http.StatusNotFound || errorCode(t, got) != "media_not_found" {
			t.Errorf("%s: %d %s", link, got.code, got.body)
		}
	}
	// A named key's conversation is its own: its links are hers alone,
	// and a keyed request's stored answer links the same files.
	aliceChart, _ := links(alice, option.WithHeader(HeaderSession, "s1"))
	again, _ := links(alice, option.WithHeader(HeaderSession, "s1"), option.WithHeader(HeaderIdempotencyKey, "k-kept"))
	for _, link := range []string{aliceChart, again} {
		if got := get(s, link, alice); got.code != http.StatusOK || !bytes.Equal(got.body, png) {
			t.Errorf("her own file: %d %s", got.code, got.body)
		}
		if got := get(s, link, testKey); got.code != http.StatusNotFound {
			t.Errorf("her file with the other key: %d %s", got.code, got.body)
		}
	}
	// The store no longer keeps the file: the link says so.
	obs, err := b.JetStream().ObjectStore(ctx, b.Topology().Stream(attachment.Bucket))
	if err != nil {
		t.Fatal(err)
	}
	if err := obs.Delete(ctx, "test/chart.png"); err != nil {
		t.Fatal(err)
	}
	got = get(s, chart, testKey)
	var e apiError
	if got.code != http.StatusGone || json.Unmarshal(got.body, &e) != nil || *e.Error.Code != "media_expired" {
		t.Errorf("a file no longer kept: %d %s", got.code, got.body)
	}
}

func TestMediaConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url string
		ok  bool
	}{
		{"", true},
		{"https://agent.example.test", true},
		{"http://10.0.0.5:8642/agent/", true},
		{"ftp://agent.example.test", false},
		{"agent.example.test", false},
		{"https://agent.example.test/?a=1", false},
		{"https://user:pw@agent.example.test", false},
	} {
		cfg := DefaultConfig()
		cfg.Key, cfg.PublicURL = testKey, c.url
		if err := cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("public_url %q: %v", c.url, err)
		}
	}
	for _, c := range []struct {
		bytes int64
		ok    bool
	}{{0, true}, {minMediaLinksMaxBytes, true}, {16 << 20, true}, {minMediaLinksMaxBytes - 1, false}, {-1, false}} {
		cfg := DefaultConfig()
		cfg.Key, cfg.MediaLinksMaxBytes = testKey, c.bytes
		if err := cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("media_links_max_bytes %d: %v", c.bytes, err)
		}
	}
	for _, c := range []struct {
		stall time.Duration
		ok    bool
	}{{0, true}, {time.Second, true}, {-time.Second, false}} {
		cfg := DefaultConfig()
		cfg.Key, cfg.MediaStallTimeout = testKey, c.stall
		if err := cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("media_stall_timeout %s: %v", c.stall, err)
		}
	}
	s := &Service{cfg: Config{PublicURL: "https://agent.example.test/agent/"}}
	if got := s.mediaURL("0123"); got != "https://agent.example.test/agent/v1/media/0123" {
		t.Errorf("link %q", got)
	}
}

// A run's media are in its output as in a chat completion's answer,
// linked after its text (a kept file to GET /v1/media/{id}), and its
// events stream the links as the text delta before run.completed, so
// that the deltas add up to the output.
func TestRunCarriesItsMedia(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store := attachment.New(b.JetStream(), b.Topology(), attachment.Config{Enabled: true})
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{7}, 64)...)
	if _, err := store.Keep(ctx, "test/chart.png", "image/png", bytes.NewReader(png)); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.answer = func(*eventsv1.MessageReceived, int) []string { return []string{"Here is", " the chart."} }
	r.media = []*eventsv1.Attachment{
		{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_BytesRef{BytesRef: "test/chart.png"}, MimeType: "image/png", FileName: "chart.png"},
		{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, Location: &eventsv1.Attachment_Url{Url: "https://files.example.test/report.pdf"}, FileName: "report.pdf"},
	}
	r.mu.Unlock()
	id, _ := startRun(t, s, `{"input":"chart it"}`, nil)
	events, closed := followRun(t, s, id).rest(t)
	if got := strings.Join(names(events), " "); got != "message.delta message.delta message.delta run.completed" || !closed {
		t.Fatalf("events %s (closed %v)", got, closed)
	}
	out, _ := events[3]["output"].(string)
	found := keptLink.FindStringSubmatch(out)
	if found == nil || out != "Here is the chart.\n\n![chart.png]("+found[1]+")\n[report.pdf](https://files.example.test/report.pdf)" {
		t.Fatalf("run.completed output %q", out)
	}
	var streamed string
	for _, ev := range events[:3] {
		streamed += ev["delta"].(string)
	}
	if streamed != out {
		t.Errorf("deltas %q, output %q", streamed, out)
	}
	if st := runStatusOf(t, s, id); st.Status != runCompleted || st.Output == nil || *st.Output != out {
		t.Errorf("status %+v", st)
	}
	if got := do(t, http.MethodGet, "http://"+s.Addr()+found[1], testKey, "", nil); got.code != http.StatusOK || !bytes.Equal(got.body, png) {
		t.Errorf("the run's kept file: %d %s", got.code, got.body)
	}
}

// The links a run's output adds after its text are its last text delta
// whoever writes the run's last event: a final send delivered again after
// the replica that ended the run stopped before writing its events (or
// a follower writing the last event of a run that ended) writes the
// links before run.completed, so that the deltas still add up to the
// output.
func TestRunMediaDeltaIsWrittenAgainBeforeTheEnd(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r.mu.Lock()
	r.answer = func(*eventsv1.MessageReceived, int) []string { return []string{"Here is", " the report."} }
	r.media = []*eventsv1.Attachment{
		{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, Location: &eventsv1.Attachment_Url{Url: "https://files.example.test/report.pdf"}, FileName: "report.pdf"},
	}
	r.mu.Unlock()
	id, _ := startRun(t, s, `{"input":"report"}`, nil)
	if _, closed := followRun(t, s, id).rest(t); !closed {
		t.Fatal("the run did not end")
	}
	// The replica stopped after it ended the run's record, before its
	// events: the send is delivered again.
	kv, err := s.runs.bucket(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"media", "end"} {
		if err := kv.Delete(ctx, eventKey(id, key)); err != nil {
			t.Fatal(err)
		}
	}
	again := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Text: "Here is the report.", Final: true, IdempotencyKey: "turn:1:0"}
	if err := s.endRun(ctx, id, again, false); err != nil {
		t.Fatal(err)
	}
	events, closed := followRun(t, s, id).rest(t)
	if n := len(events); n == 0 || events[n-1]["event"] != "run.completed" || !closed {
		t.Fatalf("events %v (closed %v)", names(events), closed)
	}
	out, _ := events[len(events)-1]["output"].(string)
	var streamed string
	for _, ev := range events[:len(events)-1] {
		if ev["event"] == "message.delta" {
			streamed += ev["delta"].(string)
		}
	}
	if want := "Here is the report.\n\n[report.pdf](https://files.example.test/report.pdf)"; out != want || streamed != out {
		t.Errorf("deltas %q, output %q", streamed, out)
	}
}

// linkTo keeps data in the attachment store and links it as a send to
// the single key's chat, as an answer would: the link's path and query.
func linkTo(t *testing.T, s *Service, store *attachment.Store, name, mimeType string, data []byte) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := store.Keep(ctx, name, mimeType, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Target: &deliveryv1.Target{Platform: PlatformName, ChatId: "s1"},
		InputMessageIds: []string{"req_x_1"}, IdempotencyKey: "turn:" + name,
		Attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT,
			Location: &eventsv1.Attachment_BytesRef{BytesRef: name}, MimeType: mimeType, FileName: path.Base(name)}}}
	out, err := s.linkKept(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return out.GetAttachments()[0].GetUrl()
}

// storeReads counts the reads of the attachment store going on: each
// is a consumer of its stream.
func storeReads(t *testing.T, b *bus.Bus) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := b.JetStream().Stream(ctx, "OBJ_"+b.Topology().Stream(attachment.Bucket))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}

// A kept file is streamed from the attachment store as the client reads
// it, never held whole: the store's read of a large file still goes on
// after the client has its first bytes, and ends with the client's
// read. HEAD answers the headers without reading the file.
func TestKeptMediaIsStreamed(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	store := attachment.New(b.JetStream(), b.Topology(), attachment.Config{Enabled: true})
	file := make([]byte, 16<<20)
	for i := range file {
		file[i] = byte(i*31 + i>>12)
	}
	link := linkTo(t, s, store, "test/film.mp4", "video/mp4", file)
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A small receive buffer: the kernel holds little of the answer for
	// a client that does not read.
	if err := conn.(*net.TCPConn).SetReadBuffer(32 << 10); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", link, s.Addr(), testKey); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.ContentLength != int64(len(file)) || resp.Header.Get("Content-Type") != "video/mp4" ||
		resp.Header.Get("X-Content-Type-Options") != "nosniff" || !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment") {
		t.Fatalf("answer %d, length %d, %v", resp.StatusCode, resp.ContentLength, resp.Header)
	}
	first := make([]byte, 64<<10)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := storeReads(t, b); n != 1 {
		t.Fatalf("%d reads of the store going on after the client's first bytes, want 1 (the file was read whole first?)", n)
	}
	rest, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.Equal(append(first, rest...), file) {
		t.Fatalf("the file: %d bytes, %v", len(first)+len(rest), err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for storeReads(t, b) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the store's read did not end with the client's")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// HEAD: the headers alone.
	got := do(t, http.MethodHead, "http://"+s.Addr()+link, testKey, "", nil)
	if got.code != http.StatusOK || got.header.Get("Content-Length") != strconv.Itoa(len(file)) || len(got.body) != 0 ||
		got.header.Get("Content-Type") != "video/mp4" || got.header.Get("Accept-Ranges") != "none" {
		t.Errorf("HEAD: %d %v %d bytes", got.code, got.header, len(got.body))
	}
	// A file over media_max_bytes is refused before a byte is sent, on
	// HEAD too.
	small := startService(t, b, func(c *Config) { c.MediaMaxBytes = 1 << 20 })
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		if got := do(t, method, "http://"+small.Addr()+link, testKey, "", nil); got.code != http.StatusRequestEntityTooLarge {
			t.Errorf("%s over media_max_bytes: %d", method, got.code)
		}
	}
	// A file stored without a media type is named from its first bytes,
	// the same on HEAD, and the bytes read to name it are sent still.
	page := "<html><body>" + strings.Repeat("x", 2000) + "</body></html>"
	typeless := linkTo(t, s, store, "test/page", "", []byte(page))
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		got := do(t, method, "http://"+s.Addr()+typeless, testKey, "", nil)
		if got.code != http.StatusOK || got.header.Get("Content-Type") != "text/html; charset=utf-8" ||
			got.header.Get("Content-Disposition") != "attachment; filename=page" || (method == http.MethodGet && string(got.body) != page) {
			t.Errorf("%s of a file of no type: %d %v %d bytes", method, got.code, got.header, len(got.body))
		}
	}
	// A range is not served: the whole file, as Accept-Ranges says.
	got = do(t, http.MethodGet, "http://"+s.Addr()+link, testKey, "", map[string]string{"Range": "bytes=0-99"})
	if got.code != http.StatusOK || len(got.body) != len(file) {
		t.Errorf("a range request: %d, %d bytes", got.code, len(got.body))
	}
}

// A link carries a signature a browser can open it with, no header
// needed (an <img src>, a click in a chat UI): until its expiry, for as
// long as its record is kept. A tampered or expired signature, or one
// of a record no longer kept, is 404 as an unknown link is; a request
// with a key is checked as before, whatever the query says.
func TestKeptMediaSignedLinks(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	const alice = "alice-key-0123456789abcdefghij"
	s := startService(t, b, func(c *Config) { c.Keys = map[string]string{"alice": alice}; c.MediaTTL = time.Hour })
	other := startService(t, b, func(c *Config) { c.Keys = map[string]string{"alice": alice} })
	store := attachment.New(b.JetStream(), b.Topology(), attachment.Config{Enabled: true})
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{7}, 64)...)
	link := linkTo(t, s, store, "test/chart.png", "image/png", png)
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimPrefix(u.Path, mediaPath)
	exp, err := strconv.ParseInt(u.Query().Get("exp"), 10, 64)
	if err != nil || !keptLink.MatchString("]("+link+")") {
		t.Fatalf("link %q is not signed", link)
	}
	if until := time.Until(time.Unix(exp, 0)); until > time.Hour || until < 59*time.Minute {
		t.Errorf("the link expires in %v, want media_ttl (1h)", until)
	}
	// The same send delivered again links the same URL.
	if again := linkTo(t, s, store, "test/chart.png", "image/png", png); again != link {
		t.Errorf("a send delivered again links %q, first %q", again, link)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, found, err := s.media.get(ctx, id)
	if err != nil || !found {
		t.Fatalf("record: %v %v", found, err)
	}
	signed := func(id string, exp int64, sig string) string {
		return mediaPath + id + "?exp=" + strconv.FormatInt(exp, 10) + "&sig=" + sig
	}
	tampered := []byte(u.Query().Get("sig"))
	tampered[3] ^= 1
	for _, c := range []struct {
		name, link, key string
		code            int
	}{
		{"signed, no header", link, "", http.StatusOK},
		{"signed, on another replica", link, "", http.StatusOK},
		{"signed, with its key", link, testKey, http.StatusOK},
		{"signed, with another key", link, alice, http.StatusNotFound},
		{"tampered signature", signed(id, exp, string(tampered)), "", http.StatusNotFound},
		{"a later expiry", signed(id, exp+3600, u.Query().Get("sig")), "", http.StatusNotFound},
		{"expired", signed(id, time.Now().Add(-time.Second).Unix(), signLink(id, rec, time.Now().Add(-time.Second).Unix())), "", http.StatusNotFound},
		{"another link's signature", signed(strings.Repeat("a", 32), exp, u.Query().Get("sig")), "", http.StatusNotFound},
		{"no expiry", mediaPath + id + "?sig=" + u.Query().Get("sig"), "", http.StatusNotFound},
		{"no signature", mediaPath + id + "?exp=" + strconv.FormatInt(exp, 10), "", http.StatusUnauthorized},
	} {
		on := s
		if strings.Contains(c.name, "another replica") {
			on = other
		}
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			got := do(t, method, "http://"+on.Addr()+c.link, c.key, "", nil)
			if got.code != c.code {
				t.Errorf("%s, %s: %d %s", c.name, method, got.code, got.body)
				continue
			}
			switch {
			case c.code == http.StatusNotFound && method == http.MethodGet && errorCode(t, got) != "media_not_found":
				t.Errorf("%s: %s", c.name, got.body)
			case c.code == http.StatusOK && (got.header.Get("X-Content-Type-Options") != "nosniff" ||
				got.header.Get("Content-Disposition") != "inline; filename=chart.png" || got.header.Get("Content-Length") != strconv.Itoa(len(png))):
				t.Errorf("%s, %s: headers %v", c.name, method, got.header)
			case c.code == http.StatusOK && method == http.MethodGet && !bytes.Equal(got.body, png):
				t.Errorf("%s: body %q", c.name, got.body)
			}
		}
	}
	// A named key's link: the signature covers the record's owner.
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Target: &deliveryv1.Target{Platform: PlatformName, ChatId: "alice.s1"},
		InputMessageIds: []string{"req_x_2"}, IdempotencyKey: "turn:alice",
		Attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE,
			Location: &eventsv1.Attachment_BytesRef{BytesRef: "test/chart.png"}, MimeType: "image/png"}}}
	out, err := s.linkKept(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	hers := out.GetAttachments()[0].GetUrl()
	if got := do(t, http.MethodGet, "http://"+s.Addr()+hers, "", "", nil); got.code != http.StatusOK || !bytes.Equal(got.body, png) {
		t.Errorf("her signed link: %d %s", got.code, got.body)
	}
	hid := strings.TrimPrefix(strings.SplitN(hers, "?", 2)[0], mediaPath)
	hrec, _, err := s.media.get(ctx, hid)
	if err != nil {
		t.Fatal(err)
	}
	forged := hrec
	forged.Owner = ""
	if got := do(t, http.MethodGet, "http://"+s.Addr()+signed(hid, hrec.Expires, signLink(hid, forged, hrec.Expires)), "", "", nil); got.code != http.StatusNotFound {
		t.Errorf("her link signed for another owner: %d", got.code)
	}
	// A deleted record's link is 404, signature or not.
	kv, err := s.media.kv.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := do(t, http.MethodGet, "http://"+s.Addr()+link, "", "", nil); got.code != http.StatusNotFound || errorCode(t, got) != "media_not_found" {
		t.Errorf("a deleted record's signed link: %d %s", got.code, got.body)
	}
}

// The link bucket is bounded (media_links_max_bytes): once it is full,
// each new link drops the oldest, which is counted (and logged), and a
// dropped link answers 404 media_not_found like an expired one, with
// its key or its signature, while the newest still open.
func TestMediaLinkBucketFull(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.MediaLinksMaxBytes = minMediaLinksMaxBytes })
	store := attachment.New(b.JetStream(), b.Topology(), attachment.Config{Enabled: true})
	first := linkTo(t, s, store, "test/a.txt", "text/plain", []byte("kept"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	before := promtest.ToFloat64(mediaLinksDropped)
	// Records of about 2 KiB (a long file name): 64 KiB holds about 30.
	var last string
	for i := range 60 {
		req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Target: &deliveryv1.Target{Platform: PlatformName, ChatId: "s1"},
			InputMessageIds: []string{"req_x_1"}, IdempotencyKey: fmt.Sprintf("turn:%d", i),
			Attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT,
				Location: &eventsv1.Attachment_BytesRef{BytesRef: "test/a.txt"}, FileName: strings.Repeat("n", 2000) + ".txt"}}}
		out, err := s.linkKept(ctx, req)
		if err != nil {
			t.Fatalf("link %d: %v", i, err)
		}
		last = out.GetAttachments()[0].GetUrl()
	}
	if dropped := promtest.ToFloat64(mediaLinksDropped) - before; dropped < 20 {
		t.Errorf("%v links counted as dropped, want about 30", dropped)
	}
	unsigned, _, _ := strings.Cut(first, "?")
	for _, c := range []struct{ link, key string }{{first, ""}, {unsigned, testKey}} {
		if got := do(t, http.MethodGet, "http://"+s.Addr()+c.link, c.key, "", nil); got.code != http.StatusNotFound || errorCode(t, got) != "media_not_found" {
			t.Errorf("a dropped link (key %q): %d %s", c.key, got.code, got.body)
		}
	}
	if got := do(t, http.MethodGet, "http://"+s.Addr()+last, "", "", nil); got.code != http.StatusOK || string(got.body) != "kept" {
		t.Errorf("the newest link: %d %s", got.code, got.body)
	}
}

// A kept file damaged in the store is never served as if whole: the
// answer's body ends short of its Content-Length and the connection is
// closed, so the client's read fails.
func TestKeptMediaDamagedIsCutShort(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	store := attachment.New(b.JetStream(), b.Topology(), attachment.Config{Enabled: true})
	file := bytes.Repeat([]byte("kept"), 50<<10) // 200 KiB: two chunks
	link := linkTo(t, s, store, "test/damaged.pdf", "application/pdf", file)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The last chunk changed, its size and the file's digest kept.
	bucket := b.Topology().Stream(attachment.Bucket)
	obs, err := b.JetStream().ObjectStore(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := obs.GetInfo(ctx, "test/damaged.pdf")
	if err != nil {
		t.Fatal(err)
	}
	st, err := b.JetStream().Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	subject := "$O." + bucket + ".C." + info.NUID
	last, err := st.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx, last.Sequence); err != nil {
		t.Fatal(err)
	}
	last.Data[0] ^= 0xff
	if _, err := b.JetStream().Publish(ctx, subject, last.Data); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.Addr()+link, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.ContentLength != int64(len(file)) {
		t.Fatalf("answer %d, length %d", resp.StatusCode, resp.ContentLength)
	}
	if err == nil || len(got) >= len(file) {
		t.Errorf("a damaged file read as whole: %d of %d bytes, %v", len(got), len(file), err)
	}
}

// Signed requests are rate limited per link apart from the keys: a
// stranger's requests for links that do not exist, however many, never
// reset a key's limit (nor grow the keys' limiters); a kept link's are
// limited.
func TestMediaLinkLimitIsApart(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.RateLimit, c.RateBurst = 0.001, 1 })
	serve := func(path, key string) int {
		req := httptest.NewRequest(http.MethodGet, "http://"+s.Addr()+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		rec := httptest.NewRecorder()
		s.handler.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := serve("/v1/models", testKey); code != http.StatusOK {
		t.Fatalf("the key's first request: %d", code)
	}
	if code := serve("/v1/models", testKey); code != http.StatusTooManyRequests {
		t.Fatalf("the key's second request: %d, want 429", code)
	}
	for i := range 10_001 {
		if code := serve(fmt.Sprintf("%s%032x?exp=1&sig=x", mediaPath, i), ""); code != http.StatusNotFound {
			t.Fatalf("a link never made: %d", code)
		}
	}
	if code := serve("/v1/models", testKey); code != http.StatusTooManyRequests {
		t.Errorf("the key's request after a stranger's many links: %d, want 429 still", code)
	}
	// A link kept is limited still.
	store := attachment.New(b.JetStream(), b.Topology(), attachment.Config{Enabled: true})
	link := linkTo(t, s, store, "test/limited.txt", "text/plain", []byte("kept"))
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		if code := serve(link, ""); code != want {
			t.Errorf("signed request %d: %d, want %d", i+1, code, want)
		}
	}
}

// A client that stops reading a kept file has its download ended once
// a chunk waits media_stall_timeout for it: the store's read ends, and
// the client, reading again, finds the body short of its length.
func TestKeptMediaStalledDownloadEnds(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.MediaStallTimeout = 300 * time.Millisecond })
	store := attachment.New(b.JetStream(), b.Topology(), attachment.Config{Enabled: true})
	file := bytes.Repeat([]byte("stalled "), 2<<20) // 16 MiB
	link := linkTo(t, s, store, "test/stalled.mp4", "video/mp4", file)
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.(*net.TCPConn).SetReadBuffer(32 << 10); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", link, s.Addr(), testKey); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.ContentLength != int64(len(file)) {
		t.Fatalf("answer %d, length %d", resp.StatusCode, resp.ContentLength)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	// The client reads no more: the download ends, and its read of the
	// store with it.
	deadline := time.Now().Add(20 * time.Second)
	for storeReads(t, b) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the store is still read for a client that stopped reading")
		}
		time.Sleep(50 * time.Millisecond)
	}
	rest, err := io.ReadAll(resp.Body)
	if err == nil || 64<<10+len(rest) >= len(file) {
		t.Errorf("the stalled download went on: %d of %d bytes, %v", 64<<10+len(rest), len(file), err)
	}
}

// A client that stops reading within the last few KB of a kept file,
// when every write of the file's bytes went out but the server still
// holds the last ones, has its download ended within
// media_stall_timeout too: those bytes are sent while the write
// deadline holds, not after the handler cleared it (they waited, and
// the connection with them, for as long as the client did).
func TestKeptMediaStalledInItsLastBytesEnds(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.MediaStallTimeout = 300 * time.Millisecond })
	store := attachment.New(b.JetStream(), b.Topology(), attachment.Config{Enabled: true})
	// Whole copy buffers, then 2,000 bytes, which the response's buffer
	// holds once the copy has written them.
	file := bytes.Repeat([]byte("last KB "), (4*32<<10+2000)/8)
	link := linkTo(t, s, store, "test/last.mp4", "video/mp4", file)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The client takes the headers and all but the last bytes.
	srv := &http.Server{Handler: s.Handler()}
	go func() { _ = srv.Serve(&stallListener{Listener: ln, takes: 4*32<<10 + 1000}) }()
	t.Cleanup(func() { _ = srv.Close() })
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", link, ln.Addr(), testKey); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.ContentLength != int64(len(file)) {
		t.Fatalf("answer %d, length %d", resp.StatusCode, resp.ContentLength)
	}
	got, err := io.ReadAll(resp.Body)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection still held the download 10 s after the client stopped reading (%d of %d bytes)", len(got), len(file))
	}
	if err == nil || len(got) >= len(file) {
		t.Errorf("the stalled download went on: %d of %d bytes, %v", len(got), len(file), err)
	}
}

// stallListener's connections take this many bytes, then stall, as a
// client that stops reading: a write waits for its deadline, or, with
// none, for the connection's close.
type stallListener struct {
	net.Listener
	takes int
}

func (l *stallListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &stallConn{Conn: c, left: l.takes, closed: make(chan struct{})}, nil
}

type stallConn struct {
	net.Conn
	mu       sync.Mutex
	left     int
	deadline time.Time
	closed   chan struct{}
	once     sync.Once
}

func (c *stallConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if len(p) <= c.left {
		c.left -= len(p)
		c.mu.Unlock()
		return c.Conn.Write(p)
	}
	c.left = 0
	c.mu.Unlock()
	for {
		select {
		case <-c.closed:
			return 0, net.ErrClosed
		case <-time.After(10 * time.Millisecond):
		}
		c.mu.Lock()
		d := c.deadline
		c.mu.Unlock()
		if !d.IsZero() && time.Now().After(d) {
			return 0, os.ErrDeadlineExceeded
		}
	}
}

func (c *stallConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

func (c *stallConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *stallConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
