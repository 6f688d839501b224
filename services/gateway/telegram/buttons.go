package telegram

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/chunk"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// An approval prompt shows Hermes's inline keyboard under its text, two
// buttons a row: "✅ Allow Once", "✅ Session", "✅ Always", "❌ Deny". A
// press is a callback_query update; the gateway publishes it as the
// command the button stands for, typed by whoever pressed it in the
// prompt's chat, with the query's id as its interaction, and answers the
// query (the client stops its spinner) once the router has decided the
// press, with the router's word when it has one: its refusal of a
// presser it does not authorize, Hermes's toast on the outcome (hold,
// refuse). The router's answer replaces the prompt's text with an edit
// sent without reply_markup, which takes the keyboard off.
//
// Callback data is "ea:<choice>" or "ea:<choice>:<tool call id>" (as
// Hermes's "ea:<choice>:<approval id>"), the call's id only where it
// fits Telegram's 64 bytes.
//
// A picker (the /model picker, SendRequested.picker) is an inline
// keyboard the same way, its buttons' callback data
// platform.PickerPayload; an edit that carries a picker shows its
// buttons (another page), one without takes them off.

const (
	callbackPrefix  = "ea:"
	maxCallbackData = 64
)

// buttonLabels are Hermes's Telegram labels of the choices.
var buttonLabels = map[string]string{
	"once": "✅ Allow Once", "session": "✅ Session", "always": "✅ Always", "deny": "❌ Deny",
}

// choiceCommands are the typed commands the choices stand for.
var choiceCommands = map[string]string{
	"once": "/approve", "session": "/approve session", "always": "/approve always", "deny": "/deny",
}

// keyboard is the inline keyboard of an approval prompt (nil when a
// choice is none the gateway knows or none is asked for).
func keyboard(a *deliveryv1.Approval) *models.InlineKeyboardMarkup {
	var buttons []models.InlineKeyboardButton
	for _, c := range a.GetChoices() {
		label, ok := buttonLabels[c]
		if !ok {
			return nil
		}
		data := callbackPrefix + c
		if call := a.GetToolCallId(); call != "" && validCall(call) && len(data)+1+len(call) <= maxCallbackData {
			data += ":" + call
		}
		buttons = append(buttons, models.InlineKeyboardButton{Text: label, CallbackData: data})
	}
	if len(buttons) == 0 {
		return nil
	}
	// Two a row, as Hermes: a row of four cuts the labels on phones.
	var rows [][]models.InlineKeyboardButton
	for i := 0; i < len(buttons); i += 2 {
		rows = append(rows, buttons[i:min(i+2, len(buttons))])
	}
	return &models.InlineKeyboardMarkup{InlineKeyboard: rows}
}

