package discord

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/command"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Discord's native slash commands (application commands), as Hermes
// registers them (gateway/platforms/discord.py): every command of the
// menu (pkg/command, /help's order) is a global chat-input command with
// one optional free-text option, "args". At connect, the replica that
// holds the connection reads the application's global commands and
// overwrites them in bulk only when they differ from the menu, so
// restarts and failovers do not spend Discord's daily command-create
// budget (Hermes's "safe" sync policy diffs the same way).
//
// An invocation (INTERACTION_CREATE of type APPLICATION_COMMAND) is
// acknowledged at once with a deferred ephemeral response ("thinking…",
// seen by the invoker only), then published as the typed command
// "/<name> <args>" from the invoker in the channel, thread or DM it was
// used in, so it gets a typed command's session key, authorization,
// pairing and answers; the deferred response is then deleted, as Hermes
// does, and the router's answer arrives as an ordinary message in the
// channel. No interaction token leaves the gateway.

const (
	maxCommands    = 100 // global chat-input commands an application may have
	maxDescription = 100
	argsOption     = "args"
	argsDesc       = "Arguments (optional)"
)

// commandName is Discord's rule for a chat-input command's and an
// option's name (lowercase where the script has case).
var commandName = regexp.MustCompile(`^[-_\p{L}\p{N}]{1,32}$`)

// validName reports whether Discord takes name for a command or option.
func validName(name string) bool {
	return commandName.MatchString(name) && strings.ToLower(name) == name
}

// validDescription reports whether Discord takes d as a description.
func validDescription(d string) bool {
	n := utf8.RuneCountInString(d)
	return n >= 1 && n <= maxDescription && utf8.ValidString(d)
}

// slashCommands are the application commands of the menu entries: each
// with an optional string option "args". An entry Discord would refuse
// (a bad name or description, a duplicate, past the 100th) is left out
// and returned in dropped, so that one bad entry does not fail the whole
// overwrite.
func slashCommands(menu []command.MenuEntry) (cmds []*discordgo.ApplicationCommand, dropped []string) {
	seen := map[string]bool{}
	for _, e := range menu {
		if !validName(e.Name) || !validDescription(e.Description) || seen[e.Name] || len(cmds) == maxCommands {
			dropped = append(dropped, e.Name)
			continue
		}
		seen[e.Name] = true
		cmds = append(cmds, &discordgo.ApplicationCommand{
			Type: discordgo.ChatApplicationCommand, Name: e.Name, Description: e.Description,
			Options: []*discordgo.ApplicationCommandOption{{
				Type: discordgo.ApplicationCommandOptionString, Name: argsOption, Description: argsDesc,
			}},
		})
	}
	return cmds, dropped
}

// sameCommands reports whether the registered commands are the wanted
// ones: the same names, types, descriptions and options, in any order.
func sameCommands(have, want []*discordgo.ApplicationCommand) bool {
	key := func(cs []*discordgo.ApplicationCommand) []string {
		out := make([]string, 0, len(cs))
		for _, c := range cs {
			typ := c.Type
			if typ == 0 {
				typ = discordgo.ChatApplicationCommand
			}
			var b strings.Builder
			fmt.Fprintf(&b, "%d\x00%s\x00%s", typ, c.Name, c.Description)
			for _, o := range c.Options {
				fmt.Fprintf(&b, "\x00%d\x00%s\x00%s\x00%t", o.Type, o.Name, o.Description, o.Required)
			}
			out = append(out, b.String())
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(key(have), key(want))
}

// registerCommands makes the application's global commands the menu's:
// a GET, and a bulk overwrite (PUT) only when they differ. It reports
// whether it overwrote them.
func (p *Platform) registerCommands(ctx context.Context) (bool, error) {
	app := p.rules.BotID // a bot's user id is its application's id
	if !snowflake(app) {
		return false, errors.New("discord application id unknown")
	}
	menu := p.menu
	if menu == nil {
		menu = command.Menu()
	}
	want, dropped := slashCommands(menu)
	if len(dropped) > 0 {
		p.log.Warn("discord slash commands Discord would refuse are not registered", "commands", dropped)
	}
	have, err := p.s.ApplicationCommands(app, "", opts(ctx)...)
	if err != nil {
		return false, sendError("list application commands", err)
	}
	if sameCommands(have, want) {
		p.log.Debug("discord slash commands unchanged", "commands", len(want))
		return false, nil
	}
	if _, err := p.s.ApplicationCommandBulkOverwrite(app, "", want, opts(ctx)...); err != nil {
		return false, sendError("overwrite application commands", err)
	}
	p.log.Info("discord slash commands registered", "commands", len(want))
	return true, nil
}

// syncCommands runs registerCommands once per process, retrying a
// failure a few times while the connection lasts.
func (p *Platform) syncCommands(ctx context.Context) {
	if !p.cfg.RegisterCommands || p.registered.Load() {
		return
	}
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(attempt) * 2 * time.Second):
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := p.registerCommands(rctx)
		cancel()
		if err == nil {
			p.registered.Store(true)
			return
		}
		p.log.Warn("discord slash commands not registered", "attempt", attempt+1, "err", err)
		var se *platform.SendError
		if errors.As(err, &se) && se.Class == deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
			return // Discord refused them (a missing applications.commands scope …)
		}
	}
}

// maxOptionDepth bounds how deep subcommand groups nest (Discord: a
// group holds subcommands, which hold options).
const maxOptionDepth = 3

