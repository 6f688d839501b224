package discord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/command"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/services/gateway/discord/discordfake"
)

// Every command of the menu is registered, with Discord's rules kept;
// an entry Discord would refuse is left out, never sent.
func TestSlashCommands(t *testing.T) {
	t.Parallel()
	cmds, dropped := slashCommands(command.Menu())
	if len(dropped) > 0 || len(cmds) != len(command.Menu()) {
		t.Fatalf("the menu's commands %v dropped", dropped)
	}
	// Hermes's options where it has its own, "args" for the rest; each
	// names a command of the menu and passes Discord's rules.
	names := map[string]bool{}
	for _, e := range command.Menu() {
		names[e.Name] = true
	}
	for name := range commandOptions {
		if !names[name] {
			t.Fatalf("options for %s, which is not in the menu", name)
		}
	}
	for name := range argsHints {
		if !names[name] {
			t.Fatalf("an args hint for %s, which is not in the menu", name)
		}
	}
	for _, c := range cmds {
		for _, o := range c.Options {
			if !validName(o.Name) || !validDescription(o.Description) || len(o.Choices) > 25 {
				t.Fatalf("%s: option %+v Discord would refuse", c.Name, o)
			}
			for _, ch := range o.Choices {
				if v, _ := ch.Value.(string); !validDescription(ch.Name) || v == "" {
					t.Fatalf("%s: choice %+v", c.Name, ch)
				}
			}
		}
	}
	byName := map[string]*discordgo.ApplicationCommand{}
	for _, c := range cmds {
		byName[c.Name] = c
	}
	for _, tc := range []struct {
		cmd, opt, desc string
		typ            discordgo.ApplicationCommandOptionType
		required       bool
		choices        int
	}{
		{"model", "name", "Model name (e.g. anthropic/claude-sonnet-4). Leave empty to see current.", 3, false, 0},
		{"reasoning", "effort", "Reasoning effort: none, minimal, low, medium, high, or xhigh.", 3, false, 0},
		{"voice", "mode", "Voice mode: join, channel, leave, on, tts, off, or status", 3, false, 7},
		{"insights", "days", "Number of days to analyze (default: 30)", 4, false, 0},
		{"steer", "prompt", "Text to inject into the agent's next tool result", 3, true, 0},
		{"queue", "prompt", "The prompt to queue", 3, true, 0},
		{"background", "prompt", "The prompt to run in the background", 3, true, 0},
		{"approve", "scope", "Optional: 'all', 'session', 'always', 'all session', 'all always'", 3, false, 0},
		{"fast", "args", "Arguments: [normal|fast|status]", 3, false, 0},
		{"busy", "args", "Arguments: [queue|steer|interrupt|status]", 3, false, 0},
		{"status", "args", "Arguments (optional)", 3, false, 0},
		{"new", "args", "Arguments (optional)", 3, false, 0},
	} {
		c := byName[tc.cmd]
		if c == nil || len(c.Options) != 1 {
			t.Fatalf("%s: %+v, want one option", tc.cmd, c)
		}
		o := c.Options[0]
		if o.Name != tc.opt || o.Description != tc.desc || o.Type != tc.typ || o.Required != tc.required || len(o.Choices) != tc.choices {
			t.Fatalf("%s: option %+v, want %+v", tc.cmd, o, tc)
		}
	}
	if v := byName["voice"].Options[0].Choices; v[0].Name != "join — join your voice channel" || v[0].Value != "join" || v[6].Value != "status" {
		t.Fatalf("voice choices %+v", v)
	}

	for _, tc := range []struct {
		name string
		menu []command.MenuEntry
		kept []string
	}{
		{"good", []command.MenuEntry{{Name: "model", Description: "Switch"}, {Name: "reload-mcp", Description: "Reload"}, {Name: "set_home", Description: "Home"}, {Name: "café", Description: "Unicode"}}, []string{"model", "reload-mcp", "set_home", "café"}},
		{"uppercase", []command.MenuEntry{{Name: "Model", Description: "x"}, {Name: "ok", Description: "x"}}, []string{"ok"}},
		{"space or slash", []command.MenuEntry{{Name: "set home", Description: "x"}, {Name: "/help", Description: "x"}, {Name: "", Description: "x"}}, nil},
		{"too long", []command.MenuEntry{{Name: strings.Repeat("a", 33), Description: "x"}, {Name: strings.Repeat("a", 32), Description: "x"}}, []string{strings.Repeat("a", 32)}},
		{"description", []command.MenuEntry{{Name: "a", Description: ""}, {Name: "b", Description: strings.Repeat("é", 101)}, {Name: "c", Description: strings.Repeat("é", 100)}}, []string{"c"}},
		{"duplicate", []command.MenuEntry{{Name: "a", Description: "x"}, {Name: "a", Description: "y"}}, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmds, _ := slashCommands(tc.menu)
			var kept []string
			for _, c := range cmds {
				kept = append(kept, c.Name)
				if !sameCommands([]*discordgo.ApplicationCommand{c}, []*discordgo.ApplicationCommand{{Name: c.Name, Description: c.Description, Options: options(c.Name)}}) {
					t.Fatalf("%s options %+v, want %+v", c.Name, c.Options, options(c.Name))
				}
			}
			if strings.Join(kept, ",") != strings.Join(tc.kept, ",") {
				t.Fatalf("kept %v, want %v", kept, tc.kept)
			}
		})
	}
	many := make([]command.MenuEntry, 120)
	for i := range many {
		many[i] = command.MenuEntry{Name: "c" + strings.Repeat("x", i%30) + string(rune('a'+i/30)), Description: "d"}
	}
	if cmds, dropped := slashCommands(many); len(cmds) != maxCommands || len(dropped) != 20 {
		t.Fatalf("%d kept, %d dropped of 120, want 100 and 20", len(cmds), len(dropped))
	}
}

