package router

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// The /model picker (Hermes's send_model_picker). A bare /model, where
// models are offered (agent.models, else the provider's own list:
// models.go) and the platform's gateway renders buttons
// (pickerPlatforms), answers with the session's model and Hermes's
// keyboard: one button per model, two a row, eight a page, the current
// one marked "✓", a "◀ Prev", "n/N", "Next ▶" row when there are
// pages, and "✗ Cancel". Switchboard has one provider, so the picker
// opens on its models, as Hermes's does for a single provider.
//
// A button is the typed command it stands for ("/model gpt-4o"), from
// whoever presses it, so allowlists and admin rules apply as to typing;
// where a command is too long for a button's payload, and for the
// pages and cancel, it is "/model" with the choice's data
// (ButtonPress.data: "m<index>-<checksum>", "p<page>", "x"),
// read against the models offered as they are now. The answer replaces the
// picker: Hermes's "Model switched to …" after a switch (the session's
// model, as /model <name> sets it), another page of buttons, "Model
// selection cancelled.", or "Picker expired — use /model again." for a
// model no longer offered. A picker a press answered stays answered
// (Redis <prefix>pickercard:…, a day): a later press changes nothing.
// On Discord the picker is Hermes's select menus instead (pickermenu.go),
// read the same way. Elsewhere a bare /model lists the models as text.
//
// Outside a DM the picker belongs to the conversation of whoever opened
// it, as Hermes's (its picker's callback switches the session of the
// /model that opened it, whoever presses): every button then carries
// data, ending in ".<owner tag>", the checksum of the opener's session
// key, which Redis maps back to the key (<prefix>pickerowner:…, a
// day). A press switches, pages or cancels that conversation's picker —
// in a group whose sessions are per user, Alice's model when Bob
// presses Alice's picker, not Bob's; a tag Redis no longer knows is an
// expired picker.

// pickerPlatforms are the platforms whose gateways render a picker.
var pickerPlatforms = map[string]bool{"telegram": true, "discord": true}

const (
	// modelPageSize is how many models a page of the picker shows.
	modelPageSize = 8
	// maxChoiceCommand is the longest command a button carries whole
	// (delivery.v1.PickerChoice); a longer one is sent as data.
	maxChoiceCommand = 60
	// maxModelLabel is the longest label, in characters, Hermes gives a
	// model's button; a longer one is cut to 35 and "...".
	maxModelLabel = 38

	pickerHeader    = "⚙ **Model Configuration**"
	pickerCancelled = "Model selection cancelled."
	pickerExpired   = "Picker expired — use /model again."
	modelListFailed = "The provider's model list could not be read just now; `/model <name>` still switches."
)

// modelSentence is what /model says of the session's model.
func modelSentence(sess sessionstore.Session) string {
	model := sess.ModelOverride
	if model == "" {
		model = "the default model"
	}
	return "This session uses " + model + ". /model <name> changes it; /model default goes back."
}

// currentModel is the model the session's turns use: its own, else the
// provider's default ("" when unknown).
func (s *Service) currentModel(sess sessionstore.Session) string {
	if sess.ModelOverride != "" {
		return sess.ModelOverride
	}
	return s.provider.Model
}

// providerLabel names the provider as the picker's texts do.
func (s *Service) providerLabel() string {
	p := s.provider
	switch {
	case p.Agent != "":
		return "external agent"
	case p.Kind == "":
		return "none configured"
	}
	for _, k := range providerKinds {
		if k[0] == p.Kind {
			return k[1]
		}
	}
	return p.Kind
}

// modelLabel is a model's button: Hermes's short name (after the last
// '/'), cut at maxModelLabel characters, "✓ " before the current one.
func modelLabel(id string, current bool) string {
	short := id
	if i := strings.LastIndexByte(id, '/'); i >= 0 && i < len(id)-1 {
		short = id[i+1:]
	}
	if utf8.RuneCountInString(short) > maxModelLabel {
		short = string([]rune(short)[:maxModelLabel-3]) + "..."
	}
	if current {
		short = "✓ " + short
	}
	return short
}

// modelSum is the checksum that binds a model's data to its id, so a
// press of an old picker never picks another model that took its place
// in agent.models.
func modelSum(id string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return fmt.Sprintf("%08x", h.Sum32())
}

// modelChoice is the button of model i of models (those offered) in a
// picker of owner tag ("" a DM's).
func modelChoice(models []string, i int, current, tag string) *deliveryv1.PickerChoice {
	id := models[i]
	c := &deliveryv1.PickerChoice{Label: modelLabel(id, id == current), Command: "/model " + id}
	if len(c.Command) > maxChoiceCommand || tag != "" {
		c.Data = tagged(fmt.Sprintf("m%d-%s", i, modelSum(id)), tag)
	}
	return c
}