// commandText is the typed command an invocation stands for: "/<name>"
// and then, in order, each subcommand's name and each option's value
// (strings as given, numbers without exponent, booleans as true/false),
// separated by single spaces; an empty value adds nothing. ok is false
// for a name Discord could not have registered or options nested past
// subcommand groups.
func commandText(data discordgo.ApplicationCommandInteractionData) (string, bool) {
	if !validName(data.Name) {
		return "", false
	}
	parts := []string{"/" + data.Name}
	var walk func(os []*discordgo.ApplicationCommandInteractionDataOption, depth int) bool
	walk = func(os []*discordgo.ApplicationCommandInteractionDataOption, depth int) bool {
		if depth > maxOptionDepth {
			return false
		}
		for _, o := range os {
			if o == nil {
				continue
			}
			switch o.Type {
			case discordgo.ApplicationCommandOptionSubCommand, discordgo.ApplicationCommandOptionSubCommandGroup:
				if !validName(o.Name) {
					return false
				}
				parts = append(parts, o.Name)
				if !walk(o.Options, depth+1) {
					return false
				}
				continue
			}
			if v := optionValue(o.Value); v != "" {
				parts = append(parts, v)
			}
		}
		return true
	}
	if !walk(data.Options, 1) {
		return "", false
	}
	return strings.Join(parts, " "), true
}

// optionValue is an option's value as typed text.
func optionValue(v any) string {
	switch v := v.(type) {
	case string:
		return strings.TrimSpace(strings.ToValidUTF8(v, "\uFFFD"))
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return ""
		}
		if v == math.Trunc(v) && math.Abs(v) < 1e15 {
			return strconv.FormatInt(int64(v), 10)
		}
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	}
	return ""
}

// invoked turns an application command interaction into the typed
// command it stands for, or says why it is skipped. The event id is
// the interaction's id, the same in every delivery of the dispatch.
func invoked(in *discordgo.Interaction, ch channelInfo, r rules) (*eventsv1.MessageReceived, skip) {
	if in.Type != discordgo.InteractionApplicationCommand {
		return nil, skip(fmt.Sprintf("interaction type %d", in.Type))
	}
	data, ok := in.Data.(discordgo.ApplicationCommandInteractionData)
	if !ok || (data.CommandType != 0 && data.CommandType != discordgo.ChatApplicationCommand) {
		return nil, "not a slash command"
	}
	text, ok := commandText(data)
	if !ok {
		return nil, "malformed slash command"
	}
	src, u, why := interactionSource(in, ch, r)
	if src == nil {
		return nil, why
	}
	id := "slash:" + in.ID
	return &eventsv1.MessageReceived{
		EventId: id, MessageId: id, Source: src, Text: text, Mentioned: true,
		TransportAuthenticated: src.GetChatType() != "dm" && !u.Bot && hasRole(in.Member, r.AllowedRoles),
		SentAt:                 timestamppb.Now(),
		// Its message id names no Discord message to react to.
		NoReaction:   true,
		SlashCommand: true,
	}, ""
}

// handleCommand acknowledges a slash command with a deferred ephemeral
// response (Discord wants an answer within 3 s, whatever the bus does),
// publishes it as the typed command (see invoked) until the bus takes it
// or the connection ends, then deletes the deferred response: the
// answer comes as a message in the channel. A redelivered interaction
// is published once (its event id); its second acknowledgement is
// refused by Discord as already given, which is fine.
func (p *Platform) handleCommand(ctx context.Context, conn platform.Conn, in *discordgo.Interaction) {
	actx, cancel := context.WithTimeout(ctx, ackWithin)
	ack := &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredChannelMessageWithSource,
		Data: &discordgo.InteractionResponseData{Flags: discordgo.MessageFlagsEphemeral}}
	err := p.s.InteractionRespond(in, ack, opts(actx)...)
	cancel()
	switch {
	case err == nil:
	case isCode(err, discordgo.ErrCodeInteractionHasAlreadyBeenAcknowledged):
		p.log.Debug("discord interaction already acknowledged", "interaction_id", in.ID)
	default:
		p.log.Warn("acknowledge discord slash command", "interaction_id", in.ID, "err", err)
	}
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(min(time.Duration(attempt)*200*time.Millisecond, 5*time.Second)):
			}
		}
		var ch channelInfo
		if in.GuildID != "" {
			if ch, err = p.channel(ctx, in.ChannelID); err != nil {
				if refused(err) {
					conn.Reject(ctx, "channel lookup refused", err)
					break
				}
				p.log.Warn("discord channel lookup failed; retrying", "channel", in.ChannelID, "err", err)
				continue
			}
		}
		ev, why := invoked(in, ch, p.rules)
		if ev == nil {
			p.log.Debug("discord slash command skipped", "why", string(why), "interaction_id", in.ID)
			break
		}
		if _, err = conn.Deliver(ctx, ev); err == nil || errors.Is(err, platform.ErrRejected) {
			break
		}
		p.log.Warn("discord slash command not published; retrying", "interaction_id", in.ID, "err", err)
	}
	// Off the reading goroutine: the next dispatch need not wait for it.
	go func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := p.s.InteractionResponseDelete(in, opts(dctx)...); err != nil && !isCode(err, discordgo.ErrCodeUnknownMessage) {
			p.log.Debug("delete discord deferred response", "interaction_id", in.ID, "err", err)
		}
	}()
}
