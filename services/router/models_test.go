package router

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// countedLister is the real OpenAI client's model list, counting its
// reads of the provider.
type countedLister struct {
	*llm.OpenAI
	reads atomic.Int32
}

func (c *countedLister) Models(ctx context.Context) ([]string, error) {
	c.reads.Add(1)
	return c.OpenAI.Models(ctx)
}

// Without agent.models a bare /model offers the provider's own list, as
// Hermes reads an OpenAI-compatible endpoint's /models: read once
// (GET /v1/models through the OpenAI client, with the key) and kept in
// Redis, so a second picker and the presses read no provider; a press
// is read against the list kept.
func TestModelPickerFromProvider(t *testing.T) {
	t.Parallel()
	fake := fakellm.New(fakellm.Config{APIKey: "sk-test", Models: []string{"gpt-4o", "gpt-4o-mini", "vendor/o3"}})
	if err := fake.Start(""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Close() })
	e := newEnv(t)
	e.provider = Provider{Kind: "openai", Model: "gpt-4o"}
	lister := &countedLister{OpenAI: llm.NewOpenAI(llm.OpenAIConfig{APIKey: "sk-test", BaseURL: fake.URL() + "/v1"})}
	e.models = lister
	e.startRouter(testConfig(), nil, nil)

	e.publish(dm("alice", "/model"))
	waitFor(t, "the picker", func() bool { return len(e.noticeEvents("alice")) == 1 })
	want := [][]string{
		{"✓ gpt-4o|/model gpt-4o|", "gpt-4o-mini|/model gpt-4o-mini|"},
		{"o3|/model vendor/o3|"},
		{"✗ Cancel|/model|x"},
	}
	if got := choices(e.noticeEvents("alice")[0].GetPicker()); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("picker %q, want the provider's models %q", got, want)
	}
	ev := discordDM("alice", "/model")
	e.publish(ev)
	waitFor(t, "the discord picker", func() bool { return len(e.noticeEvents("alice")) == 2 })
	if got := menus(e.noticeEvents("alice")[1].GetPicker())[0]; got != "Choose a provider...: OpenAI-compatible (3 models)|/model|v|current|false" {
		t.Fatalf("discord picker's provider %q", got)
	}
	e.publish(press("alice", "/model vendor/o3", "card-1", ""))
	waitFor(t, "the switch", func() bool { return len(e.noticeEvents("alice")) == 3 })
	if got := e.noticeEvents("alice")[2].GetText(); !strings.HasPrefix(got, "Model switched to `vendor/o3`") {
		t.Fatalf("press answered %q", got)
	}
	if n := lister.reads.Load(); n != 1 {
		t.Fatalf("the provider's list was read %d times, want once for two pickers and a press", n)
	}
}

// When the provider's list cannot be read (no server, a refused key),
// a bare /model still answers: the session's model and that the list
// could not be read, no picker; /model <name> still switches.
func TestModelListUnreadable(t *testing.T) {
	t.Parallel()
	fake := fakellm.New(fakellm.Config{APIKey: "sk-right"})
	if err := fake.Start(""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Close() })
	e := newEnv(t)
	e.provider = Provider{Kind: "openai", Model: "gpt-4o"}
	e.models = llm.NewOpenAI(llm.OpenAIConfig{APIKey: "sk-wrong", BaseURL: fake.URL() + "/v1"})
	e.startRouter(testConfig(), nil, nil)
	want := modelSentence(sessionstore.Session{}) + "\n\n" + modelListFailed
	if got := e.ask("alice", "/model"); got != want {
		t.Fatalf("/model answered %q, want %q", got, want)
	}
	if n := e.noticeEvents("alice")[0]; n.GetPicker() != nil {
		t.Fatalf("a picker without a list: %v", n.GetPicker())
	}
	if got := e.ask("alice", "/model gpt-4o-mini"); got != "This session now uses gpt-4o-mini." {
		t.Fatalf("/model gpt-4o-mini answered %q", got)
	}
}

// Hermes's /model flags change nothing here and say why; before, a bare
// "--global" passed for a model name and became the session's model.
func TestModelFlagsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.provider = Provider{Kind: "openai", Model: "gpt-4o"}
	e.startRouter(testConfig(), nil, nil)
	for _, tt := range []struct{ ask, want string }{
		{"/model --global", "⚠️ `--global` is not available here"},
		{"/model gpt-4o-mini --global", "⚠️ `--global` is not available here"},
		{"/model gpt-4o-mini --provider openrouter", "⚠️ `--provider` is not available here"},
		{"/model --provider=openrouter", "⚠️ `--provider` is not available here"},
		{"/model --fast", "That doesn't look like a model name."},
	} {
		if got := e.ask("alice", tt.ask); !strings.HasPrefix(got, tt.want) {
			t.Errorf("%s answered %q, want it to begin %q", tt.ask, got, tt.want)
		}
	}
	var model string
	if err := e.db.QueryRow(context.Background(), `SELECT model_override FROM sessions WHERE session_key LIKE '%alice%'`).Scan(&model); err != nil || model != "" {
		t.Fatalf("the session's model is %q (%v), want none set", model, err)
	}
	if got := e.ask("alice", "/model gpt-4o-mini"); got != "This session now uses gpt-4o-mini." {
		t.Fatalf("/model gpt-4o-mini answered %q", got)
	}
}

// /whoami says who the gateway thinks the sender is, the second id a
// platform gives (Signal's UUID) included when there is one.
func TestWhoami(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	if got, want := e.ask("alice", "/whoami"), "Platform: telegram\nUser id: alice\nName: alice\nChat: chat-alice (dm)\n"; !strings.HasPrefix(got, want) ||
		strings.Contains(got, "Alternate id") || !strings.HasSuffix(got, "\nRole: user\nSession key: agent:main:telegram:dm:chat-alice") {
		t.Errorf("/whoami answered %q", got)
	}
	ev := dm("bob", "/whoami")
	ev.Source.UserIdAlt = "uuid-b0b"
	before := len(e.noticesTo("bob"))
	e.publish(ev)
	waitFor(t, "the answer to bob", func() bool { return len(e.noticesTo("bob")) > before })
	if got := e.noticesTo("bob")[before]; !strings.HasPrefix(got, "Platform: telegram\nUser id: bob\nAlternate id: uuid-b0b\nName: bob\n") {
		t.Errorf("/whoami with an alternate id answered %q", got)
	}
}

// /whoami shows no field it does not know: an API request that gave no
// OpenAI "user" has no name, and the answer has no empty Name line.
func TestWhoamiOnAPIWithoutAName(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	e.publish(apiMessage("/whoami"))
	waitFor(t, "the answer", func() bool { return len(e.noticesTo("client")) > 0 })
	got := e.noticesTo("client")[0]
	if !strings.HasPrefix(got, "Platform: api\nUser id: client\nChat: chat-client (dm)\nAuthorized by: ") {
		t.Errorf("/whoami over the API answered %q", got)
	}
	for _, line := range strings.Split(got, "\n") {
		if k, v, _ := strings.Cut(line, ":"); strings.TrimSpace(v) == "" {
			t.Errorf("/whoami over the API has an empty %s line: %q", k, got)
		}
	}
}
