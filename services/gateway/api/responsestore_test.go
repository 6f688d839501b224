package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
)

// postResponse sends a Responses request without failing the test (it
// may run in a goroutine); a transport error comes back as code 0.
func postResponse(ctx context.Context, s *Service, body string, headers map[string]string) httpResult {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.Addr()+"/v1/responses", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return httpResult{body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return httpResult{resp.StatusCode, resp.Header, data}
}

// responseOf decodes a response object answered with 200.
func responseOf(t *testing.T, r httpResult) responseObject {
	t.Helper()
	var o responseObject
	if r.code != http.StatusOK || json.Unmarshal(r.body, &o) != nil || o.Object != "response" {
		t.Fatalf("not a response: %d %s", r.code, r.body)
	}
	return o
}

// keptResponse reads the kept response id through the API.
func keptResponse(t *testing.T, s *Service, id string) responseObject {
	t.Helper()
	return responseOf(t, do(t, "GET", "http://"+s.Addr()+"/v1/responses/"+id, testKey, "", nil))
}

// keptRecords is how many messages the responses bucket holds.
func keptRecords(t *testing.T, b *bus.Bus) uint64 {
	t.Helper()
	kv, err := b.JetStream().KeyValue(context.Background(), b.Topology().Stream(BucketResponses))
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Values()
}

// A request too large to publish is refused as one (400), before its
// response is recorded: not 503 "retry later" because the record could
// not be written.
func TestResponsesTooLargeToPublish(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	startResponder(t, b)
	// Over the event bound (256 KiB), and over a NATS message (1 MiB).
	for _, size := range []int{300 << 10, 1100 << 10} {
		for _, store := range []bool{true, false} {
			body := fmt.Sprintf(`{"input":"a","store":%v,"instructions":%q}`, store, strings.Repeat("x", size))
			r := do(t, "POST", "http://"+s.Addr()+"/v1/responses", testKey, body, nil)
			if r.code != http.StatusBadRequest || errorCode(t, r) != "invalid_request" {
				t.Fatalf("instructions of %d bytes, store %v: %d %.300s", size, store, r.code, r.body)
			}
		}
	}
	if n := inboundCount(t, b); n != 0 {
		t.Fatalf("%d messages published", n)
	}
	if n := keptRecords(t, b); n != 0 {
		t.Fatalf("%d records written for refused requests", n)
	}
	// Inline pictures do not count: the runner moves their bytes out of
	// the event.
	png := "data:image/png;base64,iVBORw0KGgo" + strings.Repeat("A", 400<<10)
	body := `{"input":[{"role":"user","content":[{"type":"input_text","text":"what is this?"},{"type":"input_image","image_url":"` + png + `"}]}]}`
	if r := do(t, "POST", "http://"+s.Addr()+"/v1/responses", testKey, body, nil); r.code != http.StatusOK {
		t.Fatalf("a large inline picture: %d %.300s", r.code, r.body)
	}
}

// A record NATS refuses for its size is 413 in OpenAI's shape, with
// nothing published (here the runner would publish larger events than
// NATS carries).
func TestResponsesTooLargeToKeep(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s, _ := runServiceWith(t, b, nil, func(o *platform.Options) { o.MaxEventBytes = 4 << 20 })
	startResponder(t, b)
	body := fmt.Sprintf(`{"input":"a","instructions":%q}`, strings.Repeat("x", 1100<<10))
	r := do(t, "POST", "http://"+s.Addr()+"/v1/responses", testKey, body, nil)
	if r.code != http.StatusRequestEntityTooLarge || errorCode(t, r) != "request_too_large" {
		t.Fatalf("%d %.300s", r.code, r.body)
	}
	if n := inboundCount(t, b); n != 0 {
		t.Fatalf("%d messages published", n)
	}
}

// If the response store cannot be written, the request is refused with
// 503 and nothing is published; store: false needs no store.
func TestResponsesWithoutTheStore(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	startResponder(t, b)
	ctx := context.Background()
	if err := b.JetStream().DeleteStream(ctx, "KV_"+b.Topology().Stream(BucketResponses)); err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.Addr() + "/v1/responses"
	for _, stream := range []bool{false, true} {
		r := do(t, "POST", base, testKey, fmt.Sprintf(`{"input":"a","stream":%v}`, stream), nil)
		if r.code != http.StatusServiceUnavailable || errorCode(t, r) != "bus_unavailable" {
			t.Fatalf("stream %v: %d %s", stream, r.code, r.body)
		}
	}
	if n := inboundCount(t, b); n != 0 {
		t.Fatalf("%d messages published", n)
	}
	if r := do(t, "POST", base, testKey, `{"input":"a","store":false}`, nil); r.code != http.StatusOK {
		t.Fatalf("store: false: %d %s", r.code, r.body)
	}
}

// A retry with the same Idempotency-Key is the first attempt's response:
// its creation time and parameters stay, and a retry that changes them
// is refused like one that changes the input.
func TestResponsesRetriesKeepTheFirstResponse(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	startResponder(t, b)
	base := "http://" + s.Addr() + "/v1/responses"
	headers := map[string]string{HeaderIdempotencyKey: "order-7"}
	const body = `{"input":"a","model":"m1","metadata":{"a":"1"},"user":"ada","instructions":"be brief"}`
	first := responseOf(t, do(t, "POST", base, testKey, body, headers))
	if first.Status != "completed" {
		t.Fatalf("first %+v", first)
	}
	time.Sleep(1100 * time.Millisecond) // a second later: another created_at
	again := responseOf(t, do(t, "POST", base, testKey, body, headers))
	if again.ID != first.ID || again.CreatedAt != first.CreatedAt || again.Model != "m1" || again.Metadata["a"] != "1" ||
		deref(again.User) != "ada" || deref(again.Instructions) != "be brief" || again.Output[0].Content[0].Text != first.Output[0].Content[0].Text {
		t.Fatalf("retry %+v, want the first %+v", again, first)
	}
	for _, changed := range []string{
		`{"input":"a","model":"m2","metadata":{"a":"1"},"user":"ada","instructions":"be brief"}`,
		`{"input":"a","model":"m1","metadata":{"b":"2"},"user":"ada","instructions":"be brief"}`,
		`{"input":"a","model":"m1","metadata":{"a":"1"},"user":"eve","instructions":"be brief"}`,
		`{"input":"a","model":"m1","metadata":{"a":"1"},"user":"ada","instructions":"be long"}`,
	} {
		r := do(t, "POST", base, testKey, changed, headers)
		if r.code != http.StatusUnprocessableEntity || errorCode(t, r) != "idempotency_key_reused" {
			t.Fatalf("%s: %d %s", changed, r.code, r.body)
		}
	}
	kept := keptResponse(t, s, first.ID)
	if kept.CreatedAt != first.CreatedAt || kept.Model != "m1" || len(kept.Metadata) != 1 || kept.Metadata["a"] != "1" ||
		deref(kept.User) != "ada" || kept.Status != "completed" || kept.CompletedAt == nil || *kept.CompletedAt != *first.CompletedAt {
		t.Fatalf("kept %+v, want the first %+v", kept, first)
	}
	if n := inboundCount(t, b); n != 1 {
		t.Fatalf("%d messages published, want 1", n)
	}
}

// A keyed request and its retry wait together; the first attempt's
// client leaves (the response is recorded incomplete) and the retry gets
// the answer: the kept response is the completed one.
func TestResponsesRetryCompletesTheRecord(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	release := r.hold()
	defer release()
	headers := map[string]string{HeaderIdempotencyKey: "k-left"}
	id := "resp_" + strings.TrimPrefix(testKeyedID("", "k-left"), keyedPrefix)

	ctx, leave := context.WithCancel(context.Background())
	left := make(chan httpResult, 1)
	go func() { left <- postResponse(ctx, s, `{"input":"a"}`, headers) }()
	platformtest.WaitFor(t, "the first attempt to wait", func() bool { return followers(s) == 1 })
	retry := make(chan httpResult, 1)
	go func() { retry <- postResponse(context.Background(), s, `{"input":"a"}`, headers) }()
	platformtest.WaitFor(t, "the retry to wait", func() bool { return followers(s) == 2 })
	leave()
	<-left
	platformtest.WaitFor(t, "the response recorded incomplete", func() bool {
		return keptResponse(t, s, id).Status == "incomplete"
	})
	release()
	got := responseOf(t, <-retry)
	if got.ID != id || got.Status != "completed" {
		t.Fatalf("retry got %s %s", got.ID, got.Status)
	}
	if kept := keptResponse(t, s, id); kept.Status != "completed" || kept.IncompleteDetails != nil ||
		len(kept.Output) != 1 || kept.Output[0].Content[0].Text != "echo: a (turn 1)" {
		t.Fatalf("kept %+v", kept)
	}
}

// A streamed retry with the same Idempotency-Key gets the answer as one
// delta, under the same id; the message is published once and the kept
// response stays the first attempt's.
func TestResponsesKeyedStreamingRetry(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	startResponder(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s, option.WithHeader(HeaderIdempotencyKey, "k-stream"))
	params := responses.ResponseNewParams{Model: "switchboard", Input: inputText("stream me")}
	_, deltas, first := streamEvents(ctx, t, client, params)
	if len(deltas) != 3 || first.Status != responses.ResponseStatusCompleted {
		t.Fatalf("first attempt: %d deltas, %s", len(deltas), first.Status)
	}
	types, deltas, again := streamEvents(ctx, t, client, params)
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}
	if strings.Join(types, ",") != strings.Join(want, ",") || strings.Join(deltas, "") != "echo: stream me (turn 1)" {
		t.Fatalf("retry events %v, deltas %q", types, deltas)
	}
	if again.ID != first.ID || again.CreatedAt != first.CreatedAt || again.OutputText() != first.OutputText() || again.Status != responses.ResponseStatusCompleted {
		t.Fatalf("retry %+v, want %+v", again, first)
	}
	if n := inboundCount(t, b); n != 1 {
		t.Fatalf("%d messages published, want 1", n)
	}
	kept, err := client.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
	if err != nil || kept.Status != responses.ResponseStatusCompleted || kept.CompletedAt != first.CompletedAt {
		t.Fatalf("kept %+v %v", kept, err)
	}
}

