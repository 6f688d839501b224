package router

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/memorygate"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// pickerPress is user's press of a picker's button that carries data.
func pickerPress(user, card, data string) *eventsv1.MessageReceived {
	ev := press(user, "/model", card, "")
	ev.ButtonPress.Data = data
	return ev
}

// choices lists a picker's buttons row by row as "label|command|data".
func choices(p *deliveryv1.Picker) [][]string {
	var out [][]string
	for _, r := range p.GetRows() {
		var row []string
		for _, c := range r.GetChoices() {
			row = append(row, c.GetLabel()+"|"+c.GetCommand()+"|"+c.GetData())
		}
		out = append(out, row)
	}
	return out
}

// A bare /model on Telegram with agent.models set shows Hermes's picker:
// the models two a row, eight a page, the current one marked, pages and
// cancel. A press of a page replaces the picker with that page; a press
// of a model switches the session's model once (a redelivery and a later
// press change nothing) and replaces the picker with Hermes's
// confirmation; a model no longer offered is "expired"; cancel says so;
// a non-admin's press is refused as typing is.
func TestModelPicker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.provider = Provider{Kind: "openai", Model: "gpt-4o"}
	cfg := testConfig()
	cfg.Admins = map[string][]string{"telegram": {"alice"}}
	long := "org/" + strings.Repeat("x", 60)
	cfg.Models = []string{"gpt-4o", "gpt-4o-mini", "openai/o3", "o4-mini", "m5", "m6", "m7", "m8", long}
	e.startRouter(cfg, nil, nil)

	e.publish(dm("alice", "/model"))
	waitFor(t, "the picker", func() bool { return len(e.noticeEvents("alice")) == 1 })
	n := e.noticeEvents("alice")[0]
	wantText := "⚙ **Model Configuration**\n\nThis session uses the default model. /model <name> changes it; /model default goes back.\n" +
		"Provider: **OpenAI-compatible** (1–8 of 9)\nSelect a model:"
	if n.GetText() != wantText || n.GetReplacesMessageId() != "" || n.GetFormat() != deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN {
		t.Fatalf("picker text %q replacing %q, want %q", n.GetText(), n.GetReplacesMessageId(), wantText)
	}
	want := [][]string{
		{"✓ gpt-4o|/model gpt-4o|", "gpt-4o-mini|/model gpt-4o-mini|"},
		{"o3|/model openai/o3|", "o4-mini|/model o4-mini|"},
		{"m5|/model m5|", "m6|/model m6|"},
		{"m7|/model m7|", "m8|/model m8|"},
		{"1/2||", "Next ▶|/model|p1"},
		{"✗ Cancel|/model|x"},
	}
	if got := choices(n.GetPicker()); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("picker %q, want %q", got, want)
	}

	e.publish(pickerPress("alice", "card-1", "p1"))
	waitFor(t, "page 2", func() bool { return len(e.noticeEvents("alice")) == 2 })
	n = e.noticeEvents("alice")[1]
	sum := modelSum(long)
	want = [][]string{
		{strings.Repeat("x", 35) + "...|/model " + long + "|m8-" + sum},
		{"◀ Prev|/model|p0", "2/2||"},
		{"✗ Cancel|/model|x"},
	}
	if got := choices(n.GetPicker()); n.GetReplacesMessageId() != "card-1" || !strings.Contains(n.GetText(), "(9–9 of 9)") || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("page 2 %q replacing %q with %q, want %q replacing card-1", n.GetText(), n.GetReplacesMessageId(), got, want)
	}

	// A non-admin's press is refused as the typed command is; the picker
	// stays for those who may.
	e.publish(press("bob", "/model gpt-4o-mini", "card-1", ""))
	waitFor(t, "the refusal", func() bool { return len(e.noticeEvents("bob")) == 1 })
	if n := e.noticeEvents("bob")[0]; n.GetReplacesMessageId() != "" || !strings.Contains(n.GetText(), "reserved for admins") {
		t.Fatalf("bob's press answered %q replacing %q", n.GetText(), n.GetReplacesMessageId())
	}

	first := pickerPress("alice", "card-1", "m8-"+sum)
	e.publish(first)
	waitFor(t, "the switch", func() bool { return len(e.noticeEvents("alice")) == 3 })
	n = e.noticeEvents("alice")[2]
	wantText = "Model switched to `" + long + "`\nProvider: OpenAI-compatible\n_(this session only — /model default goes back)_"
	if n.GetText() != wantText || n.GetReplacesMessageId() != "card-1" || n.GetPicker() != nil {
		t.Fatalf("answer %q replacing %q with %v, want %q replacing card-1 without buttons", n.GetText(), n.GetReplacesMessageId(), n.GetPicker(), wantText)
	}
	// The same press again, and a later press on the answered picker.
	e.publishID(first, "redelivered-"+first.EventId)
	e.publish(press("alice", "/model gpt-4o-mini", "card-1", ""))
	waitFor(t, "inbound drained", e.inboundDrained)
	if got := e.noticeEvents("alice"); len(got) != 3 {
		t.Fatalf("%d notices after a redelivery and a late press, want the first answer alone: %v", len(got), got[3:])
	}
	if got := e.ask("alice", "/status"); !strings.Contains(got, "Model: "+long+"\n") {
		t.Fatalf("status %q, want the model pressed", got)
	}

	// A new picker marks the session's model.
	e.publish(pickerPress("alice", "card-2", "p1"))
	waitFor(t, "page 2 of another picker", func() bool { return len(e.noticeEvents("alice")) == 5 })
	if got := e.noticeEvents("alice")[4].GetPicker().GetRows()[0].GetChoices()[0].GetLabel(); !strings.HasPrefix(got, "✓ ") {
		t.Fatalf("the session's model shows %q, want it marked", got)
	}

	for i, tt := range []struct{ ev *eventsv1.MessageReceived }{
		{press("alice", "/model gpt-5", "card-3", "")},  // not offered (any more)
		{pickerPress("alice", "card-4", "m1-00000000")}, // another model took its place
		{pickerPress("alice", "card-5", "m99-"+sum)},    // past the list's end
		{pickerPress("alice", "card-6", "zz")},          // data the router does not know
	} {
		e.publish(tt.ev)
		waitFor(t, "the expired picker", func() bool { return len(e.noticeEvents("alice")) == 6+i })
		n := e.noticeEvents("alice")[5+i]
		if card := "card-" + strconv.Itoa(3+i); n.GetText() != pickerExpired || n.GetReplacesMessageId() != card {
			t.Fatalf("press %d answered %q replacing %q, want the expired text replacing %s", i, n.GetText(), n.GetReplacesMessageId(), card)
		}
	}
	e.publish(pickerPress("alice", "card-7", "x"))
	waitFor(t, "the cancel", func() bool { return len(e.noticeEvents("alice")) == 10 })
	if n := e.noticeEvents("alice")[9]; n.GetText() != pickerCancelled || n.GetReplacesMessageId() != "card-7" || n.GetPicker() != nil {
		t.Fatalf("cancel answered %q replacing %q", n.GetText(), n.GetReplacesMessageId())
	}
	if got := e.ask("alice", "/status"); !strings.Contains(got, "Model: "+long+"\n") {
		t.Fatalf("status %q, want the model unchanged by expired presses and cancel", got)
	}
}