// tagged is a button's data in a picker of owner tag.
func tagged(data, tag string) string {
	if tag == "" {
		return data
	}
	return data + "." + tag
}

// modelPage is the picker's text and buttons at page (clamped to the
// pages there are), for the owner tag's conversation ("" a DM's).
func (s *Service) modelPage(sess sessionstore.Session, models []string, page int, tag string) (string, *deliveryv1.Picker) {
	pages := (len(models) + modelPageSize - 1) / modelPageSize
	page = max(0, min(page, pages-1))
	start, end := page*modelPageSize, min((page+1)*modelPageSize, len(models))
	current := s.currentModel(sess)
	picker := &deliveryv1.Picker{}
	for i := start; i < end; i += 2 {
		row := &deliveryv1.PickerRow{}
		for j := i; j < min(i+2, end); j++ {
			row.Choices = append(row.Choices, modelChoice(models, j, current, tag))
		}
		picker.Rows = append(picker.Rows, row)
	}
	info := ""
	if pages > 1 {
		nav := &deliveryv1.PickerRow{}
		if page > 0 {
			nav.Choices = append(nav.Choices, &deliveryv1.PickerChoice{Label: "◀ Prev", Command: "/model", Data: tagged("p"+strconv.Itoa(page-1), tag)})
		}
		nav.Choices = append(nav.Choices, &deliveryv1.PickerChoice{Label: fmt.Sprintf("%d/%d", page+1, pages)})
		if page < pages-1 {
			nav.Choices = append(nav.Choices, &deliveryv1.PickerChoice{Label: "Next ▶", Command: "/model", Data: tagged("p"+strconv.Itoa(page+1), tag)})
		}
		picker.Rows = append(picker.Rows, nav)
		info = fmt.Sprintf(" (%d–%d of %d)", start+1, end, len(models))
	}
	picker.Rows = append(picker.Rows, &deliveryv1.PickerRow{Choices: []*deliveryv1.PickerChoice{{Label: "✗ Cancel", Command: "/model", Data: tagged("x", tag)}}})
	text := fmt.Sprintf("%s\n\n%s\nProvider: **%s**%s\nSelect a model:", pickerHeader, modelSentence(sess), s.providerLabel(), info)
	return text, picker
}

// modelList answers a bare /model where no picker is shown: the
// session's model and, as Hermes's text fallback, the models offered
// and how to switch.
func (s *Service) modelList(sess sessionstore.Session, models []string, listErr error) string {
	text := modelSentence(sess)
	if listErr != nil {
		return text + "\n\n" + modelListFailed
	}
	if len(models) == 0 {
		return text
	}
	quoted := make([]string, len(models))
	for i, id := range models {
		quoted[i] = "`" + id + "`"
	}
	return fmt.Sprintf("%s\n\n**%s** (current):\n  %s\n\n`/model <name>` — switch model", text, s.providerLabel(), strings.Join(quoted, ", "))
}

// pickerData is a picker button's data as the router reads it.
type pickerData struct {
	// kind is 'p' (a page), 'x' (cancel), 'm' (a model), 'v' (a
	// provider's models: the Discord picker's second step) or 'b' (Back
	// to its first); 0 for data the router does not know.
	kind byte
	page int
	// model is the model's id, "" when agent.models no longer has it
	// where the button said.
	model string
	// owner is the picker's owner tag (ownerTag), "" for a DM's picker.
	owner string
}

// ownerTag names the session key a picker outside a DM belongs to.
func ownerTag(key string) string { return modelSum(key) }