// A keyed stream whose answer changed (the turn ran again after its
// worker died mid-stream) ends failed, the client holding part of
// another answer; the response kept is the turn's answer, completed, as
// GET shows it before and after a retry with the same Idempotency-Key
// (which gets that answer).
func TestResponsesStreamWhoseAnswerChangedKeepsTheAnswer(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	const answer = "a different answer, from the turn's second attempt"
	r.mu.Lock()
	r.final = func([]string) string { return answer }
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s, option.WithHeader(HeaderIdempotencyKey, "k-changed"))
	params := responses.ResponseNewParams{Model: "switchboard", Input: inputText("stream me")}
	_, _, first := streamEvents(ctx, t, client, params)
	if first.Status != responses.ResponseStatusFailed || !strings.Contains(first.Error.Message, "interrupted") {
		t.Fatalf("first attempt %s %q, want failed as interrupted", first.Status, first.Error.Message)
	}
	check := func(when string) {
		t.Helper()
		kept, err := client.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
		if err != nil || kept.Status != responses.ResponseStatusCompleted || kept.OutputText() != answer || kept.Error.Message != "" {
			t.Fatalf("%s: kept %s %q %s (%v), want completed with the answer", when, kept.Status, kept.OutputText(), kept.Error.Code, err)
		}
	}
	check("after the stream")
	_, _, again := streamEvents(ctx, t, client, params)
	if again.ID != first.ID || again.Status != responses.ResponseStatusCompleted || again.OutputText() != answer {
		t.Fatalf("retry %s %s %q", again.ID, again.Status, again.OutputText())
	}
	check("after the retry")
}