// Where no picker renders, a bare /model lists agent.models as Hermes's
// text fallback does; without agent.models it says what it said before.
func TestModelWithoutPicker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.provider = Provider{Kind: "anthropic"}
	cfg := testConfig()
	cfg.Models = []string{"claude-sonnet-4-5", "claude-haiku-4-5"}
	e.startRouter(cfg, nil, nil)
	ev := dm("alice", "/model")
	ev.Source.Platform = "signal"
	e.publish(ev)
	waitFor(t, "the list", func() bool { return len(e.noticeEvents("alice")) == 1 })
	n := e.noticeEvents("alice")[0]
	want := "This session uses the default model. /model <name> changes it; /model default goes back.\n\n" +
		"**Anthropic** (current):\n  `claude-sonnet-4-5`, `claude-haiku-4-5`\n\n`/model <name>` — switch model"
	if n.GetText() != want || n.GetPicker() != nil {
		t.Fatalf("signal's /model %q with picker %v, want %q", n.GetText(), n.GetPicker(), want)
	}

	e2 := newEnv(t)
	e2.startRouter(testConfig(), nil, nil)
	if got := e2.ask("bob", "/model"); got != "This session uses the default model. /model <name> changes it; /model default goes back." {
		t.Fatalf("/model without agent.models: %q", got)
	}
	if n := e2.noticeEvents("bob")[0]; n.GetPicker() != nil {
		t.Fatalf("a picker without agent.models: %v", n.GetPicker())
	}
}

