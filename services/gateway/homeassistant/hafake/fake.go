// Package hafake is a fake Home Assistant for tests: its WebSocket API
// (/api/websocket) speaks the real protocol (auth_required, auth with a
// long-lived token, auth_ok or auth_invalid, subscribe_events and its
// result, events of the subscription, get_states with the entities'
// current states, ping/pong) and its REST services
// endpoint (POST /api/services/<domain>/<service>) checks the bearer
// token and records persistent notifications as Home Assistant keeps
// them (one per notification id, replaced by a later create).
package hafake

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// Version is the ha_version the fake announces.
const Version = "2025.1.0"

// Fake is a fake Home Assistant server.
type Fake struct {
	URL string
	srv *httptest.Server

	mu       sync.Mutex
	token    string
	conns    map[*wsConn]bool
	accepted int
	seq      int
	events   map[string][]byte // event id → the frame's event, for Replay
	states   map[string]any    // entity id → its current state object
	down     bool
	served   int      // get_states answered
	before   []func() // run before the next get_states answer
	after    []func() // run after it
	notes    map[string]Notification
	calls    []Notification
	failures []failure
}

// Notification is one persistent_notification.create call.
type Notification struct {
	ID, Title, Message string
}

type failure struct {
	status     int
	retryAfter string
}

type wsConn struct {
	ws  *websocket.Conn
	mu  sync.Mutex
	sub int64 // the subscription's id, 0 before subscribe_events
}

// New starts a fake that accepts token.
func New(token string) *Fake {
	f := &Fake{token: token, conns: map[*wsConn]bool{}, events: map[string][]byte{}, states: map[string]any{}, notes: map[string]Notification{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/websocket", f.serveWS)
	mux.HandleFunc("POST /api/services/{domain}/{service}", f.serveService)
	mux.HandleFunc("GET /api/", func(w http.ResponseWriter, r *http.Request) {
		if !f.authorized(r) {
			http.Error(w, "401: Unauthorized", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`{"message":"API running."}`))
	})
	f.srv = httptest.NewServer(mux)
	f.URL = f.srv.URL
	return f
}

// Close stops the server and its connections.
func (f *Fake) Close() {
	f.Drop()
	f.srv.Close()
}

// SetToken changes the token the fake accepts (a revoked one is refused
// from then on, on the websocket and over REST).
func (f *Fake) SetToken(token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.token = token
}

func (f *Fake) authorized(r *http.Request) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return r.Header.Get("Authorization") == "Bearer "+f.token
}

// Connections counts the websocket connections authenticated so far.
func (f *Fake) Connections() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.accepted
}

// Subscribed counts the connections open now with a state_changed
// subscription.
func (f *Fake) Subscribed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for c := range f.conns {
		if c.sub != 0 {
			n++
		}
	}
	return n
}

// Drop closes every websocket connection, as a restarting Home
// Assistant does.
func (f *Fake) Drop() {
	f.mu.Lock()
	conns := f.conns
	f.conns = map[*wsConn]bool{}
	f.mu.Unlock()
	for c := range conns {
		_ = c.ws.CloseNow()
	}
}

// StatesServed counts the get_states answered (and the AfterStates
// functions run after them).
func (f *Fake) StatesServed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.served
}

// SetDown makes the websocket endpoint answer 503 (Home Assistant
// restarting) until SetDown(false); it does not close the connections
// open (Drop does).
func (f *Fake) SetDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// BeforeStates runs fn once, on the connection's goroutine, when the
// next get_states comes in, before the fake answers it: a change fn makes
// reaches the subscription before the answer and is in it.
func (f *Fake) BeforeStates(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.before = append(f.before, fn)
}

// AfterStates runs fn once, right after the next get_states answer.
func (f *Fake) AfterStates(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.after = append(f.after, fn)
}