// isTag reports whether t is an owner tag: 8 lowercase hex digits.
func isTag(t string) bool {
	if len(t) != 8 {
		return false
	}
	for _, c := range []byte(t) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// parsePickerData reads a picker button's data against models (which a
// press carries from the platform: outside input).
func parsePickerData(data string, models []string) pickerData {
	if len(data) > 24 {
		return pickerData{}
	}
	if base, tag, found := strings.Cut(data, "."); found {
		if !isTag(tag) {
			return pickerData{}
		}
		d := parsePickerData(base, models)
		if d.kind != 0 {
			d.owner = tag
		}
		return d
	}
	switch data {
	case "x", "v", "b":
		return pickerData{kind: data[0]}
	}
	if len(data) < 2 {
		return pickerData{}
	}
	switch data[0] {
	case 'p':
		n, err := strconv.Atoi(data[1:])
		if err != nil || n < 0 || strconv.Itoa(n) != data[1:] {
			return pickerData{}
		}
		return pickerData{kind: 'p', page: n}
	case 'm':
		idx, sum, found := strings.Cut(data[1:], "-")
		i, err := strconv.Atoi(idx)
		if !found || err != nil || i < 0 || strconv.Itoa(i) != idx || len(sum) != 8 {
			return pickerData{}
		}
		if i < len(models) && modelSum(models[i]) == sum {
			return pickerData{kind: 'm', model: models[i]}
		}
		return pickerData{kind: 'm'}
	}
	return pickerData{}
}

// modelCommand answers /model: the session's model (with the picker or
// the list of agent.models), a switch, or a picker's press.
func (s *Service) modelCommand(ctx context.Context, m *msgCtx, sess sessionstore.Session, args string, busy bool) error {
	reply := func(text string) error { return s.notice(ctx, m, sess.Generation, text, "command") }
	// A redelivery (a crash before the dedupe record) of a /model the
	// running turn refused (modelRefused), after the turn ended: the
	// refusal is answered again, under the first answer's ids, and the
	// model the user was told waits is not switched now.
	if done, err := s.replayRefusal(ctx, m, "model"); err != nil || done {
		return err
	}
	if card := m.ev.GetButtonPress().GetMessageId(); card != "" {
		return s.modelPress(ctx, m, sess, card, args, busy)
	}
	if busy {
		// As Hermes, even a question about the model waits.
		return s.modelRefused(ctx, m, sess.Generation)
	}
	if args == "" {
		models, listErr := s.offered(ctx)
		if listErr != nil && !errors.Is(listErr, errNoModelList) {
			return listErr
		}
		if len(models) > 0 && pickerPlatforms[m.platform] {
			tag := ""
			if orDM(m.src.GetChatType()) != "dm" {
				var err error
				if tag, err = s.rememberTagOwner(ctx, m); err != nil {
					return err
				}
			}
			text, picker := s.modelPage(sess, models, 0, tag)
			if menuPlatforms[m.platform] {
				text, picker = s.menuProviders(sess, models, tag)
			}
			return s.publishCommandNotice(ctx, m, sess.Generation, &repliesv1.Notice{Text: text, Picker: picker})
		}
		return reply(s.modelList(sess, models, listErr))
	}
	if refusal, ok := modelFlag(args); ok {
		return reply(refusal)
	}
	name := args
	if !validModelName(name) {
		return reply("That doesn't look like a model name.")
	}
	if name == "default" || name == "reset" {
		name = ""
	}
	if err := s.store.SetModel(ctx, m.key, name); err != nil {
		return err
	}
	if name == "" {
		return reply("This session uses the default model again.")
	}
	return reply("This session now uses " + name + ".")
}

// modelRefused answers a /model (typed, or a picker's press) while the
// turn of the session it would switch runs, at generation gen. The
// refusal is recorded with the event (once), so that a redelivery after
// the turn ended is refused again (modelCommand), not applied.
func (s *Service) modelRefused(ctx context.Context, m *msgCtx, gen int64) error {
	return s.refuseOnce(ctx, m, "model", "Agent is running — wait or /stop first, then switch models.", gen)
}

// modelFlag is the answer to /model's arguments when they hold one of
// Hermes's flags (/model <name> --global, --provider <p>), which change
// nothing here: a chat's model is its own, over the gateway's llm.model,
// and the gateway has one provider. Without it "--global" alone would
// pass for a model name. ok is false when no word is a flag.
func modelFlag(args string) (string, bool) {
	for _, w := range strings.Fields(args) {
		switch {
		case w == "--global":
			return "⚠️ `--global` is not available here: every chat's default is the gateway's llm.model. " +
				"`/model <name>` switches this chat's model.", true
		case w == "--provider" || strings.HasPrefix(w, "--provider="):
			return "⚠️ `--provider` is not available here: the gateway has one provider. " +
				"`/model <name>` switches this chat's model among its models.", true
		case strings.HasPrefix(w, "--"):
			return "That doesn't look like a model name.", true
		}
	}
	return "", false
}

// pickerOwnerKey is the Redis key of the session key a picker of owner
// tag in m's chat belongs to.
func (s *Service) pickerOwnerKey(m *msgCtx, tag string) string {
	return fmt.Sprintf("%spickerowner:%s:%s:%s:%s", s.prefix, m.src.GetPlatform(), m.src.GetAccount(), m.src.GetChatId(), tag)
}

// tagOwner is the session key owner tag names in m's chat (the
// presser's own when it is theirs); ok false when Redis no longer knows
// the tag.
func (s *Service) tagOwner(ctx context.Context, m *msgCtx, tag string) (key string, ok bool, err error) {
	if tag == ownerTag(m.key) {
		return m.key, true, nil
	}
	key, err = s.rdb.Get(ctx, s.pickerOwnerKey(m, tag)).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read buttons' owner: %w", err)
	}
	return key, true, nil
}

// rememberTagOwner maps the owner tag of m's conversation back to its
// session key for a day (decidedTTL), for the presses of buttons that
// carry it (a picker's, a list of pending memory writes').
func (s *Service) rememberTagOwner(ctx context.Context, m *msgCtx) (string, error) {
	tag := ownerTag(m.key)
	if err := s.rdb.Set(ctx, s.pickerOwnerKey(m, tag), m.key, decidedTTL).Err(); err != nil {
		return "", fmt.Errorf("remember buttons' owner: %w", err)
	}
	return tag, nil
}