// FuzzPickerData: any data a press carries is read without panicking; a
// model is read only where agent.models has it at the index the data
// names, with its checksum, and a page only from its canonical form.
// The same data read as a pending memory writes list's button (memory.go)
// is one only in its canonical form, "<a|r>-<id|all>.<owner tag>", which
// a button can carry, and never also a picker's.
func FuzzPickerData(f *testing.F) {
	models := []string{"gpt-4o", "openai/o3", "org/" + strings.Repeat("x", 60)}
	tag := ownerTag("agent:main:telegram:group:-100:alice")
	for _, s := range []string{"x", "p0", "p12", "p01", "p-1", "m0-" + modelSum("gpt-4o"), "m2-" + modelSum(models[2]), "m1-00000000", "m9-" + modelSum("gpt-4o"), "m01-" + modelSum("openai/o3"), "zz", "", "v", "b", "vv", "b." + tag,
		"x." + tag, "p1." + tag, "m2-" + modelSum(models[2]) + "." + tag, "x.ABCDEF12", "x.", ".x", "p1." + tag + "." + tag,
		"a-abc12345." + tag, "r-all." + tag, "a-all", "a-ABC12345." + tag, "r-abc1234." + tag, "x-all." + tag, "a-all." + tag + ".", "a--all." + tag} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, full string) {
		if md, ok := parseMemoryData(full); ok {
			act := "r"
			if md.approve {
				act = "a"
			}
			if want := act + "-" + md.target + "." + md.owner; full != want || !isTag(md.owner) || md.target != "all" && !memorygate.ValidID(md.target) {
				t.Fatalf("%q read as memory button %+v", full, md)
			}
			if platform.PickerPayload(&deliveryv1.PickerChoice{Command: "/memory", Data: full}, 0) == "" {
				t.Fatalf("memory button data %q cannot ride a button", full)
			}
			if parsePickerData(full, models).kind != 0 {
				t.Fatalf("%q read as a memory button and a picker's", full)
			}
		}
		d := parsePickerData(full, models)
		data := full
		if d.owner != "" {
			if !isTag(d.owner) || !strings.HasSuffix(full, "."+d.owner) {
				t.Fatalf("%q read with owner tag %q", full, d.owner)
			}
			data = strings.TrimSuffix(full, "."+d.owner)
		}
		switch d.kind {
		case 0:
			if d.model != "" || d.page != 0 {
				t.Fatalf("%q: unknown data read as %+v", data, d)
			}
		case 'x', 'v', 'b':
			if data != string(d.kind) {
				t.Fatalf("%q read as %q", data, d.kind)
			}
		case 'p':
			if "p"+strconv.Itoa(d.page) != data || d.page < 0 {
				t.Fatalf("%q read as page %d", data, d.page)
			}
		case 'm':
			if d.model == "" {
				return
			}
			found := false
			for i, id := range models {
				found = found || id == d.model && data == fmt.Sprintf("m%d-%s", i, modelSum(id))
			}
			if !found {
				t.Fatalf("%q read as model %q", data, d.model)
			}
		default:
			t.Fatalf("%q read as kind %q", data, d.kind)
		}
	})
}