// pickerKeyboard is the inline keyboard of a picker (the /model
// picker), row by row as the router laid it out: each button's callback
// data is platform.PickerPayload (a choice that cannot be carried is
// left out); a menu's choices (Telegram has no menus) are buttons one a
// row. nil for no picker.
func pickerKeyboard(pk *deliveryv1.Picker) *models.InlineKeyboardMarkup {
	var rows [][]models.InlineKeyboardButton
	place := 0
	for _, r := range pk.GetRows() {
		var row []models.InlineKeyboardButton
		for _, c := range r.GetChoices() {
			data := platform.PickerPayload(c, place)
			place++
			if data == "" || c.GetLabel() == "" || len(data) > maxCallbackData {
				continue
			}
			row = append(row, models.InlineKeyboardButton{Text: c.GetLabel(), CallbackData: data})
			if r.GetPlaceholder() != "" {
				rows, row = append(rows, row), nil
			}
		}
		if len(row) > 0 {
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return nil
	}
	return &models.InlineKeyboardMarkup{InlineKeyboard: rows}
}

// replyMarkup is the keyboard a send or an edit shows: an approval
// prompt's or a picker's; nil for none.
func replyMarkup(req *deliveryv1.SendRequested) models.ReplyMarkup {
	if kb := keyboard(req.GetApproval()); kb != nil {
		return kb
	}
	if kb := pickerKeyboard(req.GetPicker()); kb != nil {
		return kb
	}
	return nil
}

// validCall reports whether a tool call id can ride in callback data.
func validCall(id string) bool {
	return id != "" && len(id) <= maxCallbackData && strings.IndexFunc(id, func(r rune) bool {
		return r > unicode.MaxASCII || !unicode.IsPrint(r) || r == ' '
	}) < 0
}

// parseCallback reads an approval button's callback data: the typed
// command it stands for and the tool call it names ("" for none). ok is
// false for any other data.
func parseCallback(data string) (command, call string, ok bool) {
	rest, found := strings.CutPrefix(data, callbackPrefix)
	if !found || len(data) > maxCallbackData {
		return "", "", false
	}
	choice, call, _ := strings.Cut(rest, ":")
	command, ok = choiceCommands[choice]
	if !ok || (call != "" && !validCall(call)) {
		return "", "", false
	}
	return command, call, true
}

// pressed normalizes a callback query: an approval button's or a
// picker's press is the command from the presser in the message's chat
// (a picker's with the choice's data); a picker's button that does
// nothing (a page counter) is skipped, its query answered.
func pressed(u *models.Update, me identity) (outcome, error) {
	q := u.CallbackQuery
	out := outcome{callbackID: q.ID}
	command, call, ok := parseCallback(q.Data)
	data := ""
	if !ok {
		var inert bool
		command, data, inert, ok = platform.ParsePickerPayload(q.Data)
		if inert {
			out.skip = "inert button"
			return out, nil
		}
	}
	if !ok {
		out.skip = "unknown button"
		return out, nil
	}
	var chat models.Chat
	var cardID, thread int
	topic := false
	switch {
	case q.Message.Message != nil:
		m := q.Message.Message
		chat, cardID, thread, topic = m.Chat, m.ID, m.MessageThreadID, m.IsTopicMessage
	case q.Message.InaccessibleMessage != nil:
		chat, cardID = q.Message.InaccessibleMessage.Chat, q.Message.InaccessibleMessage.MessageID
	}
	if chat.ID == 0 || cardID == 0 || q.From.ID == 0 {
		out.skip = "button press without its message"
		return out, nil
	}
	chatID := strconv.FormatInt(chat.ID, 10)
	src := &eventsv1.SessionSource{
		Platform: "telegram", Account: strconv.FormatInt(me.id, 10), ChatId: chatID, ChatName: chatName(chat),
		ChatType: chatType(chat, false), UserId: strconv.FormatInt(q.From.ID, 10),
		UserName: fullName(q.From.FirstName, q.From.LastName), IsBot: q.From.IsBot,
	}
	// The prompt went to the chat's topic: the press belongs to it.
	src.ThreadId = topicOf(src.ChatType, chat, thread, topic)
	out.ev = &eventsv1.MessageReceived{
		EventId: strconv.FormatInt(u.ID, 10), Source: src, Text: command, Mentioned: src.ChatType == "group",
		ButtonPress: &eventsv1.ButtonPress{MessageId: strconv.Itoa(cardID), ToolCallId: call, Data: data},
	}
	return out, nil
}

// answerCallback answers the callback query of a press the gateway
// does not publish (skipped, or malformed), without text, so the client
// stops showing its progress, as a published press's query is answered
// (answerHeld): a failure that passes (a 5xx, a 429, the network) is
// tried again while Telegram still takes the answer, the last try
// beginning no later than watchBound after handed, when this replica
// was handed the press. Its answer is the only one: no replica holds or
// watches a press that was never published, and a redelivered press
// answered already is refused as answered (queryDone), which ends the
// tries. On the press's own goroutine (goPress): the update loop does
// not wait for the tries, nor do they end with ctx, a webhook's
// request's.
func (p *Platform) answerCallback(ctx context.Context, id string, handed time.Time) {
	actx := context.WithoutCancel(ctx)
	p.goPress(func() { p.answerHeld(actx, id, "", handed.Add(watchBound)) })
}

// answerQuery answers callback query id with text, once, and returns
// Telegram's error.
func (p *Platform) answerQuery(ctx context.Context, id, text string) error {
	text = chunk.UTF16.Cut(text, maxCallbackText)
	_, err := p.api.AnswerCallbackQuery(ctx, &bot.AnswerCallbackQueryParams{CallbackQueryID: id, Text: text})
	return err
}

// answerHeld answers callback query id of a press with text,
// and reports whether the answer settled the query (queryDone): every
// answer of a press's query but a refusal's first try (refuse, which
// goes on with answerAgain) is made here, by the press's holder (hold,
// awaitRetry), by a replica handed the press again that no replica
// holds any more (handle), by a replica that took the query over from
// its holder (watchHolder), and for a press not published, skipped or
// malformed (answerCallback). A failure that passes (a 5xx, a 429,
// the network: answerRetry) is tried again after a backoff, or after a
// 429's retry_after, while Telegram still takes the answer: a try
// begins no later than last (watchBound after the press was handed to
// this replica, or after its hold began elsewhere: watchFrom), the
// answer's own time left of queryAnswerable, and all of them within
// answerTimeout. Tried once, a failure that passed left the query
// unanswered: a replica watching it (watchHolder) answered it without
// the router's word, and with none, no one did.
//
// It blocks for the tries: its callers run it on a press's own
// goroutine (goPress), never on the update loop, whose next getUpdates
// would wait for it. A holder holds the press meanwhile: a watcher,
// which takes the query over only once the hold is gone for
// holderGrace, or at its own bound (watchBound after this hold began at
// the earliest), leaves it to these tries, but for one still under way
// at that bound: the watcher's answer goes too, tried once (its last is
// that bound), and Telegram takes the first of the two.
func (p *Platform) answerHeld(ctx context.Context, id, text string, last time.Time) (settled bool) {
	ctx, cancel := context.WithTimeout(ctx, answerTimeout)
	defer cancel()
	return p.answerAgain(ctx, id, text, last, p.answerQuery(ctx, id, text))
}

// answerAgain goes on answering callback query id with text after a
// first try that returned err, as answerHeld does, and reports whether
// an answer settled the query.
func (p *Platform) answerAgain(ctx context.Context, id, text string, last time.Time, err error) (settled bool) {
	for try := 0; ; try++ {
		if queryDone(err) {
			return true
		}
		wait, again := answerRetry(err, try)
		if !again || ctx.Err() != nil || time.Now().Add(wait).After(last) {
			p.log.Warn("answer a telegram callback query; giving up", "tries", try+1, "err", p.redact(err))
			return false
		}
		p.log.Debug("answer a telegram callback query; trying again", "wait", wait, "err", p.redact(err))
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			p.log.Warn("answer a telegram callback query; giving up", "tries", try+1, "err", p.redact(err))
			return false
		}
		err = p.answerQuery(ctx, id, text)
	}
}

