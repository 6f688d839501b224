package worker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	agentv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/agent/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

func TestRedactID(t *testing.T) {
	cases := map[string]string{
		"":          "",
		"123456789": "15e2b0d3c338", // sha256("123456789")[:12]
	}
	for in, want := range cases {
		if got := RedactID(in); got != want {
			t.Errorf("RedactID(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSessionContext(t *testing.T) {
	src := &eventsv1.SessionSource{Platform: "telegram", ChatType: "group", ChatName: "Team", ChatId: "-100", UserId: "42", UserName: "Bob"}
	cases := []struct {
		name    string
		redact  bool
		want    []string
		notWant []string
	}{
		{"plain", false, []string{"Platform: telegram", `Chat: group "Team"`, "User: Bob (id 42)"}, nil},
		{"redacted", true, []string{"User: Bob (id " + RedactID("42") + ")"}, []string{"id 42"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := sessionContext(src, tc.redact)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("missing %q in %q", w, got)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(got, w) {
					t.Errorf("unexpected %q in %q", w, got)
				}
			}
		})
	}
}

func TestToLLMClosesDanglingToolCalls(t *testing.T) {
	msgs := []store.Message{
		{Role: "user", Content: "a"},
		{Role: "assistant", ToolCalls: []store.ToolCall{{ID: "1", Name: "x"}, {ID: "2", Name: "y"}}},
		{Role: "tool", ToolCallID: "1", Content: "r1"},
		// turn abandoned here: call 2 never got a result
		{Role: "user", Content: "b"},
		{Role: "tool", ToolCallID: "zzz", Content: "orphan"},
	}
	out := toLLM("sum", msgs)
	var roles []string
	for _, m := range out {
		roles = append(roles, m.Role)
	}
	if got := strings.Join(roles, ","); got != "user,user,assistant,tool,tool,user" {
		t.Fatalf("roles %s", got)
	}
	if out[4].ToolCallID != "2" || out[0].Content != "[Summary of the earlier conversation]\nsum" {
		t.Errorf("out %+v", out)
	}
}

func TestPendingCalls(t *testing.T) {
	msgs := []store.Message{
		{Role: llm.RoleAssistant, ToolCalls: []store.ToolCall{{ID: "1"}, {ID: "2"}, {ID: "3"}}},
		{Role: llm.RoleTool, ToolCallID: "2"},
	}
	got := pendingCalls(msgs)
	if len(got) != 2 || got[0].ID != "1" || got[1].ID != "3" {
		t.Errorf("pending %v", got)
	}
	if pendingCalls(append(msgs, store.Message{Role: llm.RoleAssistant, Content: "done"})) != nil {
		t.Error("final answer has no pending calls")
	}
}

func TestBackendFor(t *testing.T) {
	s := &Service{llm: Backend{Kind: "openai", Model: "m1"}, byKind: map[string]Backend{"anthropic": {Kind: "anthropic", Model: "c1"}}}
	cases := []struct{ override, kind, model string }{
		{"", "openai", "m1"},
		{"gpt-x", "openai", "gpt-x"},
		{"anthropic:claude-9", "anthropic", "claude-9"},
		{"anthropic:", "anthropic", "c1"},
		{"vendor/model:free", "openai", "vendor/model:free"},
	}
	for _, tc := range cases {
		b, m := s.backendFor(tc.override)
		if b.Kind != tc.kind || m != tc.model {
			t.Errorf("%q → %s %s", tc.override, b.Kind, m)
		}
	}
}

// Steering is taken while the turn can still read it: pending text keeps
// the turn going, and once the answer is decided (none pending) or the
// turn ends, more is refused, so the router queues it instead of telling
// the user it was added.
func TestSteeringClosesWhenTheAnswerIsDecided(t *testing.T) {
	steer := func(text string) *turnsv1.TurnControlRequested {
		return &turnsv1.TurnControlRequested{Action: turnsv1.ControlAction_CONTROL_ACTION_STEER, Text: text}
	}
	c := newControl(nil)
	if !c.apply(steer("a")) {
		t.Fatal("steering refused while the turn runs")
	}
	if got := steerTexts(c.takeSteerOrClose()); strings.Join(got, ",") != "a" {
		t.Fatalf("pending steering %q", got)
	}
	if !c.apply(steer("b")) {
		t.Fatal("steering refused after pending text kept the turn going")
	}
	_ = c.takeSteer()
	if got := c.takeSteerOrClose(); len(got) != 0 {
		t.Fatalf("pending steering %q, want none", got)
	}
	if c.apply(steer("c")) {
		t.Fatal("steering taken after the answer was decided")
	}
	if !c.apply(&turnsv1.TurnControlRequested{Action: turnsv1.ControlAction_CONTROL_ACTION_STOP}) {
		t.Fatal("a stop refused")
	}
	c2 := newControl(nil)
	c2.closeSteer()
	if c2.apply(steer("d")) {
		t.Fatal("steering taken by an ended turn")
	}
}

// Steering names the queued message that carries it: the turn takes a
// message once (a second request for it is answered as taken, and adds
// nothing), and declines one that is among its own inputs (the turn it
// was meant for ended, and the router started this one with it), so the
// model never reads it twice.
func TestSteeringOfAQueuedMessageIsTakenOnce(t *testing.T) {
	steer := func(text, queued string) *turnsv1.TurnControlRequested {
		return &turnsv1.TurnControlRequested{Action: turnsv1.ControlAction_CONTROL_ACTION_STEER, Text: text, QueuedEventId: queued}
	}
	cases := []struct {
		name  string
		sent  []*turnsv1.TurnControlRequested
		took  []bool
		texts string
		ids   string
	}{
		{"twice", []*turnsv1.TurnControlRequested{steer("a", "e1"), steer("a", "e1")}, []bool{true, true}, "a", "e1"},
		{"an input", []*turnsv1.TurnControlRequested{steer("b", "in1"), steer("c", "e2")}, []bool{false, true}, "c", "e2"},
		{"none queued", []*turnsv1.TurnControlRequested{steer("d", ""), steer("d", "")}, []bool{true, true}, "d,d", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newControl([]string{"in1"})
			for i, m := range tc.sent {
				if got := c.apply(m); got != tc.took[i] {
					t.Fatalf("request %d taken %v, want %v", i, got, tc.took[i])
				}
			}
			notes := c.takeSteer()
			if got := strings.Join(steerTexts(notes), ","); got != tc.texts {
				t.Errorf("texts %q, want %q", got, tc.texts)
			}
			if got := strings.Join(steerQueued(notes), ","); got != tc.ids {
				t.Errorf("queued %q, want %q", got, tc.ids)
			}
		})
	}
}

// An answer to an approval is taken only while a tool call waits for one,
// once: the router tells the user nothing is pending otherwise.
func TestApprovalAnswerTakenOnlyWhileAwaited(t *testing.T) {
	give := func(c *control, action turnsv1.ControlAction) bool {
		return c.apply(&turnsv1.TurnControlRequested{Action: action})
	}
	approve, deny := turnsv1.ControlAction_CONTROL_ACTION_APPROVE, turnsv1.ControlAction_CONTROL_ACTION_DENY
	c := newControl(nil)
	if give(c, approve) {
		t.Fatal("an approval taken while nothing waits for one")
	}
	c.await(true, "call-1")
	if !give(c, deny) {
		t.Fatal("a denial refused while a tool call waits")
	}
	if give(c, approve) {
		t.Fatal("a second answer taken for one wait")
	}
	if got := <-c.approvals; got.approved {
		t.Fatal("the denial arrived as an approval")
	}
	c.await(false, "")
	if give(c, approve) {
		t.Fatal("an approval taken after the wait ended")
	}
	c.await(true, "call-2")
	select {
	case got := <-c.approvals:
		t.Fatalf("a new wait starts with an old answer (%+v)", got)
	default:
	}
	// A pressed button names its call: an old prompt's answers no other.
	if c.apply(&turnsv1.TurnControlRequested{Action: approve, ToolCallId: "call-1"}) {
		t.Fatal("an answer for an earlier call taken by the call that waits")
	}
	if !c.apply(&turnsv1.TurnControlRequested{Action: approve, ToolCallId: "call-2"}) {
		t.Fatal("an answer naming the call that waits refused")
	}
}

func TestUserKeyIsTheSessionOutsideDirectChats(t *testing.T) {
	const key = "agent:main:telegram:group:-100:u2"
	tests := []struct {
		name string
		src  *eventsv1.SessionSource
		want string
	}{
		{"direct chat", &eventsv1.SessionSource{Platform: "telegram", ChatType: "dm", ChatId: "9", UserId: "u1"}, "telegram:u1"},
		{"no chat type", &eventsv1.SessionSource{Platform: "api", UserId: "key-1"}, "api:key-1"},
		{"stable id first", &eventsv1.SessionSource{Platform: "signal", ChatType: "dm", UserId: "+1555", UserIdAlt: "uuid-1"}, "signal:uuid-1"},
		{"group", &eventsv1.SessionSource{Platform: "telegram", ChatType: "group", ChatId: "-100", UserId: "u2"}, "session:" + key},
		{"thread", &eventsv1.SessionSource{Platform: "slack", ChatType: "thread", ChatId: "C1", ThreadId: "1.2", UserId: "u3"}, "session:" + key},
		{"no user", &eventsv1.SessionSource{Platform: "telegram", ChatType: "dm"}, ""},
		// The API's user_id is the authenticated key; the request's user
		// field is only the display name and keys nothing.
		{"api display name", &eventsv1.SessionSource{Platform: "api", ChatType: "dm", ChatId: "s", UserId: "key-1", UserName: "key:alice"}, "api:key-1"},
		{"api memory scope", &eventsv1.SessionSource{Platform: "api", ChatType: "dm", UserId: "key:alice", UserIdAlt: "api-server-ab12"}, "api:api-server-ab12"},
		{"webhook route", &eventsv1.SessionSource{Platform: "webhook", ChatType: "dm", ChatId: "deploys", UserId: "webhook:deploys"}, "webhook:webhook:deploys"},
	}
	for _, tt := range tests {
		req := &turnsv1.TurnRequested{SessionKey: key, Inputs: []*eventsv1.MessageReceived{{Source: tt.src}}}
		if got := userKey(req); got != tt.want {
			t.Errorf("%s: userKey = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestApprovalScopes(t *testing.T) {
	tests := []struct {
		action turnsv1.ControlAction
		text   string
		want   answer
	}{
		{turnsv1.ControlAction_CONTROL_ACTION_APPROVE, "", answer{approved: true}},
		{turnsv1.ControlAction_CONTROL_ACTION_APPROVE, "session", answer{approved: true, scope: store.ApproveSession}},
		{turnsv1.ControlAction_CONTROL_ACTION_APPROVE, "SES", answer{approved: true, scope: store.ApproveSession}},
		{turnsv1.ControlAction_CONTROL_ACTION_APPROVE, "always", answer{approved: true, scope: store.ApproveUser}},
		{turnsv1.ControlAction_CONTROL_ACTION_APPROVE, "all permanently", answer{approved: true, scope: store.ApproveUser}},
		{turnsv1.ControlAction_CONTROL_ACTION_APPROVE, "please", answer{approved: true}},
		{turnsv1.ControlAction_CONTROL_ACTION_APPROVE, "always session", answer{approved: true, scope: store.ApproveUser}},
		// As Hermes's /deny [all] [reason]: any text but a first "all" is
		// the reason the model is told.
		{turnsv1.ControlAction_CONTROL_ACTION_DENY, "", answer{}},
		{turnsv1.ControlAction_CONTROL_ACTION_DENY, "always", answer{reason: "always"}},
		{turnsv1.ControlAction_CONTROL_ACTION_DENY, "all", answer{all: true}},
		{turnsv1.ControlAction_CONTROL_ACTION_DENY, "All not   now", answer{all: true, reason: "not now"}},
	}
	for _, tt := range tests {
		if got := answerOf(&turnsv1.TurnControlRequested{Action: tt.action, Text: tt.text}); got != tt.want {
			t.Errorf("%v %q: %+v, want %+v", tt.action, tt.text, got, tt.want)
		}
	}
}

// noAgent is an external agent that is never reached.
type noAgent struct{}

func (noAgent) RunTurn(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[agentv1.RunTurnRequest, agentv1.RunTurnResponse], error) {
	return nil, errors.New("not reached")
}

// /undo and /compress are done by the worker itself, with an external
// agent too (it is never started for them): like the built-in loop's,
// such a turn refuses steering from the start, so the router queues it,
// instead of taking text that nobody reads. /retry runs the agent.
func TestTranscriptCommandsOfAnExternalAgentDeclineSteering(t *testing.T) {
	s := &Service{log: slog.New(slog.DiscardHandler), agent: noAgent{}, now: time.Now}
	for cmd, declined := range map[string]bool{"undo 2": true, "compress": true, "retry": false} {
		req := &turnsv1.TurnRequested{TurnId: "t1", SessionKey: "k",
			Inputs: []*eventsv1.MessageReceived{{TranscriptCommand: cmd}}}
		r := newTurnRun(s, req, 1, 0)
		took := r.ctl.apply(&turnsv1.TurnControlRequested{Action: turnsv1.ControlAction_CONTROL_ACTION_STEER, Text: "and by train"})
		if took == declined {
			t.Errorf("/%s: steering taken %v, want %v", cmd, took, !declined)
		}
	}
}
