package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// eventOf is the inbound event the responder answered for response id.
func (r *responder) eventOf(t *testing.T, id string) *eventsv1.MessageReceived {
	t.Helper()
	var found *eventsv1.MessageReceived
	for _, ev := range r.received() {
		if "resp_"+(&turn{id: ev.GetEventId()}).suffix() == id {
			if found != nil {
				t.Fatalf("two events for %s", id)
			}
			found = ev
		}
	}
	if found == nil {
		t.Fatalf("no event for %s", id)
	}
	return found
}

// A request continuing the latest response of a conversation runs in it;
// one continuing an earlier response runs in a new conversation named
// after its response, which the router opens as a copy of the old one
// up to that response's answer (fork_from); the responses after it keep
// their conversation, and the new one continues as any other.
func TestResponsesBranchOffAnEarlierResponse(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)
	ask := func(t *testing.T, text, previous string, opts ...option.RequestOption) (*responses.Response, string) {
		t.Helper()
		params := responses.ResponseNewParams{Model: "switchboard", Input: inputText(text)}
		if previous != "" {
			params.PreviousResponseID = openai.String(previous)
		}
		var hdr *http.Response
		resp, err := client.Responses.New(ctx, params, append(opts, option.WithResponseInto(&hdr))...)
		if err != nil {
			t.Fatal(err)
		}
		return resp, hdr.Header.Get(HeaderSession)
	}
	type want struct {
		chat string
		fork *eventsv1.ForkFrom
	}
	check := func(t *testing.T, resp *responses.Response, header string, w want) {
		t.Helper()
		ev := r.eventOf(t, resp.ID)
		if ev.GetSource().GetChatId() != w.chat || ev.GetClientSessionId() != w.chat || header != w.chat {
			t.Fatalf("%s ran in %q/%q (header %q), want %q", resp.ID, ev.GetSource().GetChatId(), ev.GetClientSessionId(), header, w.chat)
		}
		if !proto.Equal(ev.GetForkFrom(), w.fork) {
			t.Fatalf("%s fork_from %v, want %v", resp.ID, ev.GetForkFrom(), w.fork)
		}
	}
	from := func(t *testing.T, resp *responses.Response) *eventsv1.ForkFrom {
		ev := r.eventOf(t, resp.ID)
		return &eventsv1.ForkFrom{SessionKey: "agent:main:api:dm:" + ev.GetSource().GetChatId(), TurnId: "turn-" + ev.GetEventId()}
	}

	a, conv := ask(t, "alpha", "")
	bResp, h := ask(t, "bravo", a.ID)
	check(t, bResp, h, want{chat: conv})
	// From A again (a regenerated answer): a branch, named after its
	// response, from A's answer.
	c, h := ask(t, "charlie", a.ID)
	check(t, c, h, want{chat: c.ID, fork: from(t, a)})
	// B is still the latest of the first conversation: no branch.
	d, h := ask(t, "delta", bResp.ID)
	check(t, d, h, want{chat: conv})
	// The branch goes on as any conversation, and branches too.
	e, h := ask(t, "echo", c.ID)
	check(t, e, h, want{chat: c.ID})
	f, h := ask(t, "foxtrot", c.ID)
	check(t, f, h, want{chat: f.ID, fork: from(t, c)})
	// From the start of a conversation continued by name: a branch too.
	named := option.WithHeader(HeaderSession, "named-1")
	g, h := ask(t, "golf", "", named)
	check(t, g, h, want{chat: "named-1"})
	_, _ = ask(t, "hotel", "", named)
	i, h := ask(t, "india", g.ID)
	check(t, i, h, want{chat: i.ID, fork: from(t, g)})
	// The records name the conversations the responses ran in.
	for _, c := range []struct {
		resp    *responses.Response
		session string
	}{{a, conv}, {bResp, conv}, {c, c.ID}, {d, conv}, {e, c.ID}, {f, f.ID}} {
		rec, found, err := s.responses.get(ctx, c.resp.ID, testIdentity())
		if err != nil || !found || rec.Session != c.session || rec.Turn != "turn-"+r.eventOf(t, c.resp.ID).GetEventId() {
			t.Fatalf("record of %s: %+v %v %v, want session %q", c.resp.ID, rec, found, err, c.session)
		}
	}
}

// testIdentity is the identity the test key authenticates as.
func testIdentity() string {
	sum := sha256.Sum256([]byte(testKey))
	return "key-" + hex.EncodeToString(sum[:4])
}