// pickerOwner is the session a press of a picker of owner tag acts on,
// and whether a turn runs in it: the presser's (sess, busy) for a DM's
// picker or the presser's own; ok false when Redis no longer knows the
// tag (an expired picker).
func (s *Service) pickerOwner(ctx context.Context, m *msgCtx, sess sessionstore.Session, busy bool, tag string) (key string, owner sessionstore.Session, ownerBusy, ok bool, err error) {
	if tag == "" || tag == ownerTag(m.key) {
		return m.key, sess, busy, true, nil
	}
	if key, ok, err = s.tagOwner(ctx, m, tag); err != nil || !ok {
		return "", sess, false, false, err
	}
	owner, err = s.store.Get(ctx, key)
	if errors.Is(err, sessionstore.ErrNotFound) {
		return "", sess, false, false, nil
	}
	if err != nil {
		return "", sess, false, false, err
	}
	holder, err := s.locker.Owner(ctx, key)
	if err != nil {
		return "", sess, false, false, fmt.Errorf("read picker owner's lock: %w", err)
	}
	// The turn's lease stands in for a lock Redis lost.
	if holder, err = s.holderOrLease(ctx, key, holder); err != nil {
		return "", sess, false, false, err
	}
	return key, owner, holder != "", true, nil
}

// modelPress answers the press of a picker's button: card is the
// picker's message, args the model a button names whole.
func (s *Service) modelPress(ctx context.Context, m *msgCtx, sess sessionstore.Session, card, args string, busy bool) error {
	key := fmt.Sprintf("%spickercard:%s:%s:%s:%s", s.prefix, m.src.GetPlatform(), m.src.GetAccount(), m.src.GetChatId(), card)
	// The answers go on the presser's session, at its generation: the
	// session a press acts on may be another (a group's picker).
	gen := sess.Generation
	replace := func(text string, picker *deliveryv1.Picker) error {
		return s.publishCommandNotice(ctx, m, gen, &repliesv1.Notice{Text: text, ReplacesMessageId: card, Picker: picker})
	}
	// answered takes the picker for this press; false when an earlier
	// press answered it (a redelivery of that press takes it again).
	answered := func() (bool, error) {
		ok, err := s.rdb.SetNX(ctx, key, m.dedupeID, decidedTTL).Result()
		if err != nil {
			return false, fmt.Errorf("remember answered picker: %w", err)
		}
		if ok {
			return true, nil
		}
		by, err := s.rdb.Get(ctx, key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return false, fmt.Errorf("read answered picker: %w", err)
		}
		return by == m.dedupeID, nil
	}
	if by, err := s.rdb.Get(ctx, key).Result(); err == nil && by != m.dedupeID {
		return nil // answered by an earlier press: it keeps that answer
	} else if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read answered picker: %w", err)
	}
	models, listErr := s.offered(ctx)
	if listErr != nil && !errors.Is(listErr, errNoModelList) {
		return listErr
	}
	model, target := args, m.key
	if data := m.ev.GetButtonPress().GetData(); data != "" {
		d := parsePickerData(data, models)
		if d.kind != 0 {
			var ok bool
			var err error
			if target, sess, busy, ok, err = s.pickerOwner(ctx, m, sess, busy, d.owner); err != nil {
				return err
			} else if !ok {
				return replace(pickerExpired, nil)
			}
		}
		switch d.kind {
		case 'p':
			if len(models) == 0 {
				return replace(pickerExpired, nil)
			}
			text, picker := s.modelPage(sess, models, d.page, d.owner)
			return replace(text, picker)
		case 'v', 'b':
			if len(models) == 0 {
				return replace(pickerExpired, nil)
			}
			text, picker := s.menuProviders(sess, models, d.owner)
			if d.kind == 'v' {
				text, picker = s.menuModels(models, d.owner)
			}
			return replace(text, picker)
		case 'x':
			if ok, err := answered(); err != nil || !ok {
				return err
			}
			return replace(pickerCancelText(m.platform), nil)
		}
		model = d.model
	}
	if model == "" || !slices.Contains(models, model) {
		return replace(pickerExpired, nil)
	}
	if busy {
		// As the typed command: the picker stays for a press after.
		return s.modelRefused(ctx, m, gen)
	}
	if ok, err := answered(); err != nil || !ok {
		return err
	}
	if err := s.store.SetModel(ctx, target, model); err != nil {
		return err
	}
	return replace(pickerSwitchedText(m.platform, fmt.Sprintf("Model switched to `%s`\nProvider: %s\n_(this session only — /model default goes back)_", model, s.providerLabel())), nil)
}
