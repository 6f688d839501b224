package discord

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/bwmarrin/discordgo"
	"google.golang.org/protobuf/types/known/timestamppb"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// An approval prompt is posted with one row of Hermes's four buttons:
// "Allow Once" (green), "Allow Session" (grey), "Always Allow"
// (blurple), "Deny" (red). A press arrives as an INTERACTION_CREATE of
// type MESSAGE_COMPONENT over the gateway websocket; the gateway
// publishes the command the button stands for, typed by whoever pressed
// it in the prompt's channel (or thread), then acknowledges the
// interaction (a deferred message update: the card stays as it is until
// the router's answer edits it). The answer's edit sends components=[],
// which takes the buttons off.
//
// A button's custom_id is "ea:<choice>" or "ea:<choice>:<tool call id>"
// (as on Telegram and Slack), the call's id only where it is printable
// ASCII and the whole fits Discord's 100 characters.
//
// A picker (the /model picker, SendRequested.picker) is its rows as
// action rows: a row with a placeholder is a string select menu (the
// router's /model picker on Discord is Hermes's select menus), each
// option's value platform.PickerPayload, the menu's custom_id "pm:<n>";
// any other row is grey buttons (red for a choice marked danger), each
// custom_id platform.PickerPayload (as on Telegram), a button that does
// nothing disabled. A selection is published as the press of the chosen
// option's button.

const (
	customIDPrefix = "ea:"
	maxCustomID    = 100
)

// approvalButton is how one choice is shown.
type approvalButton struct {
	label string
	style discordgo.ButtonStyle
}

// approvalButtons are Hermes's Discord buttons of the choices.
var approvalButtons = map[string]approvalButton{
	"once":    {"Allow Once", discordgo.SuccessButton},
	"session": {"Allow Session", discordgo.SecondaryButton},
	"always":  {"Always Allow", discordgo.PrimaryButton},
	"deny":    {"Deny", discordgo.DangerButton},
}

// choiceCommands are the typed commands the choices stand for (what the
// Telegram and Slack gateways publish too).
var choiceCommands = map[string]string{
	"once": "/approve", "session": "/approve session", "always": "/approve always", "deny": "/deny",
}

// approvalComponents are the components of an approval prompt: one
// action row of buttons (nil when no choice is asked for or a choice is
// none the gateway knows; at most five buttons fit a row).
func approvalComponents(a *deliveryv1.Approval) []discordgo.MessageComponent {
	choices := a.GetChoices()
	if len(choices) == 0 || len(choices) > 5 {
		return nil
	}
	var buttons []discordgo.MessageComponent
	for _, c := range choices {
		b, ok := approvalButtons[c]
		if !ok {
			return nil
		}
		id := customIDPrefix + c
		if call := a.GetToolCallId(); validCall(call) && len(id)+1+len(call) <= maxCustomID {
			id += ":" + call
		}
		buttons = append(buttons, discordgo.Button{Label: b.label, Style: b.style, CustomID: id})
	}
	return []discordgo.MessageComponent{discordgo.ActionsRow{Components: buttons}}
}

// Discord's limits on a message's components.
const (
	maxRows        = 5
	maxRowButtons  = 5
	maxButtonLabel = 80
	// A select menu fills its row and takes 25 options; an option's
	// label, value and description take 100 characters, its placeholder
	// 150.
	maxMenuOptions     = 25
	maxOptionText      = 100
	maxMenuPlaceholder = 150
	menuIDPrefix       = "pm:"
)