// A deleted response stays deleted: a retry of its request with the same
// Idempotency-Key is refused rather than making it again.
func TestResponsesDeletedAgainstRetries(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	startResponder(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s, option.WithHeader(HeaderIdempotencyKey, "k-delete"))
	params := responses.ResponseNewParams{Model: "switchboard", Input: inputText("forget me")}
	resp, err := client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Responses.Delete(ctx, resp.ID); err != nil {
		t.Fatal(err)
	}
	before := inboundCount(t, b)
	for _, stream := range []bool{false, true} {
		var err error
		if stream {
			s := client.Responses.NewStreaming(ctx, params)
			for s.Next() {
			}
			err = s.Err()
		} else {
			_, err = client.Responses.New(ctx, params)
		}
		if e := sdkErrorOf(t, err); e.StatusCode != http.StatusConflict || e.Code != "response_deleted" {
			t.Fatalf("retry of a deleted response (stream %v): %d %q", stream, e.StatusCode, e.Code)
		}
	}
	_, err = client.Responses.Get(ctx, resp.ID, responses.ResponseGetParams{})
	if e := sdkErrorOf(t, err); e.StatusCode != http.StatusNotFound {
		t.Fatalf("get after the retry: %d %q", e.StatusCode, e.Code)
	}
	if e := sdkErrorOf(t, client.Responses.Delete(ctx, resp.ID)); e.StatusCode != http.StatusNotFound {
		t.Fatalf("delete again: %d %q", e.StatusCode, e.Code)
	}
	if n := inboundCount(t, b); n != before {
		t.Fatalf("a retry of a deleted response was published (%d → %d)", before, n)
	}
	// Another key is another request.
	other := sdkClient(s, option.WithHeader(HeaderIdempotencyKey, "k-delete-2"))
	if _, err := other.Responses.New(ctx, params); err != nil {
		t.Fatal(err)
	}
}

