package homeassistant

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/coder/websocket"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// maxFrameBytes is the most of one websocket message the gateway keeps
// in memory. Past the handshake and the get_states answer, a larger
// message (a state change of an entity with huge attributes: a media
// player's playlist, a calendar) is read to its end without being kept
// and skipped, its entity read from its first maxFrameBytes (logged,
// and counted as rejected when the entity is watched); the connection
// goes on.
const maxFrameBytes = 1 << 20

// maxMessageBytes bounds one websocket message past the handshake, read
// or skipped; a larger one closes the connection (the kit reconnects and
// catches up with get_states). Nothing Home Assistant sends comes near.
const maxMessageBytes = 64 << 20

// maxStatesBytes bounds the get_states answer, every entity's state in
// one message (about 1 KB an entity). A larger one closes the
// connection, and the process stops asking for it: the changes made
// while disconnected are then lost, as they were before there was a
// catch-up.
const maxStatesBytes = 32 << 20

// maxEventBytes bounds a state change the gateway publishes; a larger one
// (an entity with huge attributes) is rejected with the reason.
const maxEventBytes = 256 << 10

// handshakeTimeout bounds a connection's setup: the websocket's HTTP
// upgrade, then auth and the subscription.
const handshakeTimeout = 30 * time.Second

// subscribeID is the id of the subscribe_events command, the first
// command on every connection; its events carry it. statesID is the
// get_states that follows it.
const (
	subscribeID = 1
	statesID    = 2
)

