package signal

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
)

// maxEventBytes bounds one event's data; a larger one is read through,
// rejected with a logged reason, and the stream goes on.
const maxEventBytes = 1 << 20

// sseEvent is one dispatched Server-Sent Event.
type sseEvent struct {
	id, name string
	data     []byte
	// oversized: the data went past maxEventBytes and was cut.
	oversized bool
}

// sseReader splits a text/event-stream into events (the WHATWG rules:
// "field:value" lines, one optional space after the colon, data lines
// joined with "\n", a blank line dispatches, ":" lines are comments).
type sseReader struct {
	r   *bufio.Reader
	cur sseEvent
	// activity is called for every line, comments (signal-cli's 15 s
	// keepalives) included.
	activity func()
}

func newSSEReader(r io.Reader, activity func()) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 64<<10), activity: activity}
}

// next returns the next event; io.EOF when the stream ended.
func (s *sseReader) next() (sseEvent, error) {
	for {
		line, tooLong, err := s.line()
		if err != nil {
			return sseEvent{}, err
		}
		if s.activity != nil {
			s.activity()
		}
		if len(line) == 0 {
			if s.cur.data == nil && !s.cur.oversized {
				s.cur = sseEvent{}
				continue
			}
			ev := s.cur
			if len(ev.data) > 0 && ev.data[len(ev.data)-1] == '\n' {
				ev.data = ev.data[:len(ev.data)-1]
			}
			s.cur = sseEvent{}
			return ev, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value, found := bytes.Cut(line, []byte{':'})
		if found && len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		switch string(field) {
		case "data":
			if tooLong || len(s.cur.data)+len(value)+1 > maxEventBytes {
				s.cur.oversized, s.cur.data = true, []byte{}
				continue
			}
			if !s.cur.oversized {
				s.cur.data = append(append(s.cur.data, value...), '\n')
			}
		case "event":
			s.cur.name = string(value)
		case "id":
			if !bytes.ContainsRune(value, 0) {
				s.cur.id = string(value)
			}
		}
	}
}

// line reads one line without its end (\n, \r\n); a line longer than
// maxEventBytes is read through and returned cut, with tooLong set.
func (s *sseReader) line() (line []byte, tooLong bool, err error) {
	var buf []byte
	for {
		chunk, err := s.r.ReadSlice('\n')
		if len(buf)+len(chunk) <= maxEventBytes+2 {
			buf = append(buf, chunk...)
		} else {
			tooLong = true
		}
		switch {
		case err == nil:
			buf = bytes.TrimSuffix(bytes.TrimSuffix(buf, []byte{'\n'}), []byte{'\r'})
			return buf, tooLong, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, false, err
		}
	}
}

// stream reads the daemon's event stream until ctx ends (nil) or the
// stream fails. Each event is published before the next is read; the id
// of the last one handled is sent as Last-Event-ID when the stream is
// opened again, so a daemon that numbers and keeps recent events (a
// proposed signal-cli change; 0.14.6 sends events without ids) sends
// what came while it was away. An event is
// handled again only after a failure to publish it, and then the bus's
// dedupe id makes it one message.
func (p *Platform) stream(ctx context.Context, conn platform.Conn) error {
	if err := p.client.check(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("signal-cli daemon at %s not reachable: %w", p.cfg.HTTPURL, err)
	}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	u := p.client.base + "/api/v1/events?account=" + url.QueryEscape(p.cfg.Account)
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, u, nil)
	if err != nil {
		return platform.Fatal(fmt.Errorf("signal events request: %w", err))
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	if id := p.lastEventID(); id != "" {
		req.Header.Set("Last-Event-ID", id)
	}
	resp, err := p.client.stream.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("signal events: %w", err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusBadRequest:
		// Multi-account mode answers 400 for an account it does not have.
		return platform.Fatal(fmt.Errorf("signal-cli has no account %s (events: HTTP 400); register or link it, or set SIGNAL_ACCOUNT", p.cfg.Account))
	case resp.StatusCode != http.StatusOK:
		return &httpError{Op: "events", Status: resp.StatusCode}
	}
	conn.Connected()

	// A stream that says nothing for idleTimeout (signal-cli sends a
	// keepalive every 15 s) is dead without knowing it: drop it.
	idle := time.AfterFunc(p.idleTimeout, func() { cancel(errIdle) })
	defer idle.Stop()
	rd := newSSEReader(resp.Body, func() { idle.Reset(p.idleTimeout) })
	for {
		ev, err := rd.next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if cause := context.Cause(sctx); errors.Is(cause, errIdle) {
				return fmt.Errorf("signal events: nothing for %s", p.idleTimeout)
			}
			if errors.Is(err, io.EOF) {
				return errors.New("signal events: the daemon closed the stream")
			}
			return fmt.Errorf("signal events: %w", err)
		}
		if ev.name != "" && ev.name != "receive" {
			p.remember(ev.id)
			continue
		}
		if !p.handle(ctx, conn, ev) {
			return nil // ctx ended while the bus could not take it
		}
		p.remember(ev.id)
	}
}

var errIdle = errors.New("event stream idle")

func (p *Platform) lastEventID() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastID
}

func (p *Platform) remember(id string) {
	if id == "" {
		return
	}
	p.mu.Lock()
	p.lastID = id
	p.mu.Unlock()
}

// handle normalizes and publishes one event. The stream has no
// acknowledgement, so a publish that fails is retried here (the reader
// waits, the daemon's socket buffers) until it succeeds or ctx ends; it
// reports false then.
func (p *Platform) handle(ctx context.Context, conn platform.Conn, sse sseEvent) bool {
	// One event whose handling panics is skipped (logged, counted): the
	// rest of a receive call's batch, which exists nowhere else, and
	// the stream after it go on.
	ok := true
	platform.Receive(ctx, conn, p.log, "signal", sse.id, sse.data, func() { ok = p.handleOne(ctx, conn, sse) })
	return ok
}

func (p *Platform) handleOne(ctx context.Context, conn platform.Conn, sse sseEvent) bool {
	if sse.oversized {
		conn.Reject(ctx, "signal event too large", fmt.Errorf("more than %d bytes", maxEventBytes))
		return true
	}
	n, err := parseEvent(sse.data)
	if err != nil {
		conn.Reject(ctx, "malformed signal event", err)
		return true
	}
	ev, why, err := normalize(n, p.rules)
	if err != nil {
		conn.Reject(ctx, "malformed signal envelope", err)
		return true
	}
	if ev == nil {
		skipped.WithLabelValues(string(why)).Inc()
		p.log.Debug("signal event skipped", "why", string(why))
		return true
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(min(time.Duration(attempt)*200*time.Millisecond, 5*time.Second)):
			}
		}
		if _, err = conn.Deliver(ctx, ev); err == nil || errors.Is(err, platform.ErrRejected) {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		p.log.Warn("signal message not published; retrying", "event_id", pseudonym.Personal(ev.GetEventId()), "attempt", attempt+1, "err", err)
	}
}
