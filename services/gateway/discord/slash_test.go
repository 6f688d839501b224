package discord

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/switchboard-chat/switchboard/pkg/command"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
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
				if len(c.Options) != 1 || c.Options[0].Name != argsOption || c.Options[0].Required || c.Options[0].Type != discordgo.ApplicationCommandOptionString {
					t.Fatalf("%s options %+v, want one optional string args", c.Name, c.Options)
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
	f.SetCommands(map[string]string{"ask": "Ask Hermes a question", "model": "Show or switch the model (session-scoped)"})
	if changed, err := start().registerCommands(ctx); err != nil || !changed {
		t.Fatalf("stale commands: overwrote %v (%v)", changed, err)
	}
	if cmds, overwrites, _ := f.Commands(); overwrites != 2 || cmds["ask"] != "" || len(cmds) != len(command.Menu()) {
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
	} {
		_, err := p.s.ApplicationCommandBulkOverwrite(f.BotID, "", []*discordgo.ApplicationCommand{{Name: "fine", Description: "x"}, bad})
		if !isCode(err, discordgo.ErrCodeInvalidFormBody) {
			t.Fatalf("overwrite with %+v: %v, want 400 Invalid Form Body", bad, err)
		}
	}
	if _, overwrites, refused := f.Commands(); overwrites != 2 || refused != 6 {
		t.Fatalf("%d overwrites, %d refused, want 2 and 6", overwrites, refused)
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
		Options: []discordfake.Option{{Name: "args", Type: 3, Value: "  gpt-5 --global "}}})
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
		ev, why := invoked(in, channelInfo{Thread: thread, Parent: "P"}, rules{Account: bot, BotID: bot})
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
	})
}