// firstAnswerRetry is the wait before a held query's answer is tried
// again after its first transient failure (answerHeld); each later wait
// doubles, up to maxAnswerRetry, less up to a quarter at random, so
// that the answers of many presses that failed at once do not all come
// again at once.
const (
	firstAnswerRetry = 250 * time.Millisecond
	maxAnswerRetry   = 2 * time.Second
)

// answerRetry reports whether answerCallbackQuery's failure err, its
// try-th (from 0), may pass, and how long to wait before the next try:
// a 429's retry_after, a 5xx's or the network's backoff. A 400 (the
// query too old, or the answer wrong) and Telegram's other refusals
// stand: tried again, they fail again.
func answerRetry(err error, try int) (wait time.Duration, again bool) {
	var tmr *bot.TooManyRequestsError
	if errors.As(err, &tmr) {
		return max(secondsDur(tmr.RetryAfter), firstAnswerRetry), true
	}
	if refusal(err) {
		return 0, false
	}
	wait = min(firstAnswerRetry<<min(try, 8), maxAnswerRetry)
	return wait - rand.N(wait/4), true
}

// refusal reports whether err is one of Telegram's refusals, which
// stand: a 400 (a migrated group's too), 401, 403, 404 or 409. Tried
// again, they fail again.
func refusal(err error) bool {
	var mig *bot.MigrateError
	return errors.As(err, &mig) || errors.Is(err, bot.ErrorBadRequest) || errors.Is(err, bot.ErrorForbidden) ||
		errors.Is(err, bot.ErrorUnauthorized) || errors.Is(err, bot.ErrorNotFound) || errors.Is(err, bot.ErrorConflict)
}

// queryDone reports whether a callback query needs no answer from
// anyone after an answerCallbackQuery that returned err: Telegram took
// the answer, or refused it because no answer can be taken any more.
// The Bot API words that refusal "Bad Request: query is too old and
// response timeout expired or query ID is invalid" (also its answer to a
// query answered already); MTProto's QUERY_ID_INVALID is the same
// refusal. Any other failure (a 5xx, a 429, the network, another 400)
// leaves the query open: whoever said it answered it then would leave it
// to no one.
func queryDone(err error) bool {
	if err == nil {
		return true
	}
	if !errors.Is(err, bot.ErrorBadRequest) {
		return false
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "query is too old") || strings.Contains(msg, "query id is invalid") ||
		strings.Contains(msg, "query_id_invalid")
}

// settle ends hold, the hold of a press whose query this replica
// claimed and tried to answer (answerHeld): it says the query answered
// when the answer settled it (queryDone), and otherwise ends without the
// word, so that a replica that left the query to this hold and watches
// it (watchHolder) finds it gone and answers the query itself.
func settle(hold *platform.PressHold, settled bool) {
	if settled {
		hold.Answered()
		return
	}
	hold.Close()
}