// Continuing a response without instructions carries its instructions
// on, as Hermes does; instructions of the request's own, even empty ones,
// replace them.
func TestResponsesCarryInstructionsOn(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)
	system := func(t *testing.T) string {
		t.Helper()
		evs := r.received()
		for _, c := range evs[len(evs)-1].GetContext() {
			if c.GetRole() == "system" {
				return c.GetContent()
			}
		}
		return ""
	}
	first, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("one"), Instructions: openai.String("be brief")})
	if err != nil {
		t.Fatal(err)
	}
	prev := first.ID
	for _, q := range []string{"two", "three"} {
		resp, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText(q), PreviousResponseID: openai.String(prev)})
		if err != nil {
			t.Fatal(err)
		}
		if got := system(t); got != "be brief" || resp.Instructions.OfString != "be brief" {
			t.Fatalf("%s: system message %q, instructions %q: want the first's carried on", q, got, resp.Instructions.OfString)
		}
		prev = resp.ID
	}
	for _, c := range []struct{ instructions, want string }{{`"be long"`, "be long"}, {`""`, ""}} {
		body := fmt.Sprintf(`{"input":"four","previous_response_id":%q,"instructions":%s}`, prev, c.instructions)
		o := responseOf(t, do(t, "POST", "http://"+s.Addr()+"/v1/responses", testKey, body, nil))
		if got := system(t); got != c.want || deref(o.Instructions) != c.want {
			t.Fatalf("instructions %s: system message %q, instructions %q", c.instructions, got, deref(o.Instructions))
		}
	}
}