// groupMsg is user's message in the group chat-grp (sessions per user,
// the default).
func groupMsg(user, text string) *eventsv1.MessageReceived {
	ev := dm(user, text)
	ev.Source.ChatType, ev.Source.ChatId = "group", "chat-grp"
	return ev
}

// In a group whose sessions are per user, a picker belongs to whoever
// opened it, as Hermes's (its callback switches the opener's session):
// Bob's press of Alice's picker pages, switches or cancels Alice's
// conversation's model, not Bob's; a tag the router no longer knows is
// an expired picker.
func TestModelPickerInPerUserGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.provider = Provider{Kind: "openai", Model: "gpt-4o"}
	cfg := testConfig()
	cfg.Models = []string{"gpt-4o", "gpt-4o-mini", "o3", "o4-mini", "m5", "m6", "m7", "m8", "m9"}
	e.startRouter(cfg, nil, nil)
	ctx := context.Background()
	store := sessionstore.New(e.db)

	e.publish(groupMsg("alice", "/model"))
	waitFor(t, "alice's picker", func() bool { return len(e.noticeEvents("grp")) == 1 })
	aliceKey := "agent:main:telegram:group:chat-grp:alice"
	tag := ownerTag(aliceKey)
	rows := choices(e.noticeEvents("grp")[0].GetPicker())
	if got, want := rows[0][1], "gpt-4o-mini|/model gpt-4o-mini|m1-"+modelSum("gpt-4o-mini")+"."+tag; got != want {
		t.Fatalf("a model's button %q, want %q", got, want)
	}
	if got, want := rows[len(rows)-1][0], "✗ Cancel|/model|x."+tag; got != want {
		t.Fatalf("cancel %q, want %q", got, want)
	}
	bobPress := func(card, data string) *eventsv1.MessageReceived {
		ev := pickerPress("bob", card, data)
		ev.Source.ChatType, ev.Source.ChatId = "group", "chat-grp"
		return ev
	}
	for i, tt := range []struct {
		name, card, data string
		check            func(t *testing.T, n *repliesv1.Notice)
	}{
		{"bob pages alice's picker", "card-1", "p1." + tag, func(t *testing.T, n *repliesv1.Notice) {
			if got := choices(n.GetPicker()); n.GetReplacesMessageId() != "card-1" || got[0][0] != "m9|/model m9|m8-"+modelSum("m9")+"."+tag {
				t.Errorf("page 2 replacing %q: %q", n.GetReplacesMessageId(), got)
			}
		}},
		{"bob picks a model on alice's picker", "card-1", "m1-" + modelSum("gpt-4o-mini") + "." + tag, func(t *testing.T, n *repliesv1.Notice) {
			if !strings.HasPrefix(n.GetText(), "Model switched to `gpt-4o-mini`") || n.GetReplacesMessageId() != "card-1" {
				t.Errorf("switch answered %q replacing %q", n.GetText(), n.GetReplacesMessageId())
			}
		}},
		{"a picker whose owner is unknown", "card-2", "x.0badf00d", func(t *testing.T, n *repliesv1.Notice) {
			if n.GetText() != pickerExpired || n.GetReplacesMessageId() != "card-2" {
				t.Errorf("unknown owner answered %q replacing %q", n.GetText(), n.GetReplacesMessageId())
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e.publish(bobPress(tt.card, tt.data))
			waitFor(t, "the answer", func() bool { return len(e.noticeEvents("grp")) == 2+i })
			tt.check(t, e.noticeEvents("grp")[1+i])
		})
	}
	alice, err := store.Get(ctx, aliceKey)
	if err != nil || alice.ModelOverride != "gpt-4o-mini" {
		t.Fatalf("alice's session: %+v, %v; want the model bob pressed on her picker", alice, err)
	}
	if bob, err := store.Get(ctx, "agent:main:telegram:group:chat-grp:bob"); err == nil && bob.ModelOverride != "" {
		t.Fatalf("bob's session switched to %q by alice's picker", bob.ModelOverride)
	}

	// While alice's turn runs, a press on her picker is refused, as her
	// own /model is: also when Redis has lost the turn's lock and its
	// lease in Postgres (migration 00148) holds her session.
	if _, err := e.db.Exec(ctx, `INSERT INTO turn_leases (session_key, turn_id, generation, expires_at)
		SELECT session_key, 'running', generation, now() + interval '1 minute' FROM sessions WHERE session_key = $1`, aliceKey); err != nil {
		t.Fatal(err)
	}
	e.publish(bobPress("card-3", "m2-"+modelSum("o3")+"."+tag))
	waitFor(t, "the answer", func() bool { return len(e.noticeEvents("grp")) == 5 })
	if got := e.noticeEvents("grp")[4].GetText(); got != "Agent is running — wait or /stop first, then switch models." {
		t.Errorf("a press on the picker of a running turn's session answered %q", got)
	}
	if alice, err := store.Get(ctx, aliceKey); err != nil || alice.ModelOverride != "gpt-4o-mini" {
		t.Errorf("alice's session on %q (%v) after a press while her turn ran, want gpt-4o-mini", alice.ModelOverride, err)
	}
}