// maxPressHold bounds Config.PressHold, how long a published press's
// callback query is held unanswered for the router's answer (Telegram
// takes one answer, and Hermes's refusal of a presser it does not
// authorize, or its word on the outcome, is that answer's text): the
// client's spinner shows while the query is held. The router tells the
// replica holding it once it has decided the press (platform.PressHold),
// with its word when it has one, or refuses it through delivery
// (refuse). When neither comes in time the query is answered without
// text when the hold ends.
const maxPressHold = 10 * time.Second

// answerTimeout bounds a held query's answer (answerCallbackQuery),
// its tries again after a transient failure included (answerHeld).
const answerTimeout = 10 * time.Second

// holderCheck is how often a replica that left a press's query to the
// replica holding it (heldElsewhere) asks whether that one still holds
// it (watchHolder).
const holderCheck = time.Second

// queryAnswerable is how long after a press Telegram is taken to
// accept its callback query's answer. The Bot API documents no limit
// (answerCallbackQuery names none); a later answer is refused "Bad
// Request: query is too old and response timeout expired or query ID is
// invalid", and users report the window at about 15 s (an answer after
// about 20 s refused in eternnoir/pyTelegramBotAPI#1615, "the timeout
// is pretty low" in LonamiWebs/Telethon#4073).
const queryAnswerable = 15 * time.Second

// watchBound bounds a watch of a press left to another replica
// (watchHolder), from when this replica was handed the press or, when
// earlier, when the holder's hold began (watchFrom): below
// queryAnswerable by the time an answer takes, so that the watch's
// last-resort answer is taken. A live holder answers before it: its hold
// (at most maxPressHold) began then. The press itself may be older
// still (the query carries no time): then the answer may come too late
// all the same, and is refused harmlessly.
const watchBound = queryAnswerable - 3*time.Second

// holderGrace is how long the replica holding a press's query must be
// found absent (asked every holderCheck) before the replica that left
// the query to it answers the query itself (watchHolder): longer than a
// holder takes to reconnect to the bus and subscribe again (the bus
// retries every second), short enough that a dead holder's query is
// taken over within a few seconds, while Telegram still takes an answer.
const holderGrace = 3 * time.Second

// query is the callback query of a press this replica holds (holdQuery)
// until it is claimed (claimQuery).
type query struct {
	// claimed is closed when the query is claimed.
	claimed chan struct{}
	// subscribed is closed once hold is set: the press's handling that
	// holds the query subscribes to the router's answer before any
	// handling of it publishes it (holdQuery).
	subscribed chan struct{}
	// hold is the router's answer's (nil: the press could not be held
	// for it).
	hold *platform.PressHold
	// failed: a publish of the press failed here, and the bus may have
	// stored it all the same: the router then decides the stored press,
	// so the retry, told it is a duplicate, holds the query still.
	failed bool
	// retry is closed when a retry of the failed press takes the query
	// over (holdQuery); nil when none may (not failed, or let go).
	retry chan struct{}
	// again: Telegram sent the press again while it was held here, and
	// that handling (which leaves the query to this one) published it
	// too: told the press is a duplicate, this handling may be the one
	// whose publish came second, the press not decided yet.
	again bool
	// handed is when this replica was handed the press first: its
	// answer is tried while Telegram takes it (answerHeld).
	handed time.Time
}

// holdQuery counts callback query id of a press among the held ones,
// before the press is published, and holds the press for the router's
// answer when conn can (platform.PressHolder). A press whose publish
// failed here, still held (awaitRetry), is taken over as it is: a
// refusal or an answer that came meanwhile is its hold's. A press held
// here otherwise (Telegram sent it again while it is published or held)
// is its first handling's to answer: again is true, q nil, once that
// handling holds the press for the router's answer. Published before,
// the router's answer could come before that hold subscribed, and be
// lost. handed is when this replica was handed the press.
func (p *Platform) holdQuery(ctx context.Context, conn platform.Conn, id string, handed time.Time) (q *query, again bool) {
	p.heldMu.Lock()
	if q := p.held[id]; q != nil {
		if q.retry == nil {
			q.again = true
			p.heldMu.Unlock()
			select {
			case <-q.subscribed:
			case <-ctx.Done():
			}
			return nil, true
		}
		close(q.retry)
		q.retry = nil
		p.heldMu.Unlock()
		return q, false
	}
	q = &query{claimed: make(chan struct{}), subscribed: make(chan struct{}), handed: handed}
	if p.held == nil {
		p.held = map[string]*query{}
	}
	p.held[id] = q
	p.heldMu.Unlock()
	defer close(q.subscribed)
	if h, ok := conn.(platform.PressHolder); ok {
		hold, err := h.HoldPress(id)
		if err != nil {
			p.log.Warn("hold telegram button press for the router's answer; its hold ends by time", "err", err)
		}
		q.hold = hold
	}
	return q, false
}