// Connect opens the websocket, authenticates (auth_required → auth →
// auth_ok), subscribes to state_changed, asks for the current states
// (get_states) and publishes the watched changes until ctx ends or the
// connection fails. A refused token (auth_invalid) is fatal: the gateway
// turns unready with the reason.
//
// Home Assistant replays nothing to a new subscription, so the current
// states, asked for once the subscription stands (a change made between
// the two is in both, and published once), are compared with the last
// states the gateway read (the states bucket): each watched entity whose
// state differs is published as the change it missed, with Home
// Assistant's last_changed.
func (p *Platform) Connect(ctx context.Context, conn platform.Conn) error {
	if err := p.states.load(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	dctx, cancelDial := context.WithTimeout(ctx, p.handshakeTimeout)
	ws, _, err := websocket.Dial(dctx, p.wsURL(), &websocket.DialOptions{HTTPClient: p.hc})
	cancelDial()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("homeassistant websocket: %w", err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(maxFrameBytes)
	if err := p.handshake(ctx, ws); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	p.statesPending = false
	if !p.noCatchUp {
		wctx, cancelWrite := context.WithTimeout(ctx, p.handshakeTimeout)
		err := writeJSON(wctx, ws, map[string]any{"id": statesID, "type": "get_states"})
		cancelWrite()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("homeassistant websocket: get_states: %w", err)
		}
		p.statesPending = true
	}
	p.setReadLimit(ws)
	conn.Connected()
	p.log.Info("homeassistant: subscribed to state_changed", "url", p.base)

	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go p.ping(rctx, ws, cancel)
	for {
		raw, size, err := p.read(rctx, ws)
		if err != nil {
			if ctx.Err() != nil {
				_ = ws.Close(websocket.StatusNormalClosure, "")
				return nil
			}
			if cause := context.Cause(rctx); cause != nil && !errors.Is(cause, context.Canceled) {
				err = cause
			}
			if p.statesPending && errors.Is(err, websocket.ErrMessageTooBig) {
				p.noCatchUp = true
				p.log.Error("homeassistant: the get_states answer is larger than the gateway reads; changes made while disconnected will not be caught up until the gateway restarts",
					"limit_bytes", p.statesLimit)
			}
			return fmt.Errorf("homeassistant websocket: %w", err)
		}
		pending := p.statesPending
		// A message whose handling panics is skipped (logged, counted);
		// the connection and the state changes after it go on.
		platform.Receive(rctx, conn, p.log, "homeassistant", "", raw, func() {
			if size > int64(len(raw)) {
				p.skipLarge(rctx, conn, raw, size)
				return
			}
			p.handle(rctx, conn, raw)
		})
		if pending && !p.statesPending {
			p.setReadLimit(ws)
		}
	}
}

// setReadLimit sets the connection's read limit: the get_states answer
// is read whole, up to statesLimit; past it a message is read up to
// maxMessageBytes, of which read keeps maxFrameBytes.
func (p *Platform) setReadLimit(ws *websocket.Conn) {
	if p.statesPending {
		ws.SetReadLimit(p.statesLimit)
		return
	}
	ws.SetReadLimit(maxMessageBytes)
}

// read reads the next message, and its size: whole while the get_states
// answer is awaited, else at most its first maxFrameBytes, the rest read
// and dropped (size is then larger than raw), so that one huge message
// costs neither the memory nor the connection.
func (p *Platform) read(ctx context.Context, ws *websocket.Conn) (raw []byte, size int64, err error) {
	if p.statesPending {
		_, raw, err = ws.Read(ctx)
		return raw, int64(len(raw)), err
	}
	_, r, err := ws.Reader(ctx)
	if err != nil {
		return nil, 0, err
	}
	raw, err = io.ReadAll(io.LimitReader(r, maxFrameBytes))
	if err != nil {
		return nil, 0, err
	}
	rest, err := io.Copy(io.Discard, r)
	if err != nil {
		return nil, 0, err
	}
	return raw, int64(len(raw)) + rest, nil
}

// skipLarge handles a message larger than the gateway keeps, of which
// prefix is the start: a state change of an entity the filters leave out
// is skipped as its small changes are; any other is rejected (logged
// with its entity and size, counted). Home Assistant writes an event's
// entity id before its states, so the prefix names it.
func (p *Platform) skipLarge(ctx context.Context, conn platform.Conn, prefix []byte, size int64) {
	id, ok := frameEntity(prefix)
	p.tooLarge(ctx, conn, id, ok, size)
}

// tooLarge skips (unwatched entity) or rejects a state change of size
// bytes, larger than the gateway publishes; id is its entity when known.
func (p *Platform) tooLarge(ctx context.Context, conn platform.Conn, id string, known bool, size int64) {
	if known {
		// A change of an entity nobody watches is skipped as any other
		// of its changes, not logged and counted as a rejection: a busy
		// unwatched entity with huge attributes (a media player's
		// playlist, a calendar) would otherwise fill the log and the
		// rejected count for nothing.
		if why := p.rules.filter(id); why != skipNone {
			skipped.WithLabelValues(string(why)).Inc()
			p.log.Debug("homeassistant state change skipped", "why", string(why), "entity_id", id, "bytes", size)
			return
		}
	}
	if !known {
		id = "(not named in its first bytes)"
	}
	conn.Reject(ctx, "state change larger than the gateway takes", fmt.Errorf("message of %d bytes, limit %d, entity %s", size, maxEventBytes, id))
}

// handshake reads auth_required, sends the token, reads auth_ok and
// subscribes to state_changed, checking the command's result.
func (p *Platform) handshake(ctx context.Context, ws *websocket.Conn) error {
	hctx, cancel := context.WithTimeout(ctx, p.handshakeTimeout)
	defer cancel()
	f, err := readFrame(hctx, ws)
	if err != nil {
		return fmt.Errorf("homeassistant websocket: waiting for auth_required: %w", err)
	}
	if f.Type != "auth_required" {
		return fmt.Errorf("homeassistant websocket: expected auth_required, got %q", f.Type)
	}
	if err := writeJSON(hctx, ws, map[string]any{"type": "auth", "access_token": p.cfg.Token}); err != nil {
		return fmt.Errorf("homeassistant websocket: auth: %w", err)
	}
	if f, err = readFrame(hctx, ws); err != nil {
		return fmt.Errorf("homeassistant websocket: waiting for auth_ok: %w", err)
	}
	switch f.Type {
	case "auth_ok":
	case "auth_invalid":
		return platform.Fatal(fmt.Errorf("homeassistant: Home Assistant refused the token (HASS_TOKEN): %s", strings.TrimSpace(f.Message)))
	default:
		return fmt.Errorf("homeassistant websocket: expected auth_ok, got %q", f.Type)
	}
	if err := writeJSON(hctx, ws, map[string]any{"id": subscribeID, "type": "subscribe_events", "event_type": "state_changed"}); err != nil {
		return fmt.Errorf("homeassistant websocket: subscribe: %w", err)
	}
	for {
		if f, err = readFrame(hctx, ws); err != nil {
			return fmt.Errorf("homeassistant websocket: waiting for the subscription: %w", err)
		}
		if f.Type != "result" || f.ID != subscribeID {
			continue
		}
		if f.Success {
			return nil
		}
		reason := "no reason given"
		if f.Error != nil {
			reason = f.Error.Code + ": " + f.Error.Message
		}
		if f.Error != nil && f.Error.Code == "unauthorized" {
			return platform.Fatal(fmt.Errorf("homeassistant: the token may not subscribe to state_changed (%s)", reason))
		}
		return fmt.Errorf("homeassistant websocket: subscribe_events refused: %s", reason)
	}
}

func readFrame(ctx context.Context, ws *websocket.Conn) (*frame, error) {
	_, raw, err := ws.Read(ctx)
	if err != nil {
		return nil, err
	}
	return parseFrame(raw)
}

func writeJSON(ctx context.Context, ws *websocket.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return ws.Write(ctx, websocket.MessageText, b)
}

// wsURL is the WebSocket API's address (ws:// for http://, wss:// for
// https://).
func (p *Platform) wsURL() string {
	u := p.base + "/api/websocket"
	if rest, ok := strings.CutPrefix(u, "http"); ok {
		return "ws" + rest
	}
	return u
}

// ping keeps the connection alive; one unanswered within the interval
// ends the read loop, and the kit reconnects. Pongs are read by the
// reader, so no ping is sent, and a failed one does not count, while the
// reader is publishing a change (waiting for the bus while NATS is out
// of reach): the change waits in the gateway, on its connection.
func (p *Platform) ping(ctx context.Context, ws *websocket.Conn, fail context.CancelCauseFunc) {
	t := time.NewTicker(p.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if p.delivering.Load() > 0 {
				continue // the reader is publishing: it reads no pong now
			}
			started := p.deliveries.Load()
			pctx, cancel := context.WithTimeout(ctx, p.cfg.PingInterval)
			err := ws.Ping(pctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				if p.delivering.Load() > 0 || p.deliveries.Load() != started {
					// The pong came while the reader was held up
					// publishing: unread, not unanswered. Dropping the
					// connection would drop the change with it.
					continue
				}
				fail(fmt.Errorf("ping unanswered: %w", err))
				return
			}
		}
	}
}

