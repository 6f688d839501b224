package mattermost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// maxFrameBytes bounds one websocket message; a larger one closes the
// connection (the kit reconnects, the catch-up reads what it missed).
const maxFrameBytes = 1 << 20

// authSeq is the seq of the authentication challenge, the client's first
// action on a connection.
const authSeq = 1

// Connect checks the token (GET /users/me), opens the websocket,
// authenticates with the token (authentication_challenge) and publishes the posted events until ctx
// ends or the connection fails. Once the server accepted the token, a
// reconnect first catches up with the channels seen before.
func (p *Platform) Connect(ctx context.Context, conn platform.Conn) error {
	// As Hermes does on each connect: a token revoked since the start
	// stops the gateway with the reason instead of retrying forever.
	mctx, cancelMe := context.WithTimeout(ctx, p.cfg.CallTimeout)
	_, err := p.cli.me(mctx)
	cancelMe()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		var ae *apiError
		if errors.As(err, &ae) && (ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden) {
			return platform.Fatal(fmt.Errorf("mattermost: the server refused the token (MATTERMOST_TOKEN): %w", err))
		}
		return err
	}
	// A connection read before is resumed (Mattermost's reliable
	// websockets): the server sends again what it queued for it since,
	// which the server accepts only of a request that carries the token
	// (the challenge comes too late for it).
	resumeID, next := p.resume.point()
	addr, opts := p.wsURL(), &websocket.DialOptions{HTTPClient: p.hc}
	if resumeID != "" {
		addr += "?connection_id=" + url.QueryEscape(resumeID) + "&sequence_number=" + strconv.FormatInt(next, 10)
		opts.HTTPHeader = http.Header{"Authorization": {"Bearer " + p.cfg.Token}}
	}
	dctx, cancelDial := context.WithTimeout(ctx, p.cfg.CallTimeout)
	ws, resp, err := websocket.Dial(dctx, addr, opts)
	cancelDial()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		if resp != nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
			return platform.Fatal(fmt.Errorf("mattermost: the server refused the websocket (HTTP %d): check MATTERMOST_TOKEN", resp.StatusCode))
		}
		return fmt.Errorf("mattermost websocket: %w", err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(maxFrameBytes)
	challenge, _ := json.Marshal(map[string]any{"seq": authSeq, "action": "authentication_challenge", "data": map[string]string{"token": p.cfg.Token}})
	if err := ws.Write(ctx, websocket.MessageText, challenge); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("mattermost websocket: authenticate: %w", err)
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The answer to the challenge is waited for within CallTimeout.
	unanswered := time.AfterFunc(p.cfg.CallTimeout, func() {
		cancel(fmt.Errorf("authentication unanswered within %s", p.cfg.CallTimeout))
	})
	defer unanswered.Stop()
	authed := false
	// answered: the server answered a ping on the connection, so it has
	// it (a resumed one it refused would have ended at once).
	var answered atomic.Bool
	// accepted: the server took the token. It says so by its answer to
	// the challenge or, earlier, by its first event: it registers the
	// connection (hello, then the events) before it answers, so a post
	// can come first, and it sends no event to a connection it did not
	// register.
	accepted := func() {
		unanswered.Stop()
		authed = true
		conn.Connected()
		if p.cfg.CatchUp {
			p.catchUp(rctx, conn)
		}
		go p.ping(rctx, ws, cancel, &answered)
	}
	if resumeID != "" {
		// The server took the token with the request (a refused one is
		// a 401 there) and sends no hello to a connection it resumes.
		accepted()
	}
	events := 0
	for {
		_, raw, err := ws.Read(rctx)
		if err != nil {
			switch {
			case errors.Is(err, websocket.ErrMessageTooBig):
				// The event after the last one handled: the resumed
				// connection starts after it, or the server would send
				// it again and close every connection for ever.
				p.resume.skip()
			case resumeID != "" && events == 0 && !answered.Load() && ctx.Err() == nil:
				// A server that ends a resumed connection before any
				// event or answered ping may not take the id: the next
				// one starts afresh. One that answered a ping kept it,
				// though it had nothing to send again and nothing came
				// since (a quiet bot): forgotten, the posts the server
				// queued for it while it was down next would be lost.
				p.resume.forget()
			}
			if ctx.Err() != nil {
				_ = ws.Close(websocket.StatusNormalClosure, "")
				return nil
			}
			if cause := context.Cause(rctx); cause != nil && !errors.Is(cause, context.Canceled) {
				err = cause
			}
			return fmt.Errorf("mattermost websocket: %w", err)
		}
		f, err := parseFrame(raw)
		if err != nil {
			conn.Reject(ctx, "malformed websocket message", err)
			continue
		}
		if f.Event != "" && !authed {
			accepted()
		}
		if f.Event != "" {
			events++
		}
		if f.Event == "hello" {
			p.resume.hello(f)
		}
		switch {
		case f.SeqReply == authSeq:
			if f.Status != "OK" {
				return platform.Fatal(fmt.Errorf("mattermost: the server refused the token (MATTERMOST_TOKEN): %s", strings.TrimSpace(string(f.Error))))
			}
			if !authed {
				accepted()
			}
		case f.Event == "posted":
			// A post whose handling panics is skipped (logged,
			// counted); the connection and the posts after it go on.
			platform.Receive(rctx, conn, p.log, "mattermost", strconv.FormatInt(f.Seq, 10), f.Data, func() { p.handlePosted(rctx, conn, f.Data) })
		}
		if f.Event != "" && rctx.Err() == nil {
			// Handled: a resumed connection starts after it.
			p.resume.handled(f.Seq)
		}
	}
}