// The commands are overwritten once: a restart that finds them as
// the menu has them only reads them; one that finds others (an older
// release's) overwrites them again. The fake refuses what Discord does.
func TestRegisterCommandsOnlyWhenChanged(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := func() *Platform {
		p, err := NewPlatform(ctx, Config{BotToken: f.Token, APIBaseURL: f.URL(), RegisterCommands: true}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for i, want := range []bool{true, false, false} {
		changed, err := start().registerCommands(ctx)
		if err != nil || changed != want {
			t.Fatalf("start %d: overwrote %v (%v), want %v", i, changed, err, want)
		}
	}
	cmds, overwrites, refused := f.Commands()
	if overwrites != 1 || refused != 0 || len(cmds) != len(command.Menu()) || cmds["model"] != "Show or switch the model (session-scoped)" {
		t.Fatalf("%d overwrites (%d refused), commands %v", overwrites, refused, cmds)
	}
	// Discord keeps the options and choices as sent, so the restarts
	// above found them equal.
	if os := f.CommandOptions("voice"); len(os) != 1 || os[0].Name != "mode" || len(os[0].Choices) != 7 || os[0].Choices[2].Value != "leave" {
		t.Fatalf("voice options %+v", os)
	}
	if os := f.CommandOptions("insights"); len(os) != 1 || os[0].Name != "days" || os[0].Type != 4 {
		t.Fatalf("insights options %+v", os)
	}
	if os := f.CommandOptions("queue"); len(os) != 1 || os[0].Name != "prompt" || !os[0].Required {
		t.Fatalf("queue options %+v", os)
	}
	if os := f.CommandOptions("fast"); len(os) != 1 || os[0].Name != "args" || os[0].Description != "Arguments: [normal|fast|status]" {
		t.Fatalf("fast options %+v", os)
	}
	// The same names and descriptions with other options (a release
	// that gave every command "args"): overwritten.
	old := map[string]string{}
	for _, e := range command.Menu() {
		old[e.Name] = e.Description
	}
	f.SetCommands(old)
	if changed, err := start().registerCommands(ctx); err != nil || !changed {
		t.Fatalf("stale options: overwrote %v (%v)", changed, err)
	}
	if os := f.CommandOptions("voice"); len(os) != 1 || len(os[0].Choices) != 7 {
		t.Fatalf("voice options after the overwrite %+v", os)
	}
	if changed, err := start().registerCommands(ctx); err != nil || changed {
		t.Fatalf("after the overwrite: overwrote %v (%v)", changed, err)
	}
	f.SetCommands(map[string]string{"ask": "Ask Hermes a question", "model": "Show or switch the model (session-scoped)"})
	if changed, err := start().registerCommands(ctx); err != nil || !changed {
		t.Fatalf("stale commands: overwrote %v (%v)", changed, err)
	}
	if cmds, overwrites, _ := f.Commands(); overwrites != 3 || cmds["ask"] != "" || len(cmds) != len(command.Menu()) {
		t.Fatalf("after a stale set: %d overwrites, commands %v", overwrites, cmds)
	}

	// What Discord refuses, the fake refuses, whole.
	p := start()
	for _, bad := range []*discordgo.ApplicationCommand{
		{Name: "Model", Description: "x"},
		{Name: "set home", Description: "x"},
		{Name: strings.Repeat("a", 33), Description: "x"},
		{Name: "ok", Description: strings.Repeat("d", 101)},
		{Name: "ok", Description: "x", Options: []*discordgo.ApplicationCommandOption{{Type: 3, Name: "Args", Description: "x"}}},
		{Name: "ok", Description: "x", Options: []*discordgo.ApplicationCommandOption{{Type: 3, Name: "a", Description: "x"}, {Type: 3, Name: "b", Description: "x", Required: true}}},
		{Name: "ok", Description: "x", Options: []*discordgo.ApplicationCommandOption{{Type: 3, Name: "a", Description: "x", Choices: []*discordgo.ApplicationCommandOptionChoice{{Name: "one", Value: 1.0}}}}},
	} {
		_, err := p.s.ApplicationCommandBulkOverwrite(f.BotID, "", []*discordgo.ApplicationCommand{{Name: "fine", Description: "x"}, bad})
		if !isCode(err, discordgo.ErrCodeInvalidFormBody) {
			t.Fatalf("overwrite with %+v: %v, want 400 Invalid Form Body", bad, err)
		}
	}
	if _, overwrites, refused := f.Commands(); overwrites != 3 || refused != 7 {
		t.Fatalf("%d overwrites, %d refused, want 3 and 7", overwrites, refused)
	}
	too := make([]*discordgo.ApplicationCommand, 101)
	for i := range too {
		too[i] = &discordgo.ApplicationCommand{Name: "c" + strings.Repeat("x", i%30) + string(rune('a'+i/30)), Description: "x"}
	}
	if _, err := p.s.ApplicationCommandBulkOverwrite(f.BotID, "", too); !isCode(err, discordgo.ErrCodeInvalidFormBody) {
		t.Fatalf("101 commands: %v", err)
	}
}

// A slash command is acknowledged at once with a deferred ephemeral
// response, published once as the typed command from the invoker where
// it was used (a typed message's session key), its deferred response
// then deleted; the answer is a message in the channel.
func TestSlashCommandInvoked(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b, next := run(t, f, Config{RegisterCommands: true, IgnoredChannels: []string{"900000000000000099"}})
	f.AddChannel("900000000000000099", discordfake.TypeGuildText, guild, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	platformtest.WaitFor(t, "the commands to be registered", func() bool {
		cmds, _, _ := f.Commands()
		return len(cmds) == len(command.Menu())
	})

	d, err := f.Invoke(ctx, discordfake.Invoke{ChannelID: channel, GuildID: guild, UserID: user, UserName: "alice", Name: "model",
		Options: []discordfake.Option{{Name: "name", Type: 3, Value: "  gpt-5 --global "}}})
	if err != nil {
		t.Fatal(err)
	}
	id := d["id"].(string)
	ev := next(20 * time.Second)
	src := ev.GetSource()
	if ev.GetText() != "/model gpt-5 --global" || ev.GetEventId() != "slash:"+id || !ev.GetNoReaction() || !ev.GetMentioned() ||
		src.GetUserId() != user || src.GetUserName() != "alice" || src.GetChatId() != channel || src.GetChatType() != "group" || src.GetScopeId() != guild || !ev.GetSlashCommand() {
		t.Fatalf("published %v, want alice's /model gpt-5 --global in the channel", ev)
	}
	// The interaction rides along, for a private refusal (see
	// TestSlashRefusalEphemeral); its token ends 15 minutes on.
	if ia := ev.GetInteraction(); ia.GetId() != id || ia.GetApplicationId() != f.BotID || ia.GetToken() != d["token"] ||
		time.Until(ia.GetExpiresAt().AsTime()) < 14*time.Minute || time.Until(ia.GetExpiresAt().AsTime()) > 15*time.Minute {
		t.Fatalf("interaction %v, want %s's with its token, ending in 15 minutes", ia, id)
	}
	if k := sessionkey.Build(src, sessionkey.DefaultOptions()); k != "agent:main:discord:group:"+channel+":"+user {
		t.Fatalf("session key %s", k)
	}
	platformtest.WaitFor(t, "the deferred response to be deleted", func() bool {
		return f.InteractionState(id).Original == "deleted"
	})
	if st := f.InteractionState(id); len(st.Callbacks) != 1 || st.Callbacks[0] != 5 || st.Flags != 64 {
		t.Fatalf("acknowledged %+v, want one deferred ephemeral response (5, flags 64)", st)
	}

	// A redelivery: acknowledged again (refused as already done), not
	// published again.
	if err := f.Dispatch(ctx, "INTERACTION_CREATE", d); err != nil {
		t.Fatal(err)
	}
	platformtest.WaitFor(t, "the redelivery to be answered", func() bool { return f.InteractionState(id).Refused == 1 })
	if ev := next(300 * time.Millisecond); ev != nil {
		t.Fatalf("the redelivered command was published again: %v", ev)
	}

	// The answer reaches the channel as a message (no reply reference:
	// the command's id names no message).
	r := &deliveryv1.SendReceipt{}
	target := &deliveryv1.Target{Platform: "discord", ChatId: src.GetChatId(), ReplyToMessageId: ev.GetMessageId()}
	if err := b.Request(ctx, b.Topology().SendSubject("discord"), &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND,
		IdempotencyKey: "answer", Target: target, Text: "Model switched to gpt-5"}, r); err != nil || !r.GetOk() {
		t.Fatalf("send: %v %v", r, err)
	}
	if ms := f.Messages(channel); len(ms) != 1 || ms[0].Content != "Model switched to gpt-5" || ms[0].ReplyTo != "" {
		t.Fatalf("channel has %+v, want the answer", ms)
	}

	// In a thread, a DM, and without arguments.
	for _, tc := range []struct {
		in       discordfake.Invoke
		text     string
		chatType string
		key      string
	}{
		{discordfake.Invoke{ChannelID: thread, GuildID: guild, UserID: user, Name: "status"}, "/status", "thread", "agent:main:discord:thread:" + thread + ":" + thread},
		{discordfake.Invoke{ChannelID: dmChan, UserID: user, Name: "new", Options: []discordfake.Option{{Name: "args", Type: 3, Value: ""}}}, "/new", "dm", "agent:main:discord:dm:" + dmChan},
		// Options of their own: an integer, a choice, Hermes's args.
		{discordfake.Invoke{ChannelID: dmChan, UserID: user, Name: "insights", Options: []discordfake.Option{{Name: "days", Type: 4, Value: 7}}}, "/insights 7", "dm", "agent:main:discord:dm:" + dmChan},
		{discordfake.Invoke{ChannelID: dmChan, UserID: user, Name: "voice", Options: []discordfake.Option{{Name: "mode", Type: 3, Value: "tts"}}}, "/voice tts", "dm", "agent:main:discord:dm:" + dmChan},
		{discordfake.Invoke{ChannelID: thread, GuildID: guild, UserID: user, Name: "fast", Options: []discordfake.Option{{Name: "args", Type: 3, Value: "status"}}}, "/fast status", "thread", "agent:main:discord:thread:" + thread + ":" + thread},
		{discordfake.Invoke{ChannelID: channel, GuildID: guild, UserID: user, Name: "queue", Options: []discordfake.Option{{Name: "prompt", Type: 3, Value: "then summarize"}}}, "/queue then summarize", "group", "agent:main:discord:group:" + channel + ":" + user},
	} {
		if _, err := f.Invoke(ctx, tc.in); err != nil {
			t.Fatal(err)
		}
		ev := next(20 * time.Second)
		if k := sessionkey.Build(ev.GetSource(), sessionkey.DefaultOptions()); ev.GetText() != tc.text || ev.GetSource().GetChatType() != tc.chatType || k != tc.key {
			t.Fatalf("published %v (key %s), want %s in a %s (%s)", ev, k, tc.text, tc.chatType, tc.key)
		}
	}

	// In an ignored channel: acknowledged and cleared, not published.
	d, err = f.Invoke(ctx, discordfake.Invoke{ChannelID: "900000000000000099", GuildID: guild, UserID: user, Name: "help"})
	if err != nil {
		t.Fatal(err)
	}
	platformtest.WaitFor(t, "the ignored command's response to be deleted", func() bool {
		return f.InteractionState(d["id"].(string)).Original == "deleted"
	})
	if ev := next(300 * time.Millisecond); ev != nil {
		t.Fatalf("a command in an ignored channel was published: %v", ev)
	}
}

func TestCommandText(t *testing.T) {
	t.Parallel()
	opt := func(name string, typ discordgo.ApplicationCommandOptionType, v any, sub ...*discordgo.ApplicationCommandInteractionDataOption) *discordgo.ApplicationCommandInteractionDataOption {
		return &discordgo.ApplicationCommandInteractionDataOption{Name: name, Type: typ, Value: v, Options: sub}
	}
	for _, tc := range []struct {
		name string
		data discordgo.ApplicationCommandInteractionData
		want string
		ok   bool
	}{
		{"bare", discordgo.ApplicationCommandInteractionData{Name: "help"}, "/help", true},
		{"args", discordgo.ApplicationCommandInteractionData{Name: "queue", Options: []*discordgo.ApplicationCommandInteractionDataOption{opt("args", 3, " do  this\nthen that ")}}, "/queue do  this\nthen that", true},
		{"empty args", discordgo.ApplicationCommandInteractionData{Name: "new", Options: []*discordgo.ApplicationCommandInteractionDataOption{opt("args", 3, "  ")}}, "/new", true},
		{"numbers and booleans", discordgo.ApplicationCommandInteractionData{Name: "insights", Options: []*discordgo.ApplicationCommandInteractionDataOption{opt("days", 4, 7.0), opt("f", 10, 0.5), opt("b", 5, true), nil}}, "/insights 7 0.5 true", true},
		{"subcommand", discordgo.ApplicationCommandInteractionData{Name: "cron", Options: []*discordgo.ApplicationCommandInteractionDataOption{opt("list", 1, nil, opt("all", 5, false))}}, "/cron list false", true},
		{"bad name", discordgo.ApplicationCommandInteractionData{Name: "He lp"}, "", false},
		{"bad subcommand", discordgo.ApplicationCommandInteractionData{Name: "cron", Options: []*discordgo.ApplicationCommandInteractionDataOption{opt("a b", 1, nil)}}, "", false},
		{"too deep", discordgo.ApplicationCommandInteractionData{Name: "x", Options: []*discordgo.ApplicationCommandInteractionDataOption{opt("a", 2, nil, opt("b", 2, nil, opt("c", 1, nil, opt("d", 1, nil))))}}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := commandText(tc.data)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("commandText = %q %v, want %q %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// FuzzSlashCommand feeds APPLICATION_COMMAND interactions to the parser
// and the converter: no panic; a published command is the typed command
// of the invoked name, which the command parser reads back, and passes
// the kit's check.
func FuzzSlashCommand(f *testing.F) {
	f.Add([]byte(`{"id":"5","type":2,"token":"t","channel_id":"1","guild_id":"2","data":{"name":"model","type":1,"options":[{"name":"args","type":3,"value":"gpt-5"}]},"member":{"user":{"id":"4"}}}`), false)
	f.Add([]byte(`{"id":"5","type":2,"token":"t","channel_id":"1","data":{"name":"insights","options":[{"name":"days","type":4,"value":7}]},"user":{"id":"4"}}`), true)
	f.Add([]byte(`{"id":"5","type":2,"token":"t","channel_id":"1","data":{"name":"cron","options":[{"name":"list","type":1,"options":[{"name":"x","type":3,"value":"a\u0000b"}]}]},"user":{"id":"4"}}`), false)
	f.Fuzz(func(t *testing.T, raw []byte, thread bool) {
		in, err := parseInteraction(raw)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error not marked malformed: %v", err)
			}
			return
		}
		ev, why := invoked(in, channelInfo{Thread: thread, Parent: "P"}, rules{Account: bot, BotID: bot}, time.Now())
		if ev == nil {
			if why == "" {
				t.Fatal("skipped without a reason")
			}
			return
		}
		name := in.Data.(discordgo.ApplicationCommandInteractionData).Name
		if !strings.HasPrefix(ev.GetText(), "/"+name) || ev.GetEventId() != "slash:"+in.ID || ev.GetSource().GetUserId() == "" {
			t.Fatalf("command %v of %q", ev, name)
		}
		if c, ok := command.Parse(ev.GetText(), "discord", ""); !ok || c.Typed != name {
			t.Fatalf("%q parses as %+v %v, want /%s", ev.GetText(), c, ok, name)
		}
		if err := platform.CheckEvent(ev, "discord", "", 1<<20); err != nil {
			t.Fatalf("command fails the kit's check: %v", err)
		}
		// The interaction only when its ids and token can go into a
		// REST path; its token the interaction's.
		if ia := ev.GetInteraction(); ia != nil && (ia.GetToken() != in.Token || !urlSafe(ia.GetToken()) || !snowflake(ia.GetApplicationId()) || ia.GetId() != in.ID) {
			t.Fatalf("interaction %v of %+v", ia, in)
		}
		if ev.GetInteraction() == nil && snowflake(in.AppID) && urlSafe(in.Token) {
			t.Fatalf("no interaction for application %q", in.AppID)
		}
	})
}

// A refusal that carries the command's interaction is an ephemeral
// followup (flags 64, seen by the invoker only), posted once the
// deferred response is deleted, even while the connection's own slow
// deletion is still going on: sent before, it would take the response's
// place and be deleted with it. A token Discord refuses, or one past its end, sends the refusal
// to the channel instead (Discord is not asked with an ended one); a
// rate-limited followup is returned for delivery to retry, the token
// blanked out of the error's text.
func TestSlashRefusalEphemeral(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.SlowDeletes(300 * time.Millisecond)
	b, next := run(t, f, Config{RegisterCommands: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	platformtest.WaitFor(t, "the commands to be registered", func() bool {
		cmds, _, _ := f.Commands()
		return len(cmds) == len(command.Menu())
	})
	const refusal = "You're not authorized to use this command."
	n := 0
	refuse := func(ev *eventsv1.MessageReceived, ia *eventsv1.Interaction) *deliveryv1.SendReceipt {
		t.Helper()
		n++
		src := ev.GetSource()
		target := &deliveryv1.Target{Platform: "discord", Account: src.GetAccount(), ChatId: src.GetChatId(), ReplyToMessageId: ev.GetMessageId(), Interaction: ia}
		r := &deliveryv1.SendReceipt{}
		if err := b.Request(ctx, b.Topology().SendSubject("discord"), &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND,
			IdempotencyKey: fmt.Sprintf("refusal-%d", n), Target: target, Text: refusal, Final: true}, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	invoke := func() (string, *eventsv1.MessageReceived) {
		t.Helper()
		d, err := f.Invoke(ctx, discordfake.Invoke{ChannelID: channel, GuildID: guild, UserID: user, UserName: "mallory", Name: "status"})
		if err != nil {
			t.Fatal(err)
		}
		ev := next(20 * time.Second)
		if ev.GetInteraction().GetId() != d["id"] {
			t.Fatalf("published %v without its interaction", ev)
		}
		return d["id"].(string), ev
	}

	// At once, while the deferred response is still being deleted.
	id, ev := invoke()
	if r := refuse(ev, ev.GetInteraction()); !r.GetOk() || r.GetPlatformMessageId() == "" {
		t.Fatalf("refusal: %v", r)
	}
	if st := f.InteractionState(id); st.Original != "deleted" || len(st.Followups) != 1 || st.Followups[0].Content != refusal || st.Followups[0].Flags != 64 {
		t.Fatalf("interaction %+v, want its response deleted and the refusal as an ephemeral followup", st)
	}
	if ms := f.Messages(channel); len(ms) != 0 {
		t.Fatalf("the channel got %+v", ms)
	}

	// Rate limited: retryable, no token in the error; the retry goes.
	f.SlowDeletes(0)
	id, ev = invoke()
	token := ev.GetInteraction().GetToken()
	f.FailNextFollowup(http.StatusTooManyRequests)
	if r := refuse(ev, ev.GetInteraction()); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED || strings.Contains(r.GetError(), token) {
		t.Fatalf("rate-limited followup: %v", r)
	}
	f.FailNextFollowup(http.StatusInternalServerError)
	if r := refuse(ev, ev.GetInteraction()); r.GetOk() || r.GetErrorClass() == deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT || strings.Contains(r.GetError(), token) {
		t.Fatalf("failed followup: %v", r)
	}
	if r := refuse(ev, ev.GetInteraction()); !r.GetOk() {
		t.Fatalf("retried refusal: %v", r)
	}
	if st := f.InteractionState(id); len(st.Followups) != 1 || st.Followups[0].Flags != 64 {
		t.Fatalf("interaction %+v, want the retried refusal as an ephemeral followup", st)
	}

	// A token Discord refuses: in the channel.
	id, ev = invoke()
	f.ExpireInteraction(id)
	if r := refuse(ev, ev.GetInteraction()); !r.GetOk() {
		t.Fatalf("refusal with a refused token: %v", r)
	}
	if st := f.InteractionState(id); len(st.Followups) != 0 {
		t.Fatalf("followups %+v with a refused token", st.Followups)
	}
	if ms := f.Messages(channel); len(ms) != 1 || ms[0].Content != refusal {
		t.Fatalf("the channel has %+v, want the refusal", ms)
	}

	// A token past its end: in the channel, Discord not asked.
	id, ev = invoke()
	ia := ev.GetInteraction()
	ended := &eventsv1.Interaction{Id: ia.GetId(), ApplicationId: ia.GetApplicationId(), Token: ia.GetToken(),
		ExpiresAt: timestamppb.New(time.Now().Add(-time.Second))}
	if r := refuse(ev, ended); !r.GetOk() {
		t.Fatalf("refusal with an ended token: %v", r)
	}
	for _, req := range f.Requests() {
		if strings.HasPrefix(req, "POST /api/v9/webhooks/"+f.BotID+"/"+ended.GetToken()) {
			t.Fatalf("a followup was tried with an ended token: %s", req)
		}
	}
	if ms := f.Messages(channel); len(ms) != 2 || ms[1].Content != refusal || len(f.InteractionState(id).Followups) != 0 {
		t.Fatalf("the channel has %+v, want the second refusal", ms)
	}
}

// A press's refusal carries the press's interaction (a component's): it
// is an ephemeral followup, seen by the presser only, and the message
// with the buttons is neither deleted nor edited (Discord's @original of
// a press is that message). Sent before the gateway's acknowledgement
// lands, the followup is refused as Unknown Webhook and returned for
// delivery to retry; a token Discord refuses, or one past its end,
// drops the refusal: the channel gets nothing.
func TestPressRefusalEphemeral(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b, next := run(t, f, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const refusal = "You're not authorized~"
	n := 0
	refuse := func(ev *eventsv1.MessageReceived, ia *eventsv1.Interaction) *deliveryv1.SendReceipt {
		t.Helper()
		n++
		src := ev.GetSource()
		target := &deliveryv1.Target{Platform: "discord", Account: src.GetAccount(), ChatId: src.GetChatId(), ReplyToMessageId: ev.GetMessageId(), Interaction: ia}
		r := &deliveryv1.SendReceipt{}
		if err := b.Request(ctx, b.Topology().SendSubject("discord"), &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND,
			IdempotencyKey: fmt.Sprintf("press-refusal-%d", n), Target: target, Text: refusal, Final: true}, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	const card = "700000000000000042"
	pressOf := func() (string, *eventsv1.MessageReceived) {
		t.Helper()
		d, err := f.Press(ctx, discordfake.Press{ChannelID: channel, GuildID: guild, MessageID: card, UserID: user, UserName: "mallory", CustomID: "ea:once:call_1"})
		if err != nil {
			t.Fatal(err)
		}
		ev := next(20 * time.Second)
		id := d["id"].(string)
		if ia := ev.GetInteraction(); ia.GetId() != id || ia.GetToken() != d["token"] || !ia.GetComponent() || ia.GetApplicationId() != f.BotID ||
			!ia.GetExpiresAt().AsTime().After(time.Now().Add(14*time.Minute)) {
			t.Fatalf("published %v without the press's interaction", ev)
		}
		platformtest.WaitFor(t, "the press to be acknowledged", func() bool { acks, _ := f.Acks(id); return len(acks) == 1 })
		return id, ev
	}
	noDelete := func() {
		t.Helper()
		for _, req := range f.Requests() {
			if strings.HasPrefix(req, "DELETE /api/v9/webhooks/") || strings.HasPrefix(req, "PATCH /api/v9/webhooks/") {
				t.Fatalf("the press's response message was touched: %s", req)
			}
		}
	}

	id, ev := pressOf()
	if r := refuse(ev, ev.GetInteraction()); !r.GetOk() || r.GetPlatformMessageId() == "" {
		t.Fatalf("refusal: %v", r)
	}
	if st := f.InteractionState(id); st.Original != "" || len(st.Followups) != 1 || st.Followups[0].Content != refusal || st.Followups[0].Flags != 64 {
		t.Fatalf("interaction %+v, want the refusal as an ephemeral followup and no response message", st)
	}
	noDelete()

	// A token Discord refuses: dropped.
	id, ev = pressOf()
	f.ExpireInteraction(id)
	if r := refuse(ev, ev.GetInteraction()); !r.GetOk() {
		t.Fatalf("refusal with a refused token: %v", r)
	}
	// A token past its end: dropped, Discord not asked.
	_, ev = pressOf()
	ia := proto.Clone(ev.GetInteraction()).(*eventsv1.Interaction)
	ia.ExpiresAt = timestamppb.New(time.Now().Add(-time.Second))
	if r := refuse(ev, ia); !r.GetOk() {
		t.Fatalf("refusal with an ended token: %v", r)
	}
	for _, req := range f.Requests() {
		if strings.HasPrefix(req, "POST /api/v9/webhooks/"+f.BotID+"/"+ia.GetToken()) {
			t.Fatalf("a followup was tried with an ended token: %s", req)
		}
	}
	if ms := f.Messages(channel); len(ms) != 0 {
		t.Fatalf("the channel got %+v", ms)
	}
	noDelete()

	// Before the acknowledgement: retryable, no token in the error. A
	// fake no gateway reads, so nothing acknowledges the press.
	g := newFake(t)
	p, err := newPlatform(Config{BotToken: g.Token, APIBaseURL: g.URL()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SignIn(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := g.Press(ctx, discordfake.Press{ChannelID: channel, GuildID: guild, MessageID: card, UserID: user, UserName: "mallory", CustomID: "ea:deny"})
	if err != nil {
		t.Fatal(err)
	}
	unacked := &eventsv1.Interaction{Id: d["id"].(string), ApplicationId: g.BotID, Token: d["token"].(string),
		ExpiresAt: timestamppb.New(time.Now().Add(15 * time.Minute)), Component: true}
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "early",
		Target: &deliveryv1.Target{Platform: "discord", ChatId: channel, Interaction: unacked}, Text: refusal, Final: true}
	_, err = p.Send(ctx, req)
	var se *platform.SendError
	if err == nil || errors.As(err, &se) || strings.Contains(err.Error(), unacked.GetToken()) {
		t.Fatalf("followup before the acknowledgement: %v, want a retryable error without the token", err)
	}
	if ms := g.Messages(channel); len(ms) != 0 {
		t.Fatalf("the channel got %+v", ms)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	base := platform.Permanent(fmt.Errorf("post https://discord.com/api/v9/webhooks/1/tok.en_1?wait=true: %w", errMalformed))
	err := redact(base, "tok.en_1")
	if strings.Contains(err.Error(), "tok.en_1") || !strings.Contains(err.Error(), "<token>") || !errors.Is(err, errMalformed) {
		t.Fatalf("redacted %q", err)
	}
	var se *platform.SendError
	if !errors.As(err, &se) || se.Class != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
		t.Fatalf("the class is lost: %v", err)
	}
	if redact(nil, "x") != nil || redact(base, "") != base {
		t.Fatal("redact of nothing")
	}
}

// A skill reload's new menu (SetMenu) is registered at once once the
// bot's identity is known; before, it is left for the connect's sync;
// a refused one leaves the next connect to register it.
func TestSetMenuRegistersTheNewMenu(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := newPlatform(Config{BotToken: f.Token, APIBaseURL: f.URL(), RegisterCommands: true}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	menu := append(command.Menu(), command.MenuEntry{Name: "deploy", Description: "Ship the build"})
	p.SetMenu(ctx, menu) // not signed in: nothing sent
	if _, overwrites, _ := f.Commands(); overwrites != 0 {
		t.Fatalf("%d overwrites before signing in", overwrites)
	}
	if err := p.SignIn(ctx); err != nil {
		t.Fatal(err)
	}
	p.syncCommands(ctx) // the connect registers the menu set before
	if cmds, overwrites, _ := f.Commands(); overwrites != 1 || cmds["deploy"] != "Ship the build" || !p.registered.Load() {
		t.Fatalf("%d overwrites, commands %v", overwrites, cmds)
	}
	p.SetMenu(ctx, command.Menu()) // the skill removed: at once
	if cmds, overwrites, _ := f.Commands(); overwrites != 2 || cmds["deploy"] != "" || len(cmds) != len(command.Menu()) || !p.registered.Load() {
		t.Fatalf("after the reload: %d overwrites, commands %v", overwrites, cmds)
	}
	p.SetMenu(ctx, command.Menu()) // unchanged: compared, not overwritten
	if _, overwrites, _ := f.Commands(); overwrites != 2 {
		t.Fatalf("an unchanged menu was overwritten (%d)", overwrites)
	}
	// An entry Discord would refuse is left out, the rest registered.
	p.SetMenu(ctx, append(command.Menu(), command.MenuEntry{Name: "ok", Description: strings.Repeat("d", 101)}))
	if cmds, overwrites, refused := f.Commands(); overwrites != 2 || refused != 0 || cmds["ok"] != "" || !p.registered.Load() {
		t.Fatalf("a menu with a bad entry: %d overwrites, %d refused, commands %v", overwrites, refused, cmds)
	}
}
