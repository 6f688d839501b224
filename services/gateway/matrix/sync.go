package matrix

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// startGrace is Hermes's: on the very first start (no stored token), the
// messages of the initial sync older than this before the start are
// history, not messages to answer.
const startGrace = 5 * time.Second

// syncGrace is how long past its timeout a /sync from a token may go
// unanswered (the homeserver building a large answer) before the gateway
// gives it up as a connection gone silent (a NAT or a proxy that dropped
// it without a reset) and connects again.
const syncGrace = 30 * time.Second

// initialSyncGrace is the same for the initial sync (no token), whose
// answer (every room's state) a homeserver may take minutes to build
// for a large account, and for a connection's first sync from a token
// (what happened while the gateway was away); the HTTP client's 180 s as
// before.
const initialSyncGrace = 3 * time.Minute

// maxEventBytes bounds one room event's content; larger ones are
// rejected (the kit bounds the published event too).
const maxEventBytes = 64 << 10

// Connect runs the /sync loop from the stored token until ctx ends or a
// sync fails. Each batch's messages are published, the invites joined
// and the read receipts sent before the token moves on. A stored token
// the homeserver no longer knows is dropped (see positionUnknown).
func (p *Platform) Connect(ctx context.Context, conn platform.Conn) error {
	if p.bus == nil {
		return platform.Fatal(errors.New("matrix: platform not attached to a bus"))
	}
	if p.cursor == nil {
		p.cursor = &cursor{bus: p.bus, key: cursorKey(p.Account())}
	}
	since, err := p.cursor.load(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if err := p.loadDirect(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return p.syncFailed(err)
	}
	if since == "" && p.started.IsZero() {
		p.started = p.clock()
	}
	// history: while no token is held, the initial sync's events older
	// than this are history, not messages to answer.
	var history time.Time
	if since == "" {
		history = p.started.Add(-startGrace)
	}
	// reset: this Connect dropped a stored token already; a token it was
	// given since refused as well is not the homeserver's lost database
	// (a 400 for another reason), and starting again at once would loop.
	connected, reset := false, false
	for ctx.Err() == nil {
		timeout := p.sync
		if !connected {
			timeout = 0 // answer at once: the gateway is ready when it did
		}
		// The long poll's own deadline: the homeserver answers by its
		// timeout; one that has not a grace later is not going to. The
		// first sync of a connection, from a token or not, may have a
		// large answer to build (what happened while the gateway was
		// away), and gets the initial sync's grace.
		grace := p.syncGrace
		if since == "" || !connected {
			grace = initialSyncGrace
		}
		pollCtx, cancel := context.WithTimeout(ctx, timeout+grace)
		resp, err := p.syncLenient(pollCtx, mautrix.ReqSync{Since: since, Timeout: int(timeout.Milliseconds())}, p.rejectEvent(ctx, conn))
		silent := pollCtx.Err() != nil
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if wait, ok := syncRateLimited(err); ok {
				p.log.Warn("matrix: the homeserver rate-limits /sync; trying again after the wait it names", "wait", wait, "err", err)
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return nil
				case <-t.C:
				}
				continue
			}
			if silent {
				return fmt.Errorf("matrix sync: no answer within %s (the connection gone silent?): %w", timeout+grace, err)
			}
			if since != "" && positionUnknown(err) && !reset {
				// Start again as a first start does, from the homeserver's
				// current state; what is older than the token held (less
				// the grace) was taken already, or is lost with the
				// homeserver's database.
				history = p.cursor.at
				if history.IsZero() {
					history = p.clock()
				}
				history = history.Add(-startGrace)
				p.log.Error("matrix: the homeserver does not know the stored sync position (its database restored, wiped or replaced?); syncing again from its current state, messages sent before the position was stored are not read again",
					"stored_at", p.cursor.at, "err", err)
				since, reset = "", true
				continue
			}
			return p.syncFailed(err)
		}
		if !connected {
			connected = true
			conn.Connected()
		}
		if err := p.handle(ctx, conn, resp, since, history); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if resp.NextBatch == "" {
			return errors.New("matrix sync: answer without next_batch")
		}
		if err := p.cursor.store(ctx, resp.NextBatch); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		// A token is held: a start that finds none later (the key
		// deleted, the bucket lost) is a start of its own.
		since, history, p.started = resp.NextBatch, time.Time{}, time.Time{}
	}
	return nil
}

// maxSyncRetryAfter bounds the wait a 429 on /sync may ask for.
const maxSyncRetryAfter = 5 * time.Minute

