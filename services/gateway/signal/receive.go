package signal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Manual mode: the gateway asks a daemon started with
// --receive-mode=manual for messages with the JSON-RPC receive method
// (params timeout, in seconds, and maxMessages; the result is a list of
// what the event stream would carry, {"envelope": …, "account": …}).
// Such a daemon receives from Signal's servers only during a receive
// call, so messages wait there while no gateway asks: a restart, a
// deploy, a lease handover lose nothing.
//
// What can still be lost (signal-cli 0.14.6, ReceiveHelper): the daemon
// stores each envelope it reads in its message cache on disk and
// acknowledges it to Signal's servers at once, before decrypting it;
// once decrypted and handed to the call, the cached copy is deleted and
// the message lives only in the call's answer. The call answers when it
// has maxMessages messages, or when no message came for timeout seconds
// (the wait starts again after each message). So a message is lost when
// the daemon dies between handling it and answering (it first sends its
// delivery receipts), when the gateway that made the call goes away
// before the answer (the daemon finishes the call and answers nobody:
// every message it takes until then), and when the gateway dies with an
// answer it has not published. The gateway keeps that window small: one
// message per call by default, every message of an answer published
// before the next call, a call in flight never abandoned (a stopping
// gateway waits for its answer, at most the poll timeout when nothing
// comes, and publishes it), and no call while the bus refuses what it
// holds.

// maxPollTimeout bounds poll_timeout. A stopping gateway waits for its
// call: keep the timeout well under the grace its orchestrator gives it
// (30 s in the Kubernetes component).
const maxPollTimeout = time.Minute

// maxBatch bounds max_messages.
const maxBatch = 100

// probeTimeout is the first call's wait: the gateway is ready once the
// daemon answered one call, which tells a daemon in the wrong mode.
const probeTimeout = time.Second

// answerWait is how long past its timeout a receive call may take:
// signal-cli downloads a message's attachments and sends its receipts
// before it answers. A call abandoned after that (a daemon that hangs)
// loses what the daemon answers later.
const answerWait = 2 * time.Minute

// drainWait is how long a stopping gateway keeps trying to publish
// what it received while the bus refuses it.
const drainWait = 10 * time.Second

// errAlreadyReceiving is the daemon's refusal of a receive call while it
// receives on its own or for another caller.
var errAlreadyReceiving = errors.New("signal-cli is already receiving for this account")

var receiveCalls = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchboard_signal_receive_calls_total",
	Help: "Receive calls to the signal-cli daemon (manual mode), by result (messages, empty, refused: the daemon receives on its own or for another caller, error).",
}, []string{"result"})

// receive calls signal-cli's receive method: the daemon waits up to
// timeout for a message (again after each one) and answers what it
// received, at most max messages. The call is made through the client
// without an overall timeout, bounded by ctx.
func (c *client) receive(ctx context.Context, timeout time.Duration, max int) ([]json.RawMessage, error) {
	var out []json.RawMessage
	params := map[string]any{"timeout": timeout.Seconds(), "maxMessages": max}
	if err := c.callWith(ctx, c.stream, "receive", params, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// poll asks the daemon for messages until ctx ends (nil) or a call
// fails. Every message of an answer is published before the next call. A
// call in flight is not cancelled with ctx: signal-cli would finish it
// anyway and answer nobody, losing what it took; the gateway waits for
// the answer and publishes it, then returns.
func (p *Platform) poll(ctx context.Context, conn platform.Conn) error {
	if err := p.client.check(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("signal-cli daemon at %s not reachable: %w", p.cfg.HTTPURL, err)
	}
	// Publishing outlives ctx by drainWait: a batch the daemon answered
	// exists nowhere else.
	pubCtx, stopPub := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPub()
	returned := make(chan struct{})
	defer close(returned)
	go func() {
		select {
		case <-returned:
			return
		case <-ctx.Done():
		}
		t := time.NewTimer(drainWait)
		defer t.Stop()
		select {
		case <-returned:
		case <-t.C:
			stopPub()
		}
	}()

	wait, connected := min(probeTimeout, p.pollTimeout), false
	for ctx.Err() == nil {
		callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait+answerWait)
		batch, err := p.client.receive(callCtx, wait, p.maxMessages)
		cancel()
		if err != nil {
			return p.receiveFailed(err)
		}
		if !connected {
			connected = true
			conn.Connected()
		}
		if len(batch) == 0 {
			receiveCalls.WithLabelValues("empty").Inc()
		} else {
			receiveCalls.WithLabelValues("messages").Inc()
		}
		for i, raw := range batch {
			if !p.handle(pubCtx, conn, sseEvent{data: raw, oversized: len(raw) > maxEventBytes}) {
				p.log.Error("signal messages lost: the bus did not take them before the gateway stopped",
					"count", len(batch)-i, "waited", drainWait)
				return nil
			}
		}
		wait = p.pollTimeout
	}
	return nil
}

// receiveFailed turns a failed receive call into the connection's error:
// a daemon that has no receive method or no such account is fatal; one
// that receives on its own (not started with --receive-mode=manual, or an
// event stream open on it) or for another caller (the call of a gateway
// that went away runs to its end) is retried on the backoff schedule,
// with the reason as the gateway's readiness error.
func (p *Platform) receiveFailed(err error) error {
	var re *rpcError
	if errors.As(err, &re) {
		msg := strings.ToLower(re.Message)
		switch {
		case re.Code == codeUserError && (strings.Contains(msg, "already being received") || strings.Contains(msg, "already receiving")):
			receiveCalls.WithLabelValues("refused").Inc()
			return fmt.Errorf("%w, so it answers no receive call: start it with `daemon --http … --receive-mode=manual` "+
				"(its default, on-start, receives on its own and serves only event streams) or set SIGNAL_RECEIVE_MODE=sse; "+
				"if it runs in manual mode, another client reads its event stream or calls receive "+
				"(a stopped gateway's call ends within poll_timeout): %w", errAlreadyReceiving, err)
		case re.Code == codeNoMethod:
			receiveCalls.WithLabelValues("error").Inc()
			return platform.Fatal(fmt.Errorf("signal-cli at %s has no receive method; upgrade it or set SIGNAL_RECEIVE_MODE=sse: %w", p.cfg.HTTPURL, err))
		case re.Code == codeInvalidParams && strings.Contains(msg, "account does not exist"):
			receiveCalls.WithLabelValues("error").Inc()
			return platform.Fatal(fmt.Errorf("signal-cli has no account %s; register or link it, or set SIGNAL_ACCOUNT: %w", p.cfg.Account, err))
		}
	}
	receiveCalls.WithLabelValues("error").Inc()
	return fmt.Errorf("signal receive: %w", err)
}