func (f *Fake) serveWS(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down {
		http.Error(w, "503: Service Unavailable", http.StatusServiceUnavailable)
		return
	}
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer ws.CloseNow()
	ctx := r.Context()
	c := &wsConn{ws: ws}
	if c.write(ctx, map[string]any{"type": "auth_required", "ha_version": Version}) != nil {
		return
	}
	var auth struct {
		Type        string `json:"type"`
		AccessToken string `json:"access_token"`
	}
	if _, raw, err := ws.Read(ctx); err != nil || json.Unmarshal(raw, &auth) != nil || auth.Type != "auth" {
		_ = c.write(ctx, map[string]any{"type": "auth_invalid", "message": "Auth message incorrectly formatted"})
		return
	}
	f.mu.Lock()
	ok := auth.AccessToken == f.token
	if ok {
		f.accepted++
		f.conns[c] = true
	}
	f.mu.Unlock()
	if !ok {
		_ = c.write(ctx, map[string]any{"type": "auth_invalid", "message": "Invalid access token or password"})
		_ = ws.Close(websocket.StatusNormalClosure, "")
		return
	}
	defer func() {
		f.mu.Lock()
		delete(f.conns, c)
		f.mu.Unlock()
	}()
	if c.write(ctx, map[string]any{"type": "auth_ok", "ha_version": Version}) != nil {
		return
	}
	last := int64(0)
	for {
		_, raw, err := ws.Read(ctx)
		if err != nil {
			return
		}
		var cmd struct {
			ID        int64  `json:"id"`
			Type      string `json:"type"`
			EventType string `json:"event_type"`
		}
		if json.Unmarshal(raw, &cmd) != nil {
			return
		}
		if cmd.ID <= last {
			// Home Assistant requires increasing ids.
			_ = c.write(ctx, map[string]any{"id": cmd.ID, "type": "result", "success": false,
				"error": map[string]string{"code": "id_reuse", "message": "Identifier values have to increase."}})
			continue
		}
		last = cmd.ID
		switch cmd.Type {
		case "subscribe_events":
			if cmd.EventType != "state_changed" {
				_ = c.write(ctx, map[string]any{"id": cmd.ID, "type": "result", "success": false,
					"error": map[string]string{"code": "unauthorized", "message": "Unauthorized"}})
				continue
			}
			f.mu.Lock()
			c.sub = cmd.ID
			f.mu.Unlock()
			_ = c.write(ctx, map[string]any{"id": cmd.ID, "type": "result", "success": true, "result": nil})
		case "get_states":
			f.mu.Lock()
			before := f.before
			f.before = nil
			f.mu.Unlock()
			for _, fn := range before {
				fn()
			}
			f.mu.Lock()
			ids := make([]string, 0, len(f.states))
			for id := range f.states {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			list := make([]any, 0, len(ids))
			for _, id := range ids {
				list = append(list, f.states[id])
			}
			after := f.after
			f.after = nil
			f.mu.Unlock()
			_ = c.write(ctx, map[string]any{"id": cmd.ID, "type": "result", "success": true, "result": list})
			for _, fn := range after {
				fn()
			}
			f.mu.Lock()
			f.served++
			f.mu.Unlock()
		case "ping":
			_ = c.write(ctx, map[string]any{"id": cmd.ID, "type": "pong"})
		default:
			_ = c.write(ctx, map[string]any{"id": cmd.ID, "type": "result", "success": false,
				"error": map[string]string{"code": "unknown_command", "message": "Unknown command."}})
		}
	}
}

func (c *wsConn) write(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.writeRaw(ctx, b)
}

func (c *wsConn) writeRaw(ctx context.Context, b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return c.ws.Write(ctx, websocket.MessageText, b)
}

// State is an entity's state object; a nil *State is none (an entity
// added or removed).
type State struct {
	State      string
	Attributes map[string]any
}

// Change is one state_changed event.
type Change struct {
	EntityID string
	Old, New *State
	// ContextID is the context's id; empty: a fresh one.
	ContextID string
}

// Changed describes a sent event: its context, its time as sent, and
// the event id the gateway derives from them.
type Changed struct {
	ContextID, TimeFired string
	Fired                time.Time
	EventID              string
}

// Change sets the entity's state (New; nil removes it), sends the
// state_changed event to every subscribed connection and returns what
// identifies it. With no connection subscribed the state is set all the
// same, as Home Assistant's is while the gateway is away.
func (f *Fake) Change(ch Change) Changed {
	c := f.Record(ch)
	f.Replay(c.EventID)
	return c
}

// Record is Change without the event: the state is set and the event
// kept for Replay.
func (f *Fake) Record(ch Change) Changed {
	f.mu.Lock()
	f.seq++
	seq := f.seq
	f.mu.Unlock()
	if ch.ContextID == "" {
		ch.ContextID = fmt.Sprintf("01JCTX%020d", seq)
	}
	fired := time.Now().UTC().Truncate(time.Microsecond)
	firedStr := fired.Format("2006-01-02T15:04:05.000000") + "+00:00"
	ctxObj := map[string]any{"id": ch.ContextID, "parent_id": nil, "user_id": nil}
	// last_changed moves only with the state: an attributes-only update
	// (the same state before and after) moves last_updated and keeps the
	// entity's last_changed, in the event's new state as in the state
	// kept.
	changed := firedStr
	if ch.Old != nil && ch.New != nil && ch.Old.State == ch.New.State {
		f.mu.Lock()
		if prev, ok := f.states[ch.EntityID].(map[string]any); ok {
			if lc, ok := prev["last_changed"].(string); ok && prev["state"] == ch.New.State {
				changed = lc
			}
		}
		f.mu.Unlock()
	}
	state := func(s *State) any {
		if s == nil {
			return nil
		}
		attrs := s.Attributes
		if attrs == nil {
			attrs = map[string]any{}
		}
		return map[string]any{"entity_id": ch.EntityID, "state": s.State, "attributes": attrs,
			"last_changed": changed, "last_reported": firedStr, "last_updated": firedStr, "context": ctxObj}
	}
	ev, _ := json.Marshal(map[string]any{
		"event_type": "state_changed",
		"data":       map[string]any{"entity_id": ch.EntityID, "old_state": state(ch.Old), "new_state": state(ch.New)},
		"origin":     "LOCAL", "time_fired": firedStr, "context": ctxObj,
	})
	id := ch.ContextID + ":" + ch.EntityID + ":" + firedStr
	f.mu.Lock()
	f.events[id] = ev
	if ch.New != nil {
		f.states[ch.EntityID] = state(ch.New)
	} else {
		delete(f.states, ch.EntityID)
	}
	f.mu.Unlock()
	return Changed{ContextID: ch.ContextID, TimeFired: firedStr, Fired: fired, EventID: id}
}

// Replay sends the event with this id again (Home Assistant never does;
// the gateway's dedupe must drop it all the same).
func (f *Fake) Replay(eventID string) {
	f.mu.Lock()
	ev := f.events[eventID]
	f.mu.Unlock()
	if ev != nil {
		f.sendEvent(ev)
	}
}

func (f *Fake) sendEvent(ev json.RawMessage) {
	f.mu.Lock()
	type target struct {
		c   *wsConn
		sub int64
	}
	var ts []target
	for c := range f.conns {
		if c.sub != 0 {
			ts = append(ts, target{c, c.sub})
		}
	}
	f.mu.Unlock()
	for _, t := range ts {
		b, _ := json.Marshal(map[string]any{"id": t.sub, "type": "event", "event": ev})
		_ = t.c.writeRaw(context.Background(), b)
	}
}

// InjectRaw sends raw text as one websocket message to every subscribed
// connection; "{{id}}" in it is replaced by the subscription's id.
func (f *Fake) InjectRaw(raw string) {
	f.mu.Lock()
	var cs []*wsConn
	for c := range f.conns {
		if c.sub != 0 {
			cs = append(cs, c)
		}
	}
	f.mu.Unlock()
	for _, c := range cs {
		_ = c.writeRaw(context.Background(), []byte(strings.ReplaceAll(raw, "{{id}}", strconv.FormatInt(c.sub, 10))))
	}
}

// FailNext makes the next service call fail with status (and a
// Retry-After header when retryAfter is set).
func (f *Fake) FailNext(status int, retryAfter string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures = append(f.failures, failure{status, retryAfter})
}

func (f *Fake) serveService(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(r) {
		http.Error(w, "401: Unauthorized", http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	if len(f.failures) > 0 {
		fl := f.failures[0]
		f.failures = f.failures[1:]
		f.mu.Unlock()
		if fl.retryAfter != "" {
			w.Header().Set("Retry-After", fl.retryAfter)
		}
		http.Error(w, http.StatusText(fl.status), fl.status)
		return
	}
	f.mu.Unlock()
	domain, service := r.PathValue("domain"), r.PathValue("service")
	if domain != "persistent_notification" || service != "create" {
		http.Error(w, "400: Bad Request", http.StatusBadRequest)
		return
	}
	var body struct {
		Title          string `json:"title"`
		Message        string `json:"message"`
		NotificationID string `json:"notification_id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Message == "" {
		http.Error(w, "400: Bad Request", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	if body.NotificationID == "" {
		body.NotificationID = fmt.Sprintf("%x", time.Now().UnixNano())
	}
	n := Notification{ID: body.NotificationID, Title: body.Title, Message: body.Message}
	f.notes[n.ID] = n
	f.calls = append(f.calls, n)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte("[]"))
}

// Notifications returns the notifications Home Assistant shows now (one
// per id, the latest create's), in the order they were first made.
func (f *Fake) Notifications() []Notification {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Notification
	seen := map[string]bool{}
	for _, c := range f.calls {
		if !seen[c.ID] {
			seen[c.ID] = true
			out = append(out, f.notes[c.ID])
		}
	}
	return out
}

// Calls returns every persistent_notification.create call, in order.
func (f *Fake) Calls() []Notification {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Notification(nil), f.calls...)
}