// syncRateLimited reports the wait a /sync refused with a 429
// (M_LIMIT_EXCEEDED) names (Retry-After, else retry_after_ms), at most
// maxSyncRetryAfter; ok false when it is no such refusal or names no
// wait (the reconnect schedule's then).
func syncRateLimited(err error) (wait time.Duration, ok bool) {
	var he mautrix.HTTPError
	if !errors.As(err, &he) {
		return 0, false
	}
	limited := he.Response != nil && he.Response.StatusCode == http.StatusTooManyRequests ||
		he.RespError != nil && he.RespError.ErrCode == mautrix.MLimitExceeded.ErrCode
	if !limited {
		return 0, false
	}
	d, ok := namedWait(he)
	return min(d, maxSyncRetryAfter), ok
}

// positionUnknown reports whether a /sync from a token failed because
// the homeserver does not know the token: a 400 naming it (Synapse:
// M_UNKNOWN "Invalid stream token" for a token it cannot read; Dendrite:
// M_INVALID_PARAM; sliding sync: M_UNKNOWN_POS). Its database restored,
// wiped or replaced, the homeserver will not know it at the next try
// either. A 429, a 5xx or the network is no such answer.
func positionUnknown(err error) bool {
	var he mautrix.HTTPError
	if !errors.As(err, &he) || he.Response == nil || he.Response.StatusCode != http.StatusBadRequest || he.RespError == nil {
		return false
	}
	switch he.RespError.ErrCode {
	case "M_UNKNOWN_POS", mautrix.MInvalidParam.ErrCode, "M_INVALID_ARGUMENT_VALUE", mautrix.MUnknown.ErrCode:
		return true
	}
	return false
}

// rejectEvent is the badEvent of a sync: an event of the answer that
// does not decode is rejected (logged with a summary, counted) and the
// token moves on past it.
func (p *Platform) rejectEvent(ctx context.Context, conn platform.Conn) badEvent {
	return func(raw json.RawMessage, err error) {
		conn.Reject(ctx, "undecodable", fmt.Errorf("matrix event %s: %w", platform.Summary(raw), err))
	}
}

// syncFailed turns a failed /sync into the connection's error: an
// access token the homeserver does not know is fatal; anything else (a 429, a 5xx,
// the network) is retried on the backoff schedule.
func (p *Platform) syncFailed(err error) error {
	var he mautrix.HTTPError
	if errors.As(err, &he) && he.RespError != nil {
		switch he.RespError.ErrCode {
		case mautrix.MUnknownToken.ErrCode, mautrix.MMissingToken.ErrCode:
			return platform.Fatal(fmt.Errorf("matrix: the homeserver refused the access token (MATRIX_ACCESS_TOKEN): %w", err))
		}
	}
	return fmt.Errorf("matrix sync: %w", err)
}

// loadDirect reads the account's m.direct data (which rooms are DMs):
// a sync from a stored token carries it only when it changes.
func (p *Platform) loadDirect(ctx context.Context) error {
	var direct map[id.UserID][]id.RoomID
	err := p.cli.GetAccountData(ctx, event.AccountDataDirectChats.Type, &direct)
	var he mautrix.HTTPError
	if errors.As(err, &he) && he.IsStatus(http.StatusNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read m.direct: %w", err)
	}
	p.rooms.setDirect(direct)
	return nil
}