// cut is s cut to n characters, the last one "…" when it is cut.
func cut(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// pickerRow is one action row of a picker in the making: a menu or
// buttons.
type pickerRow struct {
	menu    *discordgo.SelectMenu
	buttons []discordgo.MessageComponent
}

// pickerComponents are the components of a picker (the /model picker):
// the router's rows, a menu row as a string select menu whose options'
// values are platform.PickerPayload, any other as buttons whose
// custom_id is, a button that does nothing shown disabled. Discord takes
// five action rows of five buttons or one menu: past five rows,
// neighbouring rows of buttons are joined where they fit, and what
// still does not fit is left out, as is a choice that cannot be carried
// (and a menu left with no option). nil for no picker.
func pickerComponents(pk *deliveryv1.Picker) []discordgo.MessageComponent {
	var rows []pickerRow
	place := 0
	for n, r := range pk.GetRows() {
		if ph := r.GetPlaceholder(); ph != "" {
			menu := &discordgo.SelectMenu{MenuType: discordgo.StringSelectMenu, CustomID: menuIDPrefix + strconv.Itoa(n),
				Placeholder: cut(ph, maxMenuPlaceholder)}
			seen := map[string]bool{}
			for _, c := range r.GetChoices() {
				value := platform.PickerPayload(c, place)
				place++
				if value == "" || len(value) > maxOptionText || c.GetLabel() == "" || seen[value] || len(menu.Options) == maxMenuOptions ||
					c.GetCommand() == "" && c.GetData() == "" {
					continue
				}
				seen[value] = true
				menu.Options = append(menu.Options, discordgo.SelectMenuOption{Label: cut(c.GetLabel(), maxOptionText), Value: value,
					Description: cut(c.GetDescription(), maxOptionText)})
			}
			if len(menu.Options) > 0 {
				rows = append(rows, pickerRow{menu: menu})
			}
			continue
		}
		var row []discordgo.MessageComponent
		for _, c := range r.GetChoices() {
			id := platform.PickerPayload(c, place)
			place++
			if id == "" || c.GetLabel() == "" || len(id) > maxCustomID || len(row) == maxRowButtons {
				continue
			}
			b := discordgo.Button{Label: cut(c.GetLabel(), maxButtonLabel), Style: discordgo.SecondaryButton, CustomID: id}
			if c.GetDanger() {
				b.Style = discordgo.DangerButton
			}
			if c.GetCommand() == "" && c.GetData() == "" {
				b.Disabled = true
			}
			row = append(row, b)
		}
		if len(row) > 0 {
			rows = append(rows, pickerRow{buttons: row})
		}
	}
	for i := 0; len(rows) > maxRows && i < len(rows)-1; {
		a, b := rows[i], rows[i+1]
		if a.menu == nil && b.menu == nil && len(a.buttons)+len(b.buttons) <= maxRowButtons {
			rows[i].buttons = append(a.buttons, b.buttons...)
			rows = append(rows[:i+1], rows[i+2:]...)
			continue
		}
		i++
	}
	if len(rows) > maxRows {
		rows = rows[:maxRows]
	}
	var out []discordgo.MessageComponent
	for _, row := range rows {
		if row.menu != nil {
			out = append(out, discordgo.ActionsRow{Components: []discordgo.MessageComponent{*row.menu}})
			continue
		}
		out = append(out, discordgo.ActionsRow{Components: row.buttons})
	}
	return out
}

// components are the buttons a send or an edit shows: an approval
// prompt's or a picker's; nil for none.
func components(req *deliveryv1.SendRequested) []discordgo.MessageComponent {
	if c := approvalComponents(req.GetApproval()); c != nil {
		return c
	}
	return pickerComponents(req.GetPicker())
}

// validCall reports whether a tool call id can ride in a custom_id.
func validCall(id string) bool {
	return id != "" && len(id) <= maxCustomID && strings.IndexFunc(id, func(r rune) bool {
		return r > unicode.MaxASCII || !unicode.IsPrint(r) || r == ' '
	}) < 0
}

// parseCustomID reads an approval button's custom_id: the typed command
// it stands for and the tool call it names ("" for none). ok is false
// for any other custom_id.
func parseCustomID(id string) (command, call string, ok bool) {
	if len(id) > maxCustomID {
		return "", "", false
	}
	rest, found := strings.CutPrefix(id, customIDPrefix)
	if !found {
		return "", "", false
	}
	choice, call, _ := strings.Cut(rest, ":")
	command, ok = choiceCommands[choice]
	if !ok || (call != "" && !validCall(call)) {
		return "", "", false
	}
	return command, call, true
}

// parseInteraction reads the d of an INTERACTION_CREATE dispatch. Its
// id and token become a REST path (the acknowledgement), so the id must
// be a snowflake and the token URL-safe.
func parseInteraction(raw []byte) (*discordgo.Interaction, error) {
	var in discordgo.Interaction
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("%w: interaction: %v", errMalformed, err)
	}
	if !snowflake(in.ID) || !urlSafe(in.Token) {
		return nil, fmt.Errorf("%w: interaction id or token", errMalformed)
	}
	return &in, nil
}

