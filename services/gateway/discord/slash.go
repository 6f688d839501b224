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
// menu (pkg/command, /help's order) is a global chat-input command. The
// commands Hermes registers with options of their own have those
// options (commandOptions: /model's name, /reasoning's effort, /voice's
// mode with its choices …); every other one takes one optional
// free-text option, "args", as Hermes's auto-registered commands do. At
// connect, the replica that holds the connection reads the
// application's global commands and overwrites them in bulk only when
// they differ from the menu (names, descriptions, options and choices),
// so restarts and failovers do not spend Discord's daily command-create
// budget (Hermes's "safe" sync policy diffs the same way).
//
// An invocation (INTERACTION_CREATE of type APPLICATION_COMMAND) is
// acknowledged at once with a deferred ephemeral response ("thinking…",
// seen by the invoker only), then published as the typed command
// "/<name> <option values>" from the invoker in the channel, thread or
// DM it was used in, so it gets a typed command's session key,
// authorization, pairing and answers; the deferred response is then
// deleted, as Hermes does, and the router's answer arrives as an
// ordinary message in the channel. The one answer that is private is
// the refusal of a sender who is not allowed ("You're not authorized to
// use this command.", ephemeral in Hermes too): the event carries the
// interaction (id, application id, token, when the token ends), the
// router puts it on the refusal's target only, and Send posts the
// refusal as an ephemeral followup (POST /webhooks/<app>/<token>, flags
// 64), after deleting the deferred response itself (a followup sent
// while the response is still deferred would take its place, and the
// connection's own deletion would take the refusal with it; any replica
// may send it). An expired or refused token sends the refusal to the
// channel instead. The token is a credential: it is kept out of logs
// and error texts (redact).

const (
	maxCommands    = 100 // global chat-input commands an application may have
	maxDescription = 100
	argsOption     = "args"
	argsDesc       = "Arguments (optional)"
	// interactionTTL is how long Discord takes an interaction's token.
	interactionTTL = 15 * time.Minute
)

// commandOption is a command's option of its own, as Hermes registers
// it: its name, description, type (a string when zero), whether it is
// required, and its choices (display name and value).
type commandOption struct {
	name, desc string
	typ        discordgo.ApplicationCommandOptionType
	required   bool
	choices    [][2]string
}

// commandOptions are the options Hermes's Discord adapter gives the
// commands it registers by hand (_register_slash_commands), with its
// names, descriptions and choices; each is a command's only option, so
// its value follows the command's name in the typed text. /insights
// keeps Hermes's integer "days", described with this gateway's default
// (30 days; Hermes sends 7 when it is left out, this gateway sends
// nothing, and the command's own default applies).
var commandOptions = map[string]commandOption{
	"model":       {name: "name", desc: "Model name (e.g. anthropic/claude-sonnet-4). Leave empty to see current."},
	"reasoning":   {name: "effort", desc: "Reasoning effort: none, minimal, low, medium, high, or xhigh."},
	"personality": {name: "name", desc: "Personality name. Leave empty to list available."},
	"steer":       {name: "prompt", desc: "Text to inject into the agent's next tool result", required: true},
	"title":       {name: "name", desc: "Session title. Leave empty to show current."},
	"resume":      {name: "name", desc: "Session name to resume. Leave empty to list sessions."},
	"insights":    {name: "days", desc: "Number of days to analyze (default: 30)", typ: discordgo.ApplicationCommandOptionInteger},
	"voice": {name: "mode", desc: "Voice mode: join, channel, leave, on, tts, off, or status", choices: [][2]string{
		{"join — join your voice channel", "join"},
		{"channel — join your voice channel (alias)", "channel"},
		{"leave — leave voice channel", "leave"},
		{"on — voice reply to voice messages", "on"},
		{"tts — voice reply to all messages", "tts"},
		{"off — text only", "off"},
		{"status — show current mode", "status"},
	}},
	"approve":    {name: "scope", desc: "Optional: 'all', 'session', 'always', 'all session', 'all always'"},
	"deny":       {name: "scope", desc: "Optional: 'all' to deny all pending commands"},
	"queue":      {name: "prompt", desc: "The prompt to queue", required: true},
	"background": {name: "prompt", desc: "The prompt to run in the background", required: true},
}

// argsHints are the arguments Hermes's command registry names for
// commands it registers with "args" (args_hint): their "args" is
// described "Arguments: <hint>", as Hermes's auto-registration does.
var argsHints = map[string]string{
	"fast":      "[normal|fast|status]",
	"busy":      "[queue|steer|interrupt|status]",
	"moa":       "<prompt>",
	"memory":    "[pending|approve|reject|approval] [id|on|off]",
	"approvals": "[manual|smart|off]",
}