// handle reads one message after the subscription: an event of it is
// filtered, described and published; anything else is left.
func (p *Platform) handle(ctx context.Context, conn platform.Conn, raw []byte) {
	f, err := parseFrame(raw)
	if err != nil {
		conn.Reject(ctx, "malformed websocket message", err)
		return
	}
	if f.Type == "result" && f.ID == statesID {
		p.statesPending = false // before anything that could panic
		p.catchUp(ctx, conn, f)
		return
	}
	if f.Type != "event" || f.ID != subscribeID {
		return
	}
	if len(raw) > maxEventBytes {
		// The frame is already in memory (at most maxFrameBytes, or the
		// get_states answer's limit while it is awaited), so reading its
		// entity id costs one bounded scan.
		id, ok := oversizedEntity(f.Event)
		p.tooLarge(ctx, conn, id, ok, int64(len(raw)))
		return
	}
	sc, ok, err := parseStateChanged(f.Event)
	if err != nil {
		conn.Reject(ctx, "malformed state_changed event", err)
		return
	}
	if !ok {
		return
	}
	p.publish(ctx, conn, sc)
}

// publish filters, describes and publishes one state change, read live
// or made up by the catch-up, and records the entity's new state as
// read: a change the filters let through is remembered whether it was
// published or skipped (cooldown, unchanged), so that the next catch-up
// compares with what the live subscription saw.
func (p *Platform) publish(ctx context.Context, conn platform.Conn, sc *stateChange) {
	m, why := p.accept(sc)
	if why != skipNone {
		skipped.WithLabelValues(string(why)).Inc()
		p.log.Debug("homeassistant state change skipped", "why", string(why), "entity_id", sc.EntityID)
		if why != skipIgnored && why != skipNotWatched {
			p.remember(ctx, sc)
		}
		return
	}
	// While it publishes, the reader reads nothing, pongs included:
	// ping does not take their absence for a dead connection.
	p.deliveries.Add(1)
	p.delivering.Add(1)
	defer p.delivering.Add(-1)
	for ctx.Err() == nil {
		_, err := conn.Deliver(ctx, m)
		if err == nil || errors.Is(err, platform.ErrRejected) {
			p.remember(ctx, sc)
			return
		}
		p.log.Warn("homeassistant state change not published; retrying", "entity_id", sc.EntityID, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// remember records the change's new state; a failed write is logged
// (the state stays in memory for this process).
func (p *Platform) remember(ctx context.Context, sc *stateChange) {
	if err := p.states.remember(ctx, sc.EntityID, sc.New); err != nil {
		p.log.Warn("homeassistant state not stored", "entity_id", sc.EntityID, "err", err)
	}
}

// catchUp handles the get_states answer: every watched entity whose
// state differs from the one last read is published as a change from
// that state to the current one, through the filters, dedupe and
// cooldown of a live change; an entity without a state read before (a
// first start, a newly watched entity) is only recorded. Entities no
// longer watched or gone are forgotten.
func (p *Platform) catchUp(ctx context.Context, conn platform.Conn, f *frame) {
	if !f.Success {
		reason := "no reason given"
		if f.Error != nil {
			reason = f.Error.Code + ": " + f.Error.Message
		}
		p.log.Warn("homeassistant: get_states refused; changes made while disconnected are not caught up", "reason", reason)
		return
	}
	states, bad, err := parseStates(f.Result)
	if err != nil {
		conn.Reject(ctx, "malformed get_states answer", err)
		return
	}
	if bad > 0 {
		p.log.Warn("homeassistant: get_states answer with unreadable states left out", "count", bad)
	}
	watched := make(map[string]bool, len(states))
	changed := 0
	for _, cs := range states {
		if p.rules.filter(cs.EntityID) != skipNone {
			continue
		}
		watched[cs.EntityID] = true
		prev, ok := p.states.lookup(cs.EntityID)
		if !ok {
			p.remember(ctx, &stateChange{EntityID: cs.EntityID, New: cs.entityState})
			continue
		}
		if prev.equal(seenOf(cs.entityState)) {
			continue
		}
		changed++
		p.publish(ctx, conn, &stateChange{EntityID: cs.EntityID, Old: &entityState{State: prev.State},
			New: cs.entityState, ContextID: cs.ContextID, TimeFired: cs.LastChanged})
	}
	for id := range p.states.seen {
		if !watched[id] {
			p.remember(ctx, &stateChange{EntityID: id})
		}
	}
	p.log.Info("homeassistant: caught up with the current states", "entities", len(states), "watched", len(watched), "changed", changed)
}

// maxCooldowns bounds the entities whose last message time is kept; past
// it, the entries whose cooldown is over are dropped.
const maxCooldowns = 10000

// accept applies the filters, the description, the check for a change
// published already and the per-entity cooldown, in that order: a change of attributes alone does not start
// an entity's cooldown (in Hermes it does, and can hide the real change
// that follows).
func (p *Platform) accept(sc *stateChange) (*eventsv1.MessageReceived, skip) {
	if why := p.rules.filter(sc.EntityID); why != skipNone {
		return nil, why
	}
	// Described first: a change of attributes only keeps its
	// last_changed (Home Assistant moves it with the state alone), so the
	// check below would count it as published already.
	m, why := normalize(sc, p.account)
	if why != skipNone {
		return nil, why
	}
	if p.published(sc) {
		return nil, skipSeen
	}
	now := p.now()
	cool := time.Duration(p.cfg.CooldownSeconds) * time.Second
	if last, ok := p.last[sc.EntityID]; ok && now.Sub(last) < cool {
		return nil, skipCooldown
	}
	if len(p.last) >= maxCooldowns {
		for id, t := range p.last {
			if now.Sub(t) >= cool {
				delete(p.last, id)
			}
		}
	}
	p.last[sc.EntityID] = now
	return m, skipNone
}

// published reports whether the change's new state is the one last read
// of its entity, with the same last_changed: the catch-up published it
// before its live event arrived (or the live event came twice).
func (p *Platform) published(sc *stateChange) bool {
	if sc.New == nil || sc.New.LastChanged == "" {
		return false
	}
	prev, ok := p.states.lookup(sc.EntityID)
	return ok && prev.LastChanged == sc.New.LastChanged && bytes.Equal(prev.State, sc.New.State)
}