// handle publishes one sync answer's messages, joins its invites and
// marks what was taken as read. Events sent before notBefore (the first
// start's history) are skipped. A room whose timeline is limited (more
// happened since the token since than the answer carries) is filled in
// from /messages first.
func (p *Platform) handle(ctx context.Context, conn platform.Conn, resp *mautrix.RespSync, since string, notBefore time.Time) error {
	for _, ev := range resp.AccountData.Events {
		if ev.Type == event.AccountDataDirectChats {
			var direct map[id.UserID][]id.RoomID
			if json.Unmarshal(ev.Content.VeryRaw, &direct) == nil {
				p.rooms.setDirect(direct)
			}
		}
	}
	roomIDs := make([]id.RoomID, 0, len(resp.Rooms.Join))
	for rid := range resp.Rooms.Join {
		roomIDs = append(roomIDs, rid)
	}
	sort.Slice(roomIDs, func(i, j int) bool { return roomIDs[i] < roomIDs[j] })
	receipts := map[id.RoomID]id.EventID{}
	for _, rid := range roomIDs {
		jr := resp.Rooms.Join[rid]
		r := p.rooms.get(rid)
		// Without a token the answer has each room's whole state (the
		// sync asks for no lazy loading of members).
		r.apply(jr.State.Events, &jr.Summary, since == "")
		timeline := jr.Timeline.Events
		if jr.Timeline.Limited && since != "" && jr.Timeline.PrevBatch != "" {
			gap, err := p.backfill(ctx, rid, jr.Timeline.PrevBatch, since, p.rejectEvent(ctx, conn))
			if err != nil {
				return err
			}
			timeline = append(gap, timeline...)
		}
		for _, ev := range timeline {
			// One event whose handling panics is skipped (logged,
			// counted), the token moving on past it.
			var took bool
			var err error
			var eid string
			var raw []byte
			if ev != nil { // null in the list: take panics, and is skipped
				eid, raw = ev.ID.String(), ev.Content.VeryRaw
			}
			if !platform.Receive(ctx, conn, p.log, "matrix", eid, raw, func() {
				took, err = p.take(ctx, conn, r, rid, ev, notBefore)
			}) {
				continue
			}
			if err != nil {
				return err
			}
			if took {
				receipts[rid] = ev.ID
			}
		}
	}
	if p.cfg.AutoJoin {
		p.joinInvites(ctx, resp.Rooms)
	}
	if p.cfg.ReadReceipts {
		for rid, eid := range receipts {
			if err := p.cli.SendReceipt(ctx, rid, eid, event.ReceiptTypeRead, nil); err != nil {
				p.log.Debug("matrix: read receipt failed", "chat_id", rid.String(), "err", err)
			}
		}
	}
	return nil
}

// take publishes one timeline event of room r unless it is skipped;
// took reports it was published (for the read receipt), an error that
// it was not stored and the sync answer must be read again.
func (p *Platform) take(ctx context.Context, conn platform.Conn, r *room, rid id.RoomID, ev *event.Event, notBefore time.Time) (took bool, err error) {
	r.apply([]*event.Event{ev}, nil, false)
	ev.RoomID = rid
	if !notBefore.IsZero() && ev.Timestamp > 0 && time.UnixMilli(ev.Timestamp).Before(notBefore) {
		skipped.WithLabelValues(string(skipOld)).Inc()
		return false, nil
	}
	if ev.Type == event.EventMessage && len(ev.Content.VeryRaw) > maxEventBytes {
		conn.Reject(ctx, "oversized", fmt.Errorf("matrix event %s: %d bytes of content, at most %d", ev.ID, len(ev.Content.VeryRaw), maxEventBytes))
		return false, nil
	}
	if err := p.ensureRoom(ctx, r); err != nil {
		return false, err
	}
	msg, reason, err := normalize(ev, r.view(p.cfg.UserID), p.rules(), func(thread id.EventID) bool {
		ok, err := conn.Seen(ctx, thread.String())
		return err == nil && ok
	})
	if err != nil {
		conn.Reject(ctx, "malformed", fmt.Errorf("matrix event %s: %w", ev.ID, err))
		return false, nil
	}
	if reason != skipNone {
		skipped.WithLabelValues(string(reason)).Inc()
		if reason == skipEncrypted {
			p.log.Warn("matrix: skipped an encrypted message: end-to-end encryption is not supported", "chat_id", rid.String(), "event", ev.ID.String())
		}
		return false, nil
	}
	if _, err := conn.Deliver(ctx, msg); err != nil && !errors.Is(err, platform.ErrRejected) {
		return false, fmt.Errorf("publish matrix event %s: %w", ev.ID, err)
	}
	return true, nil
}

// maxBackfill bounds the events read back through one room's gap; what
// is older is logged as skipped.
const maxBackfill = 1000

// backfillPage is one /messages page.
const backfillPage = 100

// backfill returns a room's events between the stored token since and
// from (a limited timeline's prev_batch), oldest first: the homeserver
// leaves them out of a sync answer beyond its timeline limit (Synapse:
// 10 a room by default), and skipping them would lose every message but
// the last few sent while the gateway was down.
func (p *Platform) backfill(ctx context.Context, rid id.RoomID, from, since string, bad badEvent) ([]*event.Event, error) {
	var back []*event.Event
	for from != "" {
		if len(back) >= maxBackfill {
			skipped.WithLabelValues("gap too long").Inc()
			p.log.Warn("matrix: more missed events in a room than the gateway reads back; older ones are skipped",
				"chat_id", rid.String(), "read", len(back))
			break
		}
		resp, err := p.messagesLenient(ctx, rid, from, since, mautrix.DirectionBackward, backfillPage, bad)
		if err != nil {
			return nil, fmt.Errorf("matrix: fill the gap in a room's timeline: %w", err)
		}
		back = append(back, resp.Chunk...)
		if len(resp.Chunk) == 0 || resp.End == from {
			break
		}
		from = resp.End
	}
	slices.Reverse(back)
	return back, nil
}