// The responses bucket is bounded: when full, the least recently written
// responses make room (as if expired) rather than refusing new ones.
func TestResponseStoreIsBounded(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	rs := newResponseStore(b, time.Hour, minResponsesMaxBytes)
	ctx := context.Background()
	big := strings.Repeat("x", 100<<10)
	ids := make([]string, 30) // 3 MB of records in a 1 MiB bucket
	for i := range ids {
		ids[i] = fmt.Sprintf("resp_%d", i)
		rec := storedResponse{Owner: "o", Session: "s", Instructions: big, Response: &responseObject{ID: ids[i], Status: "in_progress"}}
		if _, _, _, err := rs.begin(ctx, rec); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if _, found, err := rs.get(ctx, ids[0], "o"); err != nil || found {
		t.Fatalf("the oldest record: found %v, %v", found, err)
	}
	if _, found, err := rs.get(ctx, ids[len(ids)-1], "o"); err != nil || !found {
		t.Fatalf("the newest record: found %v, %v", found, err)
	}
	st, err := b.JetStream().Stream(ctx, "KV_"+b.Topology().Stream(BucketResponses))
	if err != nil {
		t.Fatal(err)
	}
	if cfg := st.CachedInfo().Config; cfg.MaxBytes != minResponsesMaxBytes || cfg.Discard != jetstream.DiscardOld {
		t.Fatalf("bucket max bytes %d, discard %v", cfg.MaxBytes, cfg.Discard)
	}
}

// A response's final state goes over another attempt's unfinished one,
// never over a final answer or a deletion.
func TestResponseRecordEnd(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	rs := newResponseStore(b, time.Hour, minResponsesMaxBytes)
	ctx := context.Background()
	state := func(status string) *responseObject { return &responseObject{ID: "resp_end", Status: status} }
	rec, rev, created, err := rs.begin(ctx, storedResponse{Owner: "o", Session: "s", Response: state("in_progress")})
	if err != nil || !created {
		t.Fatalf("begin: %v %v", created, err)
	}
	stored := func() string {
		t.Helper()
		got, _, found, err := rs.read(ctx, "resp_end")
		switch {
		case err != nil:
			t.Fatal(err)
		case !found:
			return "none"
		case got.Deleted:
			return "deleted"
		}
		return got.Response.Status
	}
	steps := []struct {
		status string // this attempt's final state, written over rec at rev
		want   string
	}{
		{"incomplete", "incomplete"}, // another attempt's client left
		{"completed", "completed"},   // stale, over an unfinished record
		{"failed", "completed"},      // the first final answer stays
		{"incomplete", "completed"},
	}
	for _, step := range steps {
		if err := rs.end(ctx, rec, rev, state(step.status), answerPoint{}); err != nil {
			t.Fatal(err)
		}
		if got := stored(); got != step.want {
			t.Fatalf("after %s: %s, want %s", step.status, got, step.want)
		}
	}
	if err := rs.bury(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := rs.end(ctx, rec, rev, state("completed"), answerPoint{}); err != nil || stored() != "deleted" {
		t.Fatalf("after delete: %s %v", stored(), err)
	}
	if _, _, _, err := rs.begin(ctx, storedResponse{Owner: "o", Response: state("in_progress")}); err != errResponseDeleted {
		t.Fatalf("begin after delete: %v", err)
	}
}

// A response whose answer, with its instructions, passes what a record
// holds (a NATS message) is kept without its instructions, completed;
// one whose answer alone does not fit is kept failed
// (response_too_large) — never in progress. Its request gets the whole
// answer either way.
func TestResponsesTooLargeAnswerIsKeptBounded(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	r.mu.Lock()
	r.answer = func(ev *eventsv1.MessageReceived, _ int) []string {
		if ev.GetText() == "escaped" {
			// Every "<" is 6 bytes in the record's JSON: 1.2 MB.
			return []string{strings.Repeat("<", 200<<10)}
		}
		return []string{strings.Repeat("a", 700<<10)}
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)
	instructions := strings.Repeat("i", 200<<10) // kept twice: 400 KB
	for _, tc := range []struct {
		input, status, code string
		output              bool
	}{
		{"plain", "completed", "", true},
		{"escaped", "failed", "response_too_large", false},
	} {
		answer, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText(tc.input),
			Instructions: openai.String(instructions)})
		if err != nil {
			t.Fatal(err)
		}
		text := answer.OutputText()
		if answer.Status != "completed" || len(text) < 200<<10 {
			t.Fatalf("%s: answered %s with %d bytes", tc.input, answer.Status, len(text))
		}
		kept, err := client.Responses.Get(ctx, answer.ID, responses.ResponseGetParams{})
		if err != nil {
			t.Fatal(err)
		}
		if string(kept.Status) != tc.status || string(kept.Error.Code) != tc.code || (kept.OutputText() == text) != tc.output ||
			kept.Instructions.OfString != "" {
			t.Errorf("%s: kept %s (error %q), output kept %v, %d bytes of instructions; want %s (%q), output kept %v, none",
				tc.input, kept.Status, kept.Error.Code, kept.OutputText() == text, len(kept.Instructions.OfString), tc.status, tc.code, tc.output)
		}
	}
}

