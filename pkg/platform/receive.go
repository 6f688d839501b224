package platform

import (
	"context"
	"log/slog"

	"github.com/switchboard-chat/switchboard/pkg/panics"
)

// ReceiveComponent is the switchboard_panics_total component of a panic
// recovered in the work on one inbound payload (Receive).
const ReceiveComponent = "gateway_receive"

// Receive runs handle, a receive loop's work on one inbound payload
// (decode, normalize, publish), so that one payload the platform's code
// cannot take costs only itself: a panic in handle is recovered, logged
// at error level with the stack, the platform, the payload's id and a
// summary of raw (Summary: its size, digest and shape, none of its
// content but event ids and types), counted in switchboard_panics_total{component=
// "gateway_receive"} and as a rejected inbound payload
// (switchboard_gateway_inbound_total{result="rejected"}), and Receive
// returns false. The caller then treats the payload as rejected: it
// acknowledges it to the platform (or moves its offset past it) and goes
// on with the next one, the connection kept. Without it the panic ends
// the connection (the runner's gateway_connection recovery), the
// platform hands the same payload over again, and the gateway reconnects
// with backoff for ever; a panic on a goroutine of a platform library
// (Discord's reader) ends the process.
func Receive(ctx context.Context, conn Rejecter, log *slog.Logger, platform, id string, raw []byte, handle func()) bool {
	err := panics.Recover(log, ReceiveComponent, func() error { handle(); return nil },
		"platform", platform, "payload_id", id, "payload", Summary(raw))
	if err == nil {
		return true
	}
	if conn != nil {
		conn.Reject(ctx, "payload the gateway could not handle (panicked)", err)
	}
	return false
}

// Rejecter is the part of Conn that Receive needs (an HTTP handler has
// the Runner).
type Rejecter interface {
	Reject(ctx context.Context, reason string, err error)
}