// resumePoint is where a reconnect resumes the websocket connection: the
// id the server's hello gave it and the seq of the first event not
// handled yet.
type resumePoint struct {
	mu   sync.Mutex
	id   string
	next int64
}

func (r *resumePoint) point() (string, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.id, r.next
}

// hello starts a connection: its id (none from a server without
// reliable websockets, whose connections are not resumed) and its first
// seq.
func (r *resumePoint) hello(f *frame) {
	var d struct {
		ConnectionID string `json:"connection_id"`
	}
	_ = json.Unmarshal(f.Data, &d)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.id, r.next = d.ConnectionID, f.Seq
}

// handled notes the event numbered seq handled.
func (r *resumePoint) handled(seq int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next = max(r.next, seq+1)
}

// skip passes over the event after the last one handled, unread.
func (r *resumePoint) skip() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.id != "" {
		r.next++
	}
}

func (r *resumePoint) forget() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.id, r.next = "", 0
}

// wsURL is the server's websocket endpoint (ws:// for http://, wss://
// for https://).
func (p *Platform) wsURL() string {
	u := p.cli.base + "/api/v4/websocket"
	if rest, ok := strings.CutPrefix(u, "http"); ok {
		return "ws" + rest
	}
	return u
}

// ping keeps the connection alive; one unanswered within the interval
// ends the read loop, and the kit reconnects. Pongs are read by the
// reader, so no ping is sent, and a failed one does not count, while the
// reader is handling a post (asking the server about its author or its
// files, or publishing it, waiting for the bus while NATS is out of
// reach): the post waits in the gateway, on its connection. A ping
// answered sets answered: the server has the connection.
func (p *Platform) ping(ctx context.Context, ws *websocket.Conn, fail context.CancelCauseFunc, answered *atomic.Bool) {
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
			if err == nil {
				answered.Store(true)
			}
			if err != nil && ctx.Err() == nil {
				if p.delivering.Load() > 0 || p.deliveries.Load() != started {
					// The pong came while the reader was held up
					// publishing (the bus out of reach): unread, not
					// unanswered. Dropping the connection would drop
					// the post with it.
					continue
				}
				fail(fmt.Errorf("ping unanswered: %w", err))
				return
			}
		}
	}
}

// handlePosted publishes one posted event.
func (p *Platform) handlePosted(ctx context.Context, conn platform.Conn, data json.RawMessage) {
	ev, err := parsePosted(data)
	if err != nil {
		conn.Reject(ctx, "malformed posted event", err)
		return
	}
	p.publish(ctx, conn, ev)
}