// unreadInteraction is the answer to an interaction the gateway cannot
// read (answerUnread), which only its user sees.
const unreadInteraction = "⚠️ This interaction could not be read, so nothing was done."

// unreadIDs reads the id, token and type of an interaction that does
// not parse (parseInteraction), each field alone, so that one field of
// another shape elsewhere does not hide them. ok is false when the id
// or the token cannot be read or used (no answer can be sent).
func unreadIDs(raw []byte) (id, token string, typ discordgo.InteractionType, ok bool) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return "", "", 0, false
	}
	if json.Unmarshal(fields["id"], &id) != nil || json.Unmarshal(fields["token"], &token) != nil ||
		!snowflake(id) || !urlSafe(token) {
		return "", "", 0, false
	}
	_ = json.Unmarshal(fields["type"], &typ) // unknown: answered as a message
	return id, token, typ, true
}

// answerUnread acknowledges an interaction the gateway cannot read
// (malformed, or of a type it does not know), when its id and token can
// be read: an ephemeral message says it was not read, where Discord
// would show "This interaction failed" after 3 s. An autocomplete takes
// no message: it is answered with no choices. Best effort, logged; on
// the reading goroutine, as the other acknowledgements are, bounded by
// ackWithin.
func (p *Platform) answerUnread(ctx context.Context, raw []byte) {
	id, token, typ, ok := unreadIDs(raw)
	if !ok {
		p.log.Warn("discord interaction not read and not answerable (no usable id or token)")
		return
	}
	resp := unreadResponse()
	if typ == discordgo.InteractionApplicationCommandAutocomplete {
		resp = &discordgo.InteractionResponse{Type: discordgo.InteractionApplicationCommandAutocompleteResult,
			Data: &discordgo.InteractionResponseData{Choices: []*discordgo.ApplicationCommandOptionChoice{}}}
	}
	actx, cancel := context.WithTimeout(ctx, ackWithin)
	defer cancel()
	if err := p.s.InteractionRespond(&discordgo.Interaction{ID: id, Token: token}, resp, opts(actx)...); err != nil {
		if isCode(err, discordgo.ErrCodeInteractionHasAlreadyBeenAcknowledged) {
			p.log.Debug("discord interaction already acknowledged", "interaction_id", id)
			return
		}
		p.log.Warn("answer a discord interaction not read", "interaction_id", id, "type", int(typ), "err", redact(err, token))
		return
	}
	p.log.Info("discord interaction not read; its user was told", "interaction_id", id, "type", int(typ))
}

// unreadResponse is the ephemeral message that answers an interaction
// the gateway cannot read (answerUnread), or the press of a component
// it does not know (unknownComponent).
func unreadResponse() *discordgo.InteractionResponse {
	return &discordgo.InteractionResponse{Type: discordgo.InteractionResponseChannelMessageWithSource,
		Data: &discordgo.InteractionResponseData{Content: unreadInteraction, Flags: discordgo.MessageFlagsEphemeral}}
}

// Why pressed skips the press of a component the gateway does not know:
// none it sends (a Hermes view's, whose ids discord.py made, say).
const (
	skipNotAButton    skip = "not a button"
	skipUnknownMenu   skip = "unknown menu"
	skipUnknownButton skip = "unknown button"
)

// unknownComponent reports whether pressed skipped a press for its
// component: its user is told that nothing was done (unreadResponse),
// where other skips (an inert button, the bot's own, a channel not
// allowed) are acknowledged without a word.
func unknownComponent(why skip) bool {
	return why == skipNotAButton || why == skipUnknownMenu || why == skipUnknownButton
}