// menus lists a picker's rows as "placeholder: label|command|data|description|danger, …".
func menus(p *deliveryv1.Picker) []string {
	var out []string
	for _, r := range p.GetRows() {
		var cs []string
		for _, c := range r.GetChoices() {
			cs = append(cs, fmt.Sprintf("%s|%s|%s|%s|%v", c.GetLabel(), c.GetCommand(), c.GetData(), c.GetDescription(), c.GetDanger()))
		}
		out = append(out, r.GetPlaceholder()+": "+strings.Join(cs, ", "))
	}
	return out
}

// discordDM is user's message in their Discord DM.
func discordDM(user, text string) *eventsv1.MessageReceived {
	ev := dm(user, text)
	ev.Source.Platform = "discord"
	return ev
}

// On Discord a bare /model shows Hermes's select-menu picker: the
// session's model and a menu of providers (one: "<name> (<n> models)",
// "current") with a red Cancel; choosing the provider shows its models
// in up to three menus of 25 with Back and Cancel, and says how many
// more there are; Back returns to the providers; choosing a model
// switches it under "⚙ Model Switched"; Cancel says so.
func TestModelPickerDiscordMenus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.provider = Provider{Kind: "openai", Model: "gpt-4o"}
	cfg := testConfig()
	long := "org/" + strings.Repeat("y", 70)
	cfg.Models = []string{long}
	for i := 1; i < 80; i++ {
		cfg.Models = append(cfg.Models, fmt.Sprintf("vendor/model-%d", i))
	}
	e.startRouter(cfg, nil, nil)
	press := func(card, data string) *eventsv1.MessageReceived {
		ev := pickerPress("alice", card, data)
		ev.Source.Platform = "discord"
		return ev
	}

	e.publish(discordDM("alice", "/model"))
	waitFor(t, "the picker", func() bool { return len(e.noticeEvents("alice")) == 1 })
	n := e.noticeEvents("alice")[0]
	providers := "⚙ **Model Configuration**\n\nCurrent model: `gpt-4o`\nProvider: OpenAI-compatible\n\nSelect a provider:"
	wantRows := []string{
		"Choose a provider...: OpenAI-compatible (80 models)|/model|v|current|false",
		": Cancel|/model|x||true",
	}
	if n.GetText() != providers || fmt.Sprint(menus(n.GetPicker())) != fmt.Sprint(wantRows) {
		t.Fatalf("picker %q with %q, want %q with %q", n.GetText(), menus(n.GetPicker()), providers, wantRows)
	}

	e.publish(press("card-1", "v"))
	waitFor(t, "the models", func() bool { return len(e.noticeEvents("alice")) == 2 })
	n = e.noticeEvents("alice")[1]
	wantText := "⚙ **Model Configuration**\n\nProvider: **OpenAI-compatible**\nSelect a model:\n*5 more available — type `/model <name>` directly*"
	rows := n.GetPicker().GetRows()
	if n.GetText() != wantText || n.GetReplacesMessageId() != "card-1" || len(rows) != 4 {
		t.Fatalf("models step %q replacing %q with %d rows, want %q replacing card-1 with 4", n.GetText(), n.GetReplacesMessageId(), len(rows), wantText)
	}
	for i, r := range rows[:3] {
		if want := fmt.Sprintf("Choose a model from OpenAI-compatible (%d/3)...", i+1); r.GetPlaceholder() != want || len(r.GetChoices()) != 25 {
			t.Fatalf("menu %d: %q with %d options, want %q with 25", i, r.GetPlaceholder(), len(r.GetChoices()), want)
		}
	}
	first, second := rows[0].GetChoices()[0], rows[0].GetChoices()[1]
	if first.GetLabel() != strings.Repeat("y", 70) || first.GetData() != "m0-"+modelSum(long) || second.GetLabel() != "model-1" || second.GetCommand() != "/model vendor/model-1" || second.GetData() != "" {
		t.Fatalf("options %v and %v, want the short names, a long id as data", first, second)
	}
	if got := menus(&deliveryv1.Picker{Rows: rows[3:]}); fmt.Sprint(got) != fmt.Sprint([]string{": ◀ Back|/model|b||false, Cancel|/model|x||true"}) {
		t.Fatalf("last row %q, want Back and Cancel", got)
	}

	e.publish(press("card-1", "b"))
	waitFor(t, "back", func() bool { return len(e.noticeEvents("alice")) == 3 })
	if n := e.noticeEvents("alice")[2]; n.GetText() != providers || n.GetReplacesMessageId() != "card-1" || len(n.GetPicker().GetRows()) != 2 {
		t.Fatalf("back answered %q replacing %q with %v", n.GetText(), n.GetReplacesMessageId(), menus(n.GetPicker()))
	}

	e.publish(press("card-1", "m0-"+modelSum(long)))
	waitFor(t, "the switch", func() bool { return len(e.noticeEvents("alice")) == 4 })
	n = e.noticeEvents("alice")[3]
	wantText = "⚙ **Model Switched**\n\nModel switched to `" + long + "`\nProvider: OpenAI-compatible\n_(this session only — /model default goes back)_"
	if n.GetText() != wantText || n.GetReplacesMessageId() != "card-1" || n.GetPicker() != nil {
		t.Fatalf("switch answered %q replacing %q with %v, want %q", n.GetText(), n.GetReplacesMessageId(), n.GetPicker(), wantText)
	}

	e.publish(discordDM("alice", "/model"))
	waitFor(t, "a second picker", func() bool { return len(e.noticeEvents("alice")) == 5 })
	if got := e.noticeEvents("alice")[4].GetText(); !strings.Contains(got, "Current model: `"+long+"`") {
		t.Fatalf("second picker %q, want the session's model", got)
	}
	e.publish(press("card-2", "x"))
	waitFor(t, "the cancel", func() bool { return len(e.noticeEvents("alice")) == 6 })
	if n := e.noticeEvents("alice")[5]; n.GetText() != "⚙ **Model Configuration**\n\nModel selection cancelled." || n.GetReplacesMessageId() != "card-2" || n.GetPicker() != nil {
		t.Fatalf("cancel answered %q replacing %q", n.GetText(), n.GetReplacesMessageId())
	}
}