// bounded makes an ended response's record smaller a step at a time:
// first its tool calls' results are cut out, then its tool calls' items
// go, the oldest half of the calls at a time (a call's items together),
// then its instructions, then its answer (failed), and then it has
// nothing left to drop; the response the request answers with is not
// changed.
func TestBoundedResponseRecord(t *testing.T) {
	t.Parallel()
	instructions := "be brief"
	done := int64(1764954000)
	o := &responseObject{ID: "resp_1", Status: "completed", CompletedAt: &done, Instructions: &instructions, messageID: "msg_1"}
	result := func(text string) []outputPart { return []outputPart{{Type: "input_text", Text: text}} }
	o.Output = []outputMessage{
		{ID: "fc_1", Type: "function_call", Name: "clock", CallID: "c1"},
		{ID: "fco_2", Type: "function_call_output", CallID: "c1", Output: result("5pm")},
		{ID: "fc_3", Type: "function_call", Name: "read_file", CallID: "c2"},
		{ID: "fco_4", Type: "function_call_output", CallID: "c2", Output: result("the file")},
		{ID: "fc_5", Type: "function_call", Name: "clock", CallID: "c3"},
		{ID: "fco_6", Type: "function_call_output", CallID: "c3", Output: result("5pm")},
		o.message("completed", "It's 5pm."),
	}
	rec := storedResponse{Owner: "k", Instructions: instructions, Response: o}
	var steps []string
	for {
		next, ok := bounded(rec)
		if !ok {
			break
		}
		var items []string
		for _, m := range next.Response.Output {
			switch m.Type {
			case "function_call":
				items = append(items, m.CallID)
			case "function_call_output":
				var text []string
				for _, p := range m.Output {
					text = append(text, p.Text)
				}
				items = append(items, fmt.Sprintf("%s=%q", m.CallID, strings.Join(text, "")))
			default:
				items = append(items, m.Type)
			}
		}
		code := ""
		if next.Response.Error != nil {
			code = next.Response.Error.Code
		}
		steps = append(steps, fmt.Sprintf("%s %v %q %v %s completed_at %v", next.Response.Status, items, next.Instructions, next.Response.Instructions != nil, code,
			next.Response.CompletedAt != nil))
		rec = next
		if len(steps) > 8 {
			break
		}
	}
	want := []string{
		`completed [c1 c1="" c2 c2="" c3 c3="" message] "be brief" true  completed_at true`,
		`completed [c3 c3="" message] "be brief" true  completed_at true`,
		`completed [message] "be brief" true  completed_at true`,
		`completed [message] "" false  completed_at true`,
		// A failed response has no completed_at, as the Responses API's.
		`failed [] "" false response_too_large completed_at false`,
	}
	if strings.Join(steps, "\n") != strings.Join(want, "\n") {
		t.Errorf("steps\n%s\nwant\n%s", strings.Join(steps, "\n"), strings.Join(want, "\n"))
	}
	if o.Status != "completed" || len(o.Output) != 7 || o.Output[1].Output[0].Text != "5pm" || o.Instructions == nil || o.CompletedAt == nil {
		t.Errorf("the answered response changed: %s, %d items", o.Status, len(o.Output))
	}
}

// A response whose record expired while its answer was written is kept
// again as it ends, and bounded as any ended response: one too large
// for a record is kept failed (response_too_large), not lost.
func TestResponseRecordRecreatedBounded(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	rs := newResponseStore(b, time.Hour, minResponsesMaxBytes)
	ctx := context.Background()
	const id = "resp_expired"
	rec, rev, created, err := rs.begin(ctx, storedResponse{Owner: "o", Response: &responseObject{ID: id, Status: "in_progress"}})
	if err != nil || !created {
		t.Fatalf("begin: %v %v", created, err)
	}
	if err := rs.remove(ctx, id); err != nil { // expired meanwhile
		t.Fatal(err)
	}
	o := &responseObject{ID: id, Status: "completed", messageID: "msg_expired"}
	o.Output = []outputMessage{o.message("completed", strings.Repeat("a", 1200<<10))}
	if err := rs.end(ctx, rec, rev, o, answerPoint{turn: "t1", sessionKey: "k"}); err != nil {
		t.Fatal(err)
	}
	got, _, found, err := rs.read(ctx, id)
	switch {
	case err != nil:
		t.Fatal(err)
	case !found:
		t.Fatal("the ended response is not kept")
	case got.Response.Status != "failed" || got.Response.Error == nil || got.Response.Error.Code != responseTooLarge || got.Turn != "t1":
		t.Errorf("kept %s (%+v) after turn %q, want failed (%s) after t1", got.Response.Status, got.Response.Error, got.Turn, responseTooLarge)
	}
	if o.Status != "completed" || len(o.Output) != 1 {
		t.Errorf("the answered response changed: %s, %d items", o.Status, len(o.Output))
	}
}