// pendingJoin is an invite whose join failed for a while and is tried
// again.
type pendingJoin struct {
	direct bool
	tries  int
	next   time.Time // not before
}

// Waits between tries of a join that failed for a while.
const (
	joinRetryMin = time.Second
	joinRetryMax = 5 * time.Minute
)

// joinInvites joins the rooms the bot is invited to, as Hermes does; an
// invite marked is_direct marks the room a DM (which decides only while
// its members are not known). The homeserver puts an
// invite in one sync answer only, and the stored token moves past it: a
// join that fails for a while (a 429, a 5xx, the network) is kept and
// tried again at the following syncs, after the wait the homeserver names
// (retry_after_ms) or a backoff doubling from 1 s to 5 min, until the
// room shows up joined or left. A join refused for good (another 4xx:
// the invite withdrawn, a ban) is logged and dropped. The joins pending
// live in the syncing replica's memory: a restart or a lease handover
// meanwhile forgets them.
func (p *Platform) joinInvites(ctx context.Context, rs mautrix.RespSyncRooms) {
	if p.joins == nil {
		p.joins = map[id.RoomID]*pendingJoin{}
	}
	for rid := range rs.Join {
		delete(p.joins, rid)
	}
	for rid := range rs.Leave {
		delete(p.joins, rid) // the invite withdrawn or refused
	}
	for rid, inv := range rs.Invite {
		direct := false
		if inv != nil {
			for _, ev := range inv.State.Events {
				if ev != nil && ev.Type == event.StateMember && ev.StateKey != nil && isBot(id.UserID(*ev.StateKey), id.UserID(p.cfg.UserID)) {
					var m struct {
						IsDirect bool `json:"is_direct"`
					}
					if json.Unmarshal(ev.Content.VeryRaw, &m) == nil && m.IsDirect {
						direct = true
					}
				}
			}
		}
		p.joins[rid] = &pendingJoin{direct: direct}
	}
	now := time.Now()
	for rid, pj := range p.joins {
		if now.Before(pj.next) || ctx.Err() != nil {
			continue
		}
		if _, err := p.cli.JoinRoomByID(ctx, rid); err != nil {
			var se *platform.SendError
			if errors.As(classify(err), &se) && se.Class == deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
				p.log.Warn("matrix: the homeserver refused to join a room the bot was invited to", "chat_id", rid.String(), "err", err)
				delete(p.joins, rid)
				continue
			}
			wait := min(joinRetryMin<<min(pj.tries, 20), joinRetryMax)
			if se != nil && se.RetryAfter > wait {
				wait = se.RetryAfter
			}
			pj.tries++
			pj.next = now.Add(wait)
			p.log.Warn("matrix: joining a room the bot was invited to failed; trying again", "chat_id", rid.String(), "in", wait, "err", err)
			continue
		}
		delete(p.joins, rid)
		p.log.Info("matrix: joined a room on invite", "chat_id", rid.String(), "direct", pj.direct)
		if pj.direct {
			p.rooms.get(rid).markDirect()
		}
	}
}

func (p *Platform) rules() rules {
	return rules{Bot: id.UserID(p.cfg.UserID), RequireMention: p.cfg.RequireMention, Free: p.free, Allowed: p.allowed,
		AutoThread: p.cfg.AutoThread, DMAutoThread: p.cfg.DMAutoThread, ProcessNotices: p.cfg.ProcessNotices}
}

// ensureRoom asks the homeserver what a sync from a stored token does
// not repeat: the room's members (their names, whether it is a DM) and
// its name, once per room; the member events of the syncs keep them up
// to date from then on.
func (p *Platform) ensureRoom(ctx context.Context, r *room) error {
	if r.loaded() {
		return nil
	}
	members, err := p.cli.JoinedMembers(ctx, r.id)
	if err != nil {
		return fmt.Errorf("matrix: members of %s: %w", r.id, err)
	}
	var name event.RoomNameEventContent
	err = p.cli.StateEvent(ctx, r.id, event.StateRoomName, "", &name)
	var he mautrix.HTTPError
	if err != nil && !(errors.As(err, &he) && he.IsStatus(http.StatusNotFound)) {
		return fmt.Errorf("matrix: name of %s: %w", r.id, err)
	}
	r.load(members, name.Name)
	return nil
}