// publish normalizes a post and hands it to the kit, retrying while the
// bus is out of reach: the websocket will not send it again.
func (p *Platform) publish(ctx context.Context, conn platform.Conn, ev *posted) {
	if n := utf8.RuneCountInString(ev.Post.Message); n > maxPostRunes {
		conn.Reject(ctx, "post longer than Mattermost allows", fmt.Errorf("post %s has %d characters, the limit is %d", ev.Post.ID, n, maxPostRunes))
		return
	}
	// While it handles the post, the reader reads nothing, pongs
	// included: ping does not take their absence for a dead connection.
	// That is while it asks the server about the post (its author, its
	// files: a slow answer holds it up to CallTimeout a call, longer than
	// a ping interval) as much as while it publishes. A dropped
	// connection would drop the post, and lose it in a channel the
	// catch-up does not know yet.
	p.deliveries.Add(1)
	p.delivering.Add(1)
	defer p.delivering.Add(-1)
	if ev.Post.UserID != p.rules.BotID && ev.Post.Type == "" {
		ev.FromBot = ev.Post.fromProgram() || p.isBot(ctx, ev.Post.UserID)
	}
	m, why := normalize(ev, p.rules)
	if why == skipNone && p.describeFiles(ctx, ev.Post) {
		m, why = normalize(ev, p.rules)
	}
	if why != skipNone {
		skipped.WithLabelValues(string(why)).Inc()
		p.log.Debug("mattermost post skipped", "why", string(why), "post_id", ev.Post.ID)
		p.remember(ev)
		return
	}
	for ctx.Err() == nil {
		_, err := conn.Deliver(ctx, m)
		if err == nil || errors.Is(err, platform.ErrRejected) {
			p.remember(ev)
			return
		}
		p.log.Warn("mattermost post not published; retrying", "post_id", ev.Post.ID, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// describeFiles asks the server about the files a post names without
// describing them in its metadata (GET /files/{id}/info, which Hermes's
// adapter asks of every file of a post) and adds what it answers to the
// metadata; it reports whether it added any. Known by its id alone, an
// audio file or a picture was published as a document: never
// transcribed, never a voice message. A file the server does not
// describe stays so (its download tells its type), and the post is
// published all the same.
func (p *Platform) describeFiles(ctx context.Context, po *post) bool {
	known := make(map[string]bool, len(po.Metadata.Files))
	for _, f := range po.Metadata.Files {
		known[f.ID] = true
	}
	added := false
	for _, id := range po.FileIDs {
		if known[id] || !validID(id) {
			continue
		}
		known[id] = true
		fctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
		f, err := p.cli.describeFile(fctx, id)
		cancel()
		if err == nil && f.ID != id {
			err = fmt.Errorf("the answer describes file %q", f.ID)
		}
		if err != nil {
			p.log.Warn("mattermost file info failed; the file is published as a document", "post_id", po.ID, "file_id", id, "err", err)
			continue
		}
		po.Metadata.Files = append(po.Metadata.Files, *f)
		added = true
	}
	return added
}

// remember notes a post's channel, its newest post and its author's
// name, for the catch-up after a reconnect. A channel allowed_channels
// keeps out is not noted: every post the catch-up read there would be
// skipped, a read (and a step nearer the rate limit) each reconnect for
// nothing.
func (p *Platform) remember(ev *posted) {
	if !p.rules.allowed(ev) {
		return
	}
	po := ev.Post
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.channels[po.ChannelID]
	if ch == nil {
		if len(p.channels) >= maxChannels {
			return
		}
		ch = &channel{}
		p.channels[po.ChannelID] = ch
	}
	if ev.ChannelType != "" {
		ch.Type = ev.ChannelType
	}
	if ev.ChannelName != "" {
		ch.Name = ev.ChannelName
	}
	ch.Last = max(ch.Last, po.CreateAt)
	if ev.SenderName != "" && len(p.names) < maxChannels {
		p.names[po.UserID] = ev.SenderName
	}
}

// maxChannels bounds the channels (and names) remembered for catch-up.
const maxChannels = 10000

// catchUp publishes what the channels seen before got while the
// websocket was down, oldest first. A channel it cannot read (an error,
// no answer within CallTimeout) is left (logged): the loss window of a
// websocket without replay.
func (p *Platform) catchUp(ctx context.Context, conn platform.Conn) {
	p.mu.Lock()
	seen := make(map[string]channel, len(p.channels))
	for id, ch := range p.channels {
		seen[id] = *ch
	}
	p.mu.Unlock()
	for id, ch := range seen {
		if ctx.Err() != nil {
			return
		}
		list, err := p.readSince(ctx, id, ch.Last)
		if err != nil {
			p.log.Warn("mattermost catch-up: channel not read; posts made there while disconnected are lost", "chat_id", id, "err", err)
			continue
		}
		var posts []*post
		for _, po := range list.Posts {
			if po != nil && po.ID != "" && po.CreateAt >= ch.Last && po.ChannelID == id {
				posts = append(posts, po)
			}
		}
		sort.Slice(posts, func(i, j int) bool { return posts[i].CreateAt < posts[j].CreateAt })
		for _, po := range posts {
			caughtUp.Inc()
			platform.Receive(ctx, conn, p.log, "mattermost", po.ID, nil, func() {
				p.publish(ctx, conn, &posted{Post: po, ChannelType: ch.Type, ChannelName: ch.Name, SenderName: p.userName(ctx, po.UserID)})
			})
		}
	}
}

// catchUpTries bounds the reads of one channel the server rate limits
// during a catch-up.
const catchUpTries = 5

// readSince reads a channel's posts since a time for the catch-up, each
// read within CallTimeout. A read the server rate limits (429, which a
// catch-up of many channels meets on a server with rate limiting on) is
// made again after the wait it names (X-Ratelimit-Reset, at most
// CallTimeout), up to catchUpTries reads: given up, the channel's posts
// made while disconnected would be lost.
func (p *Platform) readSince(ctx context.Context, id string, since int64) (*postList, error) {
	for try := 1; ; try++ {
		cctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
		list, err := p.cli.postsSince(cctx, id, since)
		cancel()
		var ae *apiError
		if err == nil || try == catchUpTries || !errors.As(err, &ae) || ae.Status != http.StatusTooManyRequests {
			return list, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("mattermost catch-up: wait for the rate limit: %w", ctx.Err())
		case <-time.After(min(ae.RetryAfter, p.cfg.CallTimeout)):
		}
	}
}

// userName is a user's username, from the posts seen or asked of the
// server ("" when it cannot be had).
func (p *Platform) userName(ctx context.Context, id string) string {
	p.mu.Lock()
	n, ok := p.names[id]
	p.mu.Unlock()
	if ok || id == p.rules.BotID {
		return n
	}
	uctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	u, err := p.cli.user(uctx, id)
	cancel()
	if err != nil {
		p.log.Debug("mattermost user lookup failed", "user_id", id, "err", err)
		return ""
	}
	p.noteUser(id, u)
	return u.Username
}

// noteUser keeps a user's username and is_bot, within maxChannels.
func (p *Platform) noteUser(id string, u *user) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.names) < maxChannels {
		p.names[id] = u.Username
	}
	if len(p.bots) < maxChannels {
		p.bots[id] = u.IsBot
	}
}

// isBot reports whether a user is a bot account (GET /users/{id}'s
// is_bot), asked once per user and remembered: a bot's posts carry
// from_bot, but a personal access token of a bot account, or a plugin's
// bot, may post without it. A user the server cannot describe (an error,
// no answer within CallTimeout) counts as a person this time (logged)
// and is asked again at its next post.
func (p *Platform) isBot(ctx context.Context, id string) bool {
	p.mu.Lock()
	b, ok := p.bots[id]
	p.mu.Unlock()
	if ok {
		return b
	}
	uctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	u, err := p.cli.user(uctx, id)
	cancel()
	if err != nil {
		p.log.Warn("mattermost user lookup failed; the post is taken as a person's", "user_id", id, "err", err)
		return false
	}
	p.noteUser(id, u)
	return u.IsBot
}