// awaitRetry keeps holding query id of a press whose publish failed
// (the bus may have stored it, its acknowledgement lost) until its
// retry takes it over (holdQuery), for up to maxPressHold: a refusal of
// the stored press claims it meanwhile and answers it with its text, and
// the router's answer is its answer at once, the press decided. Nothing
// else answers it: not stored, the press is published again and answered
// then. Let go, it is no longer held, and a retry after that holds it
// anew.
func (p *Platform) awaitRetry(ctx context.Context, id string, q *query) {
	retry := make(chan struct{})
	p.heldMu.Lock()
	if p.held[id] != q {
		// Claimed by a refusal, which answers it and ends its hold.
		p.heldMu.Unlock()
		return
	}
	q.failed, q.retry = true, retry
	p.heldMu.Unlock()
	var (
		answered <-chan *deliveryv1.SendRequested
		retried  <-chan struct{}
	)
	if q.hold != nil {
		answered, retried = q.hold.Answer(), q.hold.Retried()
	}
	p.goPress(func() {
		t := time.NewTimer(maxPressHold)
		defer t.Stop()
		// letGo ends the wait: let go, unless another replica asked
		// meanwhile and was told it is held here (PressHold.LetGo): then
		// held here on, as in the retried case.
		letGo := func() {
			p.heldMu.Lock()
			taken := q.retry != retry
			asked := false
			if !taken {
				q.retry = nil
				asked = q.hold.LetGo()
				if !asked && p.held[id] == q {
					delete(p.held, id)
				}
			}
			p.heldMu.Unlock()
			if asked {
				p.hold(ctx, id, q)
			}
		}
		// answer answers the query with the router's answer, the press
		// decided.
		answer := func(req *deliveryv1.SendRequested) {
			if p.claimQuery(id) != nil {
				settle(q.hold, p.answerHeld(context.WithoutCancel(ctx), id, req.GetText(), q.handed.Add(watchBound)))
			}
		}
		select {
		case <-retry:
			return // the retry holds it now
		case <-retried:
			// The poller's lease moved, and the new poller, handed the
			// press again, left it to this hold (heldElsewhere): held
			// here, as a retry here would hold it.
			p.heldMu.Lock()
			taken := q.retry != retry
			if !taken {
				q.retry = nil
			}
			p.heldMu.Unlock()
			if !taken {
				p.hold(ctx, id, q)
			}
		case <-q.claimed:
			// Refused: the refusal answers the query and ends its hold.
		case req := <-answered:
			answer(req)
		case <-t.C:
			if p.retryWaitOver != nil {
				p.retryWaitOver(id)
			}
			letGo()
		case <-p.life.Done():
			// The gateway stops: its wait ends as when it runs out. Held
			// on for a replica told so, the hold answers the query at
			// once (hold). The router's answer, if it came already, is
			// its answer: the select picks among the ready cases at
			// random, and let go, the query lost it.
			select {
			case req := <-answered:
				answer(req)
			default:
				letGo()
			}
		}
	})
}