// rooms is what the syncing replica knows of its rooms.
type rooms struct {
	mu     sync.Mutex
	m      map[id.RoomID]*room
	direct map[id.RoomID]bool
}

func (rs *rooms) get(rid id.RoomID) *room {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r, ok := rs.m[rid]
	if !ok {
		r = &room{id: rid, names: map[id.UserID]string{}, members: map[id.UserID]bool{}, listed: rs.direct[rid]}
		rs.m[rid] = r
	}
	return r
}

func (rs *rooms) setDirect(direct map[id.UserID][]id.RoomID) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.direct = map[id.RoomID]bool{}
	for _, list := range direct {
		for _, rid := range list {
			rs.direct[rid] = true
		}
	}
	for rid, r := range rs.m {
		r.mu.Lock()
		r.listed = rs.direct[rid]
		r.mu.Unlock()
	}
}

// room is one room's state as far as the gateway uses it.
type room struct {
	id id.RoomID

	mu     sync.Mutex
	name   string
	listed bool // in the account's m.direct as it is now
	// invitedDirect: joined on an is_direct invite, or a member joined
	// with is_direct.
	invitedDirect bool
	joined        int // from the sync summary, 0 when unknown
	names         map[id.UserID]string
	members       map[id.UserID]bool // joined or not, by member events
	// complete: members holds every member (the homeserver's list, or an
	// initial sync's whole state), kept up to date by member events since.
	complete bool
}

func (r *room) markDirect() {
	r.mu.Lock()
	r.invitedDirect = true
	r.mu.Unlock()
}

func (r *room) loaded() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.complete
}

// load takes the homeserver's list of the members and the room's name.
func (r *room) load(members *mautrix.RespJoinedMembers, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.complete = true
	if r.name == "" {
		r.name = name
	}
	clear(r.members)
	for u, m := range members.Joined {
		r.members[u] = true
		if m.DisplayName != "" && r.names[u] == "" {
			r.names[u] = m.DisplayName
		}
	}
}

// apply takes state events (the sync's state, or a timeline's state
// events) and the summary into the room; whole says the events are the
// room's whole state.
func (r *room) apply(evs []*event.Event, summary *mautrix.LazyLoadSummary, whole bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if summary != nil && summary.JoinedMemberCount != nil {
		r.joined = *summary.JoinedMemberCount
	}
	for _, ev := range evs {
		if ev.StateKey == nil {
			continue
		}
		switch ev.Type {
		case event.StateRoomName:
			var c event.RoomNameEventContent
			if json.Unmarshal(ev.Content.VeryRaw, &c) == nil {
				r.name = c.Name
			}
		case event.StateMember:
			var c event.MemberEventContent
			if json.Unmarshal(ev.Content.VeryRaw, &c) != nil {
				continue
			}
			u := id.UserID(*ev.StateKey)
			r.members[u] = c.Membership == event.MembershipJoin
			if c.Displayname != "" {
				r.names[u] = c.Displayname
			}
			if c.Membership == event.MembershipJoin && c.IsDirect {
				r.invitedDirect = true
			}
			if whole {
				r.complete = true
			}
		}
	}
}

// view is the room as normalize sees it, now: a DM while only the bot
// and one other person are in it, as Hermes has it, a group room once a
// third joins (m.direct or not) and a DM again when they are two. Only
// when the members are not known does the account's marking decide
// (m.direct, an is_direct invite).
func (r *room) view(bot string) roomView {
	r.mu.Lock()
	defer r.mu.Unlock()
	joined := r.joined
	if r.complete {
		joined = 0
		for _, in := range r.members {
			if in {
				joined++
			}
		}
	}
	dm := joined > 0 && joined <= 2
	if joined == 0 {
		dm = r.listed || r.invitedDirect
	}
	names := make(map[id.UserID]string, len(r.names))
	botName := ""
	for u, n := range r.names {
		names[u] = n
		if isBot(u, id.UserID(bot)) {
			botName = n
		}
	}
	return roomView{ID: r.id, Name: r.name, DM: dm, BotName: botName,
		Names: func(u id.UserID) string { return names[u] }}
}