// urlSafe reports whether a token can be pasted into a REST path:
// 1 to 500 characters of letters, digits, '-', '_' and '.'.
func urlSafe(s string) bool {
	if s == "" || len(s) > 500 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// pressed turns a component interaction into the press of an approval
// button or a picker's (a button, or an option of its menu), or says
// why it is skipped. ch describes the interaction's
// channel (guild presses only). The event id is the interaction's id,
// the same in every delivery of the dispatch; the press names the
// prompt (the message the button is on) and the tool call, and carries
// the interaction (a component's: see followup) for the router to answer
// a presser it does not authorize privately, as Hermes's views do. now
// is when the interaction arrived: its token ends interactionTTL later.
func pressed(in *discordgo.Interaction, ch channelInfo, r rules, now time.Time) (*eventsv1.MessageReceived, skip) {
	if in.Type != discordgo.InteractionMessageComponent {
		return nil, skip(fmt.Sprintf("interaction type %d", in.Type))
	}
	data, ok := in.Data.(discordgo.MessageComponentInteractionData)
	if !ok {
		return nil, skipNotAButton
	}
	var command, call, choice string
	switch data.ComponentType {
	case discordgo.ButtonComponent:
		command, call, ok = parseCustomID(data.CustomID)
		if !ok {
			var inert bool
			command, choice, inert, ok = platform.ParsePickerPayload(data.CustomID)
			if inert {
				return nil, "inert button"
			}
		}
	case discordgo.SelectMenuComponent:
		// A picker's menu: the option chosen is the press of its button.
		if !strings.HasPrefix(data.CustomID, menuIDPrefix) || len(data.Values) != 1 || len(data.Values[0]) > maxOptionText {
			return nil, skipUnknownMenu
		}
		var inert bool
		command, choice, inert, ok = platform.ParsePickerPayload(data.Values[0])
		if inert {
			return nil, "inert option"
		}
	default:
		return nil, skipNotAButton
	}
	if !ok {
		return nil, skipUnknownButton
	}
	if in.Message == nil || !snowflake(in.Message.ID) {
		return nil, "button press without its message, user or channel"
	}
	src, u, why := interactionSource(in, ch, r)
	if src == nil {
		return nil, why
	}
	dm := src.GetChatType() == "dm"
	id := "press:" + in.ID
	ia := interactionOf(in, now)
	if ia != nil {
		ia.Component = true
	}
	return &eventsv1.MessageReceived{
		EventId: id, MessageId: id, Source: src, Text: command, Mentioned: true,
		TransportAuthenticated: !dm && !u.Bot && hasRole(in.Member, r.AllowedRoles),
		SentAt:                 timestamppb.New(now),
		ButtonPress:            &eventsv1.ButtonPress{MessageId: in.Message.ID, ToolCallId: call, Data: choice},
		// Its message id names no Discord message to react to.
		NoReaction:  true,
		Interaction: ia,
	}, ""
}

// interactionSource is the session source of an interaction (a button
// press or a slash command): its user in the channel, thread or DM it
// came from, as a message there would have, or why it is skipped (no
// user or channel, the bot's own, a channel not allowed or ignored).
// ch describes the channel (guild interactions only).
func interactionSource(in *discordgo.Interaction, ch channelInfo, r rules) (*eventsv1.SessionSource, *discordgo.User, skip) {
	u := in.User
	if in.Member != nil && in.Member.User != nil {
		u = in.Member.User
	}
	if u == nil || u.ID == "" || in.ChannelID == "" {
		return nil, nil, "interaction without its user or channel"
	}
	if u.ID == r.BotID {
		return nil, nil, "own interaction"
	}
	dm := in.GuildID == ""
	src := &eventsv1.SessionSource{
		Platform: "discord", Account: r.Account, ChatId: in.ChannelID,
		UserId: u.ID, UserName: displayName(u, in.Member), ScopeId: in.GuildID, IsBot: u.Bot,
	}
	switch {
	case dm:
		src.ChatType = "dm"
	case ch.Thread:
		src.ChatType, src.ThreadId, src.ParentChatId = "thread", in.ChannelID, ch.Parent
	default:
		src.ChatType = "group"
	}
	if !dm && len(r.AllowedChannels) > 0 && !r.AllowedChannels[in.ChannelID] && !(ch.Thread && r.AllowedChannels[ch.Parent]) {
		return nil, nil, "channel not allowed"
	}
	if !dm && (r.IgnoredChannels["*"] || r.IgnoredChannels[in.ChannelID] || (ch.Thread && r.IgnoredChannels[ch.Parent])) {
		return nil, nil, "channel ignored"
	}
	return src, u, ""
}