// heldElsewhere reports whether another replica holds callback query
// id of a press this replica was handed again and the bus told it is a
// duplicate (platform.RetryPress): a poller whose lease moved before it
// confirmed the press, or whose publish failed after the bus stored it
// (awaitRetry), holds the query for the router's answer or its refusal,
// which may not have come yet. That replica answers it, and this one
// lets go of q, this handling's, without answering. Held by no one, the
// press was decided before: this replica answers it at once, with the
// router's word kept for it (keptText), its holder dead or done.
//
// It watches that replica (watchHolder), from before it asks: a holder
// that dies, or loses its connection to the bus, before it answers the
// query leaves it to this replica. asked: a replica was told q's hold
// holds the press, and watches it; it is told, once this one watches
// the holder, that it need not (PressWatch.HandOn).
func (p *Platform) heldElsewhere(ctx context.Context, id string, q *query, handed time.Time, asked bool) bool {
	if p.bus == nil {
		return false
	}
	w, err := platform.WatchPress(p.bus, p.Name(), id)
	if err != nil {
		p.log.Debug("watch a press handed again; answering it here", "err", err)
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	held, since, err := platform.RetryPressSince(rctx, p.bus, p.Name(), id)
	if err != nil {
		p.log.Debug("ask whether another replica holds a press handed again; answering it here", "err", err)
	}
	if !held {
		w.Close()
		return false
	}
	p.heldMu.Lock()
	if p.held[id] == q {
		delete(p.held, id)
	}
	p.heldMu.Unlock()
	if asked {
		if err := w.HandOn(); err != nil {
			p.log.Debug("say a telegram button press's query is left to its holder", "err", err)
		}
	}
	p.goPress(func() { p.watchHolder(id, w, watchFrom(handed, since).Add(watchBound)) })
	return true
}

// watchFrom is when the bound of a watch of a press (watchBound) counts
// from: when this replica was handed the press, or, when earlier, when
// the hold of the replica it leaves the press to began (since; zero
// when that replica did not say), which was handed the press first: the
// press is at least that old, and Telegram takes its answer for
// queryAnswerable after it was made. Counted from the later hand-over
// alone (the poller's lease moved, a webhook delivery was retried
// elsewhere), the watch's last-resort answer came after Telegram had
// closed the query. The holder says how long it has held the press,
// not since when on its own clock (RetryPressSince): a holder whose
// clock is behind this replica's does not end the watch early.
func watchFrom(handed, since time.Time) time.Time {
	if !since.IsZero() && since.Before(handed) {
		return since
	}
	return handed
}

// watchHolder waits for the replica holding callback query id, which
// this replica left it to (heldElsewhere), to say it answered it
// (platform.PressWatch), and answers it here, with the router's word
// when it was kept (keptText), else without text, when that
// replica has held it no more for holderGrace without having said so (it
// died, or lost its connection to the bus for longer than a
// reconnection), or has not said so by until (watchBound after this
// replica was handed the press, or after the holder's hold began when
// that is earlier: watchFrom), the latest Telegram still takes the
// answer. A live holder says so before its hold ends, so the query is
// not answered twice.
//
// The watch ends when the gateway stops (Platform.life). Then this
// replica asks on whether the holder still holds the query, for up to
// its grace (heldOnStop): if it does (or the bus does not answer), or
// says it answered it, the query is left to it, which answers it with
// the router's word; if it has not held it for holderGrace, without its
// word, this replica answers the query on its way out (keptText), rather than
// leave it to no one (no replica watches it any more).
func (p *Platform) watchHolder(id string, w *platform.PressWatch, until time.Time) {
	defer w.Close()
	answered := w.Wait(p.life, time.Until(until), holderCheck, holderGrace)
	if p.watchOver != nil {
		defer func() { p.watchOver(id, answered) }()
	}
	if answered {
		return
	}
	ctx := context.WithoutCancel(p.life)
	if p.life.Err() != nil {
		var held bool
		if held, answered = p.heldOnStop(id, w); held {
			return
		}
	}
	p.log.Info("the replica holding a telegram button press's query stopped holding it unanswered; answering it here")
	// Tried again while Telegram takes the answer, up to the watch's
	// own bound: a holder gone for holderGrace tries no more, and at
	// that bound this answer is tried once.
	if p.answerHeld(ctx, id, p.keptText(ctx, id), until) {
		p.confirmAnswered(id)
	}
}

// heldOnStop reports, once the gateway stopped, whether the replica
// holding callback query id, which this replica left it to and watched
// with w (watchHolder), still holds it: held when it does (or the bus
// does not answer the question), or when it said it answered it
// (answered); not when, asked every holderCheck, it has not held it for
// holderGrace. Asked once, a holder whose connection to the bus was
// reconnecting at that moment (its subscription with it) looked dead,
// and its query was answered here without text, not with the router's
// word it was about to give: a stopping watch gives the holder the
// grace a running one does. The stop waits for it no longer than
// holderGrace and one question more.
func (p *Platform) heldOnStop(id string, w *platform.PressWatch) (held, answered bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.life), holderGrace+holderCheck)
	defer cancel()
	// gone is when the press was first found held by no one.
	var gone time.Time
	for {
		rctx, rcancel := context.WithTimeout(ctx, holderCheck)
		holds, err := platform.RetryPress(rctx, p.bus, p.Name(), id)
		rcancel()
		switch {
		case holds:
			return true, false
		case err != nil && ctx.Err() == nil:
			return true, false // no answer: the query is left to the holder
		}
		// The holder's word comes before its hold ends, on one
		// connection, and this one has it before the question's reply
		// that no one holds the press.
		if w.Said() {
			return true, true
		}
		if gone.IsZero() {
			gone = time.Now()
		}
		if time.Since(gone) >= holderGrace || ctx.Err() != nil {
			return false, false
		}
		t := time.NewTimer(holderCheck)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false, false
		}
	}
}