// options are the options of the command name.
func options(name string) []*discordgo.ApplicationCommandOption {
	o, ok := commandOptions[name]
	if !ok {
		desc := argsDesc
		if h := argsHints[name]; h != "" {
			desc = "Arguments: " + h
		}
		return []*discordgo.ApplicationCommandOption{{Type: discordgo.ApplicationCommandOptionString, Name: argsOption, Description: desc}}
	}
	typ := o.typ
	if typ == 0 {
		typ = discordgo.ApplicationCommandOptionString
	}
	opt := &discordgo.ApplicationCommandOption{Type: typ, Name: o.name, Description: o.desc, Required: o.required}
	for _, c := range o.choices {
		opt.Choices = append(opt.Choices, &discordgo.ApplicationCommandOptionChoice{Name: c[0], Value: c[1]})
	}
	return []*discordgo.ApplicationCommandOption{opt}
}

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

// slashCommands are the application commands of the menu entries, each
// with its options (options). An entry Discord would refuse
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
			Options: options(e.Name),
		})
	}
	return cmds, dropped
}

// sameCommands reports whether the registered commands are the wanted
// ones: the same names, types, descriptions and options (their types,
// names, descriptions, whether required, choices and nested options, in
// order), the commands in any order.
func sameCommands(have, want []*discordgo.ApplicationCommand) bool {
	var optionKey func(b *strings.Builder, list []*discordgo.ApplicationCommandOption)
	optionKey = func(b *strings.Builder, list []*discordgo.ApplicationCommandOption) {
		for _, o := range list {
			if o == nil {
				b.WriteString("\x00nil")
				continue
			}
			fmt.Fprintf(b, "\x00(%d\x00%s\x00%s\x00%t", o.Type, o.Name, o.Description, o.Required)
			for _, c := range o.Choices {
				if c != nil {
					fmt.Fprintf(b, "\x00%s=%v", c.Name, c.Value)
				}
			}
			optionKey(b, o.Options)
			b.WriteString("\x00)")
		}
	}
	key := func(cs []*discordgo.ApplicationCommand) []string {
		out := make([]string, 0, len(cs))
		for _, c := range cs {
			typ := c.Type
			if typ == 0 {
				typ = discordgo.ChatApplicationCommand
			}
			var b strings.Builder
			fmt.Fprintf(&b, "%d\x00%s\x00%s", typ, c.Name, c.Description)
			optionKey(&b, c.Options)
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
	p.menuMu.Lock()
	menu := p.menu
	p.menuMu.Unlock()
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

// SetMenu replaces the menu the slash commands are registered from (a
// skill reload changed the skills that run on Discord) and registers it
// at once when the bot's identity is known, as Hermes's
// refresh_skill_group re-registers its skill commands; otherwise, or when
// Discord refuses, the next connect registers it (syncCommands). Every
// replica registers the same menu: the GET-and-compare makes the others'
// calls no-ops.
func (p *Platform) SetMenu(ctx context.Context, menu []command.MenuEntry) {
	p.menuMu.Lock()
	p.menu = slices.Clone(menu)
	p.menuMu.Unlock()
	p.registered.Store(false)
	if !p.cfg.RegisterCommands || !p.signedIn.Load() {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := p.registerCommands(rctx); err != nil {
		p.log.Warn("discord slash commands not refreshed; the next connect registers them", "err", err)
		return
	}
	p.registered.Store(true)
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
// the interaction's id, the same in every delivery of the dispatch. now
// is when the interaction arrived: its token ends interactionTTL later.
func invoked(in *discordgo.Interaction, ch channelInfo, r rules, now time.Time) (*eventsv1.MessageReceived, skip) {
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
		SentAt:                 timestamppb.New(now),
		// Its message id names no Discord message to react to.
		NoReaction:   true,
		SlashCommand: true,
		Interaction:  interactionOf(in, now),
	}, ""
}

// interactionOf is what answering in only the invoker's sight takes
// (see Send), or nil when the interaction lacks it: an application id
// that is a snowflake and a token that can go into a REST path.
func interactionOf(in *discordgo.Interaction, now time.Time) *eventsv1.Interaction {
	if !snowflake(in.ID) || !snowflake(in.AppID) || !urlSafe(in.Token) {
		return nil
	}
	return &eventsv1.Interaction{Id: in.ID, ApplicationId: in.AppID, Token: in.Token,
		ExpiresAt: timestamppb.New(now.Add(interactionTTL))}
}

// handleCommand acknowledges a slash command with a deferred ephemeral
// response (Discord wants an answer within 3 s, whatever the bus does),
// publishes it as the typed command (see invoked) until the bus takes it
// or the connection ends, then deletes the deferred response: the
// answer comes as a message in the channel. A redelivered interaction
// is published once (its event id); its second acknowledgement is
// refused by Discord as already given, which is fine.
func (p *Platform) handleCommand(ctx context.Context, conn platform.Conn, in *discordgo.Interaction) {
	arrived := time.Now()
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
		p.log.Warn("acknowledge discord slash command", "interaction_id", in.ID, "err", redact(err, in.Token))
	}
	untilDone(ctx, 200*time.Millisecond, 5*time.Second, func() bool {
		ch, settled, err := p.channelOf(ctx, conn, in.GuildID, in.ChannelID)
		if settled || err != nil {
			return settled
		}
		ev, why := invoked(in, ch, p.rules, arrived)
		if ev == nil {
			p.log.Debug("discord slash command skipped", "why", string(why), "interaction_id", in.ID)
			return true
		}
		return p.delivered(ctx, conn, ev, "slash command", in.ID)
	})
	// Off the reading goroutine: the next dispatch need not wait for it.
	go func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := p.s.InteractionResponseDelete(in, opts(dctx)...); err != nil && !isCode(err, discordgo.ErrCodeUnknownMessage) {
			p.log.Debug("delete discord deferred response", "interaction_id", in.ID, "err", redact(err, in.Token))
		}
	}()
}

// followupGrace: a token that ends within it is not used (the followup
// would race its end); the answer goes to the channel.
const followupGrace = 30 * time.Second

// followup sends req as an ephemeral followup of the interaction on its
// target (Target.interaction), seen by the invoker only, and reports
// whether it took care of req. A command's followup goes out once the
// command's deferred response is deleted; a press's (Interaction.component)
// leaves its response message alone, which is the message carrying the
// buttons. When the followup cannot be sent (an interaction without a
// usable token, a token that has ended or that Discord refuses, a
// followup Discord refuses for good, a request with attachments) a
// command's answer is not taken care of, and the caller posts it to
// the channel instead; a press's is dropped, since the presser alone was
// to see it. A failure worth another try (429, 5xx, the network, a
// press's interaction not yet acknowledged) is returned, and delivery
// tries again with the token while it lasts. Errors have the token
// blanked out: delivery logs and stores their texts.
func (p *Platform) followup(ctx context.Context, req *deliveryv1.SendRequested) (string, bool, error) {
	ia := req.GetTarget().GetInteraction()
	// notSent is the answer when no followup can be sent.
	notSent := func(msg string, args ...any) (string, bool, error) {
		if ia.GetComponent() {
			p.log.Warn(msg+"; dropping the press's private answer", append(args, "interaction_id", ia.GetId())...)
			return "", true, nil
		}
		p.log.Warn(msg+"; answering in the channel", append(args, "interaction_id", ia.GetId())...)
		return "", false, nil
	}
	text := req.GetText()
	if n := utf8.RuneCountInString(text); len(req.GetAttachments()) > 0 || n == 0 || n > 2000 {
		return notSent("discord followup of attachments or an unfit length")
	}
	if !snowflake(ia.GetId()) || !snowflake(ia.GetApplicationId()) || !urlSafe(ia.GetToken()) {
		return notSent("discord interaction unusable")
	}
	if ia.GetExpiresAt() == nil || time.Now().Add(followupGrace).After(ia.GetExpiresAt().AsTime()) {
		return notSent("discord interaction token expired")
	}
	in := &discordgo.Interaction{ID: ia.GetId(), AppID: ia.GetApplicationId(), Token: ia.GetToken()}
	// A command's deferred response goes first: a followup sent while it
	// is still deferred would take its place, and the deletion the
	// connection's replica makes after publishing the command would take
	// the followup with it. Whichever of the two deletions comes second
	// is answered Unknown Message. A press's response message is the
	// message with the buttons (a deferred update): never deleted.
	if !ia.GetComponent() {
		if err := p.s.InteractionResponseDelete(in, opts(ctx)...); err != nil && !isCode(err, discordgo.ErrCodeUnknownMessage) {
			if refused(err) {
				return notSent("discord interaction refused", "err", redact(err, ia.GetToken()))
			}
			return "", true, redact(sendError("delete deferred response", err), ia.GetToken())
		}
	}
	m, err := p.s.FollowupMessageCreate(in, true, &discordgo.WebhookParams{Content: text,
		Flags: discordgo.MessageFlagsEphemeral, AllowedMentions: p.cfg.AllowMentions.allowed()}, opts(ctx)...)
	switch {
	case err == nil:
		if m == nil {
			return "", true, nil
		}
		return m.ID, true, nil
	case ia.GetComponent() && isCode(err, discordgo.ErrCodeUnknownWebhook):
		// The gateway publishes a press before it acknowledges it (see
		// handlePress), and Discord knows no followup webhook for an
		// interaction not yet acknowledged: the acknowledgement is on its
		// way, so this is tried again.
		return "", true, redact(fmt.Errorf("discord create followup: press not acknowledged yet: %w", err), ia.GetToken())
	case refused(err):
		return notSent("discord followup refused", "err", redact(err, ia.GetToken()))
	}
	return "", true, redact(sendError("create followup", err), ia.GetToken())
}

// redacted is an error whose text has a secret blanked out: discordgo
// puts an interaction's token into request URLs and rate-limit buckets,
// and so into the texts of its errors, which are logged and stored
// (delivery's last_error). errors.Is and errors.As see what it wraps.
type redacted struct {
	err    error
	secret string
}

func (r redacted) Error() string { return strings.ReplaceAll(r.err.Error(), r.secret, "<token>") }
func (r redacted) Unwrap() error { return r.err }

// redact blanks secret out of err's text.
func redact(err error, secret string) error {
	if err == nil || secret == "" {
		return err
	}
	return redacted{err: err, secret: secret}
}