// A retried request that branched off names the same new conversation
// and publishes its message once; two requests continuing one response
// at once: one continues the conversation, the other branches off.
func TestResponsesBranchOnce(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)
	params := func(text, previous string) responses.ResponseNewParams {
		return responses.ResponseNewParams{Model: "switchboard", Input: inputText(text), PreviousResponseID: openai.String(previous)}
	}
	a, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("alpha")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Responses.New(ctx, params("bravo", a.ID)); err != nil {
		t.Fatal(err)
	}
	keyed := option.WithHeader(HeaderIdempotencyKey, "regenerate-1")
	var sessions []string
	var ids []string
	for range 2 {
		var hdr *http.Response
		c, err := client.Responses.New(ctx, params("charlie", a.ID), keyed, option.WithResponseInto(&hdr))
		if err != nil {
			t.Fatal(err)
		}
		ids, sessions = append(ids, c.ID), append(sessions, hdr.Header.Get(HeaderSession))
	}
	if ids[0] != ids[1] || sessions[0] != ids[0] || sessions[1] != ids[0] {
		t.Fatalf("retry: responses %v in %v, want one, in the conversation named after it", ids, sessions)
	}
	if n := inboundCount(t, b); n != 3 {
		t.Fatalf("%d messages published, want 3", n)
	}
	if ev := r.eventOf(t, ids[0]); ev.GetForkFrom().GetTurnId() != "turn-"+r.eventOf(t, a.ID).GetEventId() {
		t.Fatalf("fork_from %v", ev.GetForkFrom())
	}

	// Two at once from the latest response (D): one continues, one
	// branches off.
	d, err := client.Responses.New(ctx, params("delta", ids[0]))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	raced := make([]*responses.Response, 2)
	for i := range raced {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Responses.New(ctx, params("race", d.ID))
			if err != nil {
				t.Error(err)
				return
			}
			raced[i] = resp
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	branched := 0
	for _, resp := range raced {
		switch ev := r.eventOf(t, resp.ID); ev.GetSource().GetChatId() {
		case ids[0]:
		case resp.ID:
			branched++
		default:
			t.Fatalf("raced request in %q", ev.GetSource().GetChatId())
		}
	}
	if branched != 1 {
		t.Fatalf("%d of the two raced requests branched off, want 1", branched)
	}
}

// A response with no answer yet (or that was never waited for to the
// end) cannot be branched from once its conversation went on: there is
// no point to branch off at (409); as the latest it is continued.
func TestResponsesBranchNeedsAnAnswer(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.ReplyTimeout = 300 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)
	named := option.WithHeader(HeaderSession, "waiting")
	// Nobody answers: the response stays incomplete, without a turn.
	_, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("a")}, named)
	if e := sdkErrorOf(t, err); e.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("first: %v", err)
	}
	head, _, err := s.responses.head(ctx, testIdentity(), "waiting")
	if err != nil || head == "" {
		t.Fatalf("head %q, %v", head, err)
	}
	_, err = client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("b")}, named)
	if e := sdkErrorOf(t, err); e.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("second: %v", err)
	}
	_, err = client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("c"), PreviousResponseID: openai.String(head)})
	if e := sdkErrorOf(t, err); e.StatusCode != http.StatusConflict || e.Code != "previous_response_incomplete" || e.Param != "previous_response_id" {
		t.Fatalf("branch from a response without an answer: %d %q %q", e.StatusCode, e.Code, e.Param)
	}
	if n := inboundCount(t, b); n != 2 {
		t.Fatalf("%d messages published, want 2", n)
	}
}

// A conversation's head moves only from what was read (advance), or
// whatever it was (setHead); a request that goes no further gives its
// claim back, unless the head moved on since.
func TestConversationHead(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := &Service{responses: newResponseStore(b, time.Hour, minResponsesMaxBytes), log: slog.Default()}
	rs := s.responses
	ctx := context.Background()
	head := func() string {
		t.Helper()
		id, _, err := rs.head(ctx, "owner", "conv")
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	if id, rev, err := rs.head(ctx, "owner", "conv"); err != nil || id != "" || rev != 0 {
		t.Fatalf("no head yet: %q %d %v", id, rev, err)
	}
	if moved, err := rs.advance(ctx, "owner", "conv", 0, "resp_a"); err != nil || moved {
		t.Fatalf("first head: moved %v, %v", moved, err)
	}
	if moved, err := rs.advance(ctx, "owner", "conv", 0, "resp_x"); err != nil || !moved || head() != "resp_a" {
		t.Fatalf("a second first head: moved %v, %v; head %q", moved, err, head())
	}
	_, rev, _ := rs.head(ctx, "owner", "conv")
	if moved, err := rs.advance(ctx, "owner", "conv", rev, "resp_b"); err != nil || moved || head() != "resp_b" {
		t.Fatalf("advance: moved %v, %v; head %q", moved, err, head())
	}
	if moved, err := rs.advance(ctx, "owner", "conv", rev, "resp_c"); err != nil || !moved || head() != "resp_b" {
		t.Fatalf("advance from a stale read: moved %v, %v; head %q", moved, err, head())
	}
	// Another owner's conversation of the same name is another one.
	if id, _, _ := rs.head(ctx, "other", "conv"); id != "" {
		t.Fatalf("another owner's head %q", id)
	}

	// Given back: to where it was, or to none.
	s.giveBackHead(ctx, &headClaim{owner: "owner", session: "conv", from: "resp_a", to: "resp_b"})
	if got := head(); got != "resp_a" {
		t.Fatalf("given back to %q, want resp_a", got)
	}
	s.giveBackHead(ctx, &headClaim{owner: "owner", session: "conv", from: "", to: "resp_a"})
	if got := head(); got != "" {
		t.Fatalf("given back to %q, want none", got)
	}
	if moved, err := rs.advance(ctx, "owner", "conv", 0, "resp_d"); err != nil || moved {
		t.Fatalf("a head after the last was given back: moved %v, %v", moved, err)
	}
	// Moved on since the claim: left as it is.
	if err := rs.setHead(ctx, "owner", "conv", conversationHead{Response: "resp_e"}); err != nil {
		t.Fatal(err)
	}
	s.giveBackHead(ctx, &headClaim{owner: "owner", session: "conv", from: "resp_a", to: "resp_d"})
	if got := head(); got != "resp_e" {
		t.Fatalf("a head moved on since the claim became %q", got)
	}
}