// keptText is the text of the router's word on the press of callback
// query id, kept where every replica reads it (platform.PressWord): a
// query taken over from a holder that died (watchHolder), or handed
// again once no replica holds it (heldElsewhere: its holder answered it
// or died), or held here until its hold ended without the word (hold:
// the word's core message was lost), is answered with it, as its holder
// would have, when the router decided the press before. "" without it,
// or when the bucket cannot be read (logged): the query is answered
// without text then.
func (p *Platform) keptText(ctx context.Context, id string) string {
	if p.bus == nil {
		return ""
	}
	rctx, cancel := context.WithTimeout(ctx, holderCheck)
	defer cancel()
	word, _, err := platform.PressWord(rctx, p.bus, p.Name(), id)
	if err != nil {
		p.log.Warn("read the router's kept word on a telegram button press; answering it without", "err", err)
	}
	return word.GetText()
}

// goPress runs f, a hold or a watch of a press, on its own goroutine,
// counted until it returns (stopPresses waits for it). Once the gateway
// stopped, f runs at once on the caller's: it finds life over and ends
// at once.
func (p *Platform) goPress(f func()) {
	p.pressMu.Lock()
	if p.stopped {
		p.pressMu.Unlock()
		f()
		return
	}
	p.presses.Add(1)
	p.pressMu.Unlock()
	go func() {
		defer p.presses.Done()
		f()
	}()
}

// stopPresses ends the holds and watches of presses (Platform.life) and
// waits for them: each answers its query on the way out when no one
// else will (hold, watchHolder).
func (p *Platform) stopPresses() {
	p.pressMu.Lock()
	p.stopped = true
	p.pressMu.Unlock()
	p.endLife()
	p.presses.Wait()
}

// confirmAnswered says that this replica answered callback query id,
// which it did not hold (platform.ConfirmPressAnswered): a replica that
// left it to a hold here that has ended is told it is answered.
func (p *Platform) confirmAnswered(id string) {
	if p.bus == nil {
		return
	}
	if err := platform.ConfirmPressAnswered(p.bus, p.Name(), id); err != nil {
		p.log.Debug("say a telegram button press's query was answered", "err", err)
	}
}

// hold holds callback query id of a published press (counted held by
// holdQuery): it is answered with the router's answer's text when that
// comes, without text when the hold ends, unless a refusal claims it
// first (claimQuery), which ends the hold there: the router sends a
// press it refuses no other answer. Off the update loop: the next update
// does not wait. Nor does the hold end with ctx: a webhook's is its
// request's, which ends at once; it ends with the gateway (Platform.life),
// answering the query without text on the way out.
//
// Whoever claims the query ends its hold once it has answered it, not
// before, and says so (PressHold.Answered): until then a replica handed
// the press again is told the press is held here (heldElsewhere), and
// leaves the query to this answer rather than answer it first without
// text; it watches for the word, and answers the query itself when the
// hold ends without it (watchHolder).
func (p *Platform) hold(ctx context.Context, id string, q *query) {
	var answered <-chan *deliveryv1.SendRequested
	if q.hold != nil {
		answered = q.hold.Answer()
	}
	p.goPress(func() {
		t := time.NewTimer(p.cfg.PressHold)
		defer t.Stop()
		text := ""
		select {
		case <-t.C:
			// No word by the hold's end: its core message may have been
			// lost (this replica's connection to the bus reconnecting as
			// the router published it), and the router keeps it too.
			text = p.keptText(context.WithoutCancel(ctx), id)
		case <-p.life.Done():
			// The gateway stops: the router's word can no longer reach
			// this hold, and the query is answered on the way out, with
			// the word if it came already (the select picks among the
			// ready cases at random) or was kept.
			select {
			case req := <-answered:
				text = req.GetText()
			default:
				text = p.keptText(context.WithoutCancel(ctx), id)
			}
		case req := <-answered:
			text = req.GetText()
		case <-q.claimed:
			return // refused: the refusal answers the query
		}
		if p.claimQuery(id) != nil {
			settle(q.hold, p.answerHeld(context.WithoutCancel(ctx), id, text, q.handed.Add(watchBound)))
		}
	})
}

// sentAgain reports whether Telegram sent the press of query q again
// while it was held here (query.again).
func (p *Platform) sentAgain(q *query) bool {
	p.heldMu.Lock()
	defer p.heldMu.Unlock()
	return q.again
}

// heldPress is the interaction of a press whose callback query this
// replica holds until end (hold): the router refuses a presser it does
// not authorize in the query's answer (refuse), which must come before
// the hold ends.
func heldPress(id string, end time.Time) *eventsv1.Interaction {
	return &eventsv1.Interaction{Id: id, Component: true, ExpiresAt: timestamppb.New(end)}
}

// claimQuery takes callback query id off the held ones and returns it,
// nil when it was not held here (its holder answers it no more, and a
// hold still waiting ends). The caller answers it, then closes its hold
// (hold).
func (p *Platform) claimQuery(id string) *query {
	p.heldMu.Lock()
	defer p.heldMu.Unlock()
	q, ok := p.held[id]
	if !ok {
		return nil
	}
	delete(p.held, id)
	close(q.claimed)
	return q
}

// refuse answers the callback query of a press (the target's
// interaction, Interaction.component) with the router's refusal as its
// text, a toast only the presser sees, as Hermes's callback handler
// answers a user it does not authorize. A query held by another replica
// (delivery hands a send to any) is answered by its holder, which the
// refusal is sent on to (forwardRefusal), so that its hold ends with it.
// A query no replica holds that was answered already (its hold ended,
// or Telegram no longer takes it) or is past its end drops the refusal:
// nothing goes to the chat, where others would see it.
func (p *Platform) refuse(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	ia := req.GetTarget().GetInteraction()
	q := p.claimQuery(ia.GetId())
	held := q != nil
	// settled: the query needs no answer any more (queryDone), said so
	// only then; retrying: its answer is tried again on the press's own
	// goroutine, which ends its hold.
	settled, retrying := false, false
	if held {
		defer func() {
			if !retrying {
				settle(q.hold, settled)
			}
		}()
	}
	// Sent on to a holder also past the press's end: the replica whose
	// publish failed holds the query until its retry, which another
	// replica may be handed once the poller's lease moved
	// (heldElsewhere), and holds it on from there.
	if !held && p.forwardRefusal(ctx, req) {
		return "", nil
	}
	if !held && (ia.GetExpiresAt() == nil || time.Now().After(ia.GetExpiresAt().AsTime())) {
		p.log.Info("telegram callback query answered already; dropping the press's refusal")
		return "", nil
	}
	if !held {
		// A replica watching for the query's answer (watchHolder)
		// leaves it to this one, once it is answered.
		defer func() {
			if settled {
				p.confirmAnswered(ia.GetId())
			}
		}()
	}
	id, text := ia.GetId(), req.GetText()
	err := p.answerQuery(ctx, id, text)
	settled = queryDone(err)
	if err == nil {
		return "", nil
	}
	if _, again := answerRetry(err, 0); held && again {
		// A failure that passes (a 5xx, a 429, the network): the
		// refusal is tried again, with its text, while Telegram takes
		// it (answerAgain), and the press stays held here until then,
		// so that a replica handed it again leaves it to this answer.
		// The tries run on the press's own goroutine: this send's reply
		// does not wait for them, lest delivery's request time out
		// meanwhile and the refusal come again, to a query no longer
		// held here.
		retrying = true
		actx := context.WithoutCancel(ctx)
		p.goPress(func() {
			actx, cancel := context.WithTimeout(actx, answerTimeout)
			defer cancel()
			settle(q.hold, p.answerAgain(actx, id, text, q.handed.Add(watchBound), err))
		})
		return "", nil
	}
	if errors.Is(err, bot.ErrorBadRequest) {
		p.log.Info("telegram refused the callback query's answer; dropping the press's refusal", "err", p.redact(err))
		return "", nil
	}
	if held {
		// Telegram refused it for good (not a 400): its hold ends
		// without the word, and a replica watching it answers it.
		p.log.Warn("answer telegram callback query with the refusal", "err", p.redact(err))
		return "", nil
	}
	return "", classify(err)
}

// forwardRefusal sends the refusal req of a press this replica does
// not hold to the replica that does, if one does (platform.AnswerPress),
// and reports whether one took it: the holder answers the query with
// its text and its hold ends there. Answered here instead, the holder's
// hold would wait out Config.PressHold and then answer the query a
// second time, which Telegram refuses. Not taken (no holder: its hold
// ended or could not subscribe; a bus that does not answer in time),
// the query is answered here, as Telegram lets any replica.
func (p *Platform) forwardRefusal(ctx context.Context, req *deliveryv1.SendRequested) bool {
	if p.bus == nil {
		return false
	}
	fctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	taken, err := platform.AnswerPress(fctx, p.bus, req)
	if err != nil {
		p.log.Debug("send a press's refusal on to the replica holding it; answering the query here", "err", err)
	}
	return taken
}

// maxCallbackText is the most a callback query's answer shows: the Bot
// API takes 0-200 characters, and a longer one is refused
// (MESSAGE_TOO_LONG), the toast lost. The API does not say what it
// counts; Telegram counts its other texts' lengths in UTF-16 units, in
// which an emoji outside the BMP (🔒, 👍) is two, so 200 runes can be
// up to 400. Cut at 200 units, the answer fits whichever it counts.
const maxCallbackText = 200
