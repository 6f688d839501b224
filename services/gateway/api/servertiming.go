package api

import (
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
)

// HeaderServerTiming carries a completion's latency by hop (W3C Server
// Timing, durations in milliseconds): a header, or a trailer when the
// completion is streamed.
const HeaderServerTiming = "Server-Timing"

// serverTiming renders the hops of one answered request: the gateway's
// own (request read to message published), the router's (to the turn
// published), the worker's (to the reply published), delivery's (to the
// reply sent to this gateway), the way back (to the reply collected) and
// the total. The hops come from the times each process stamped on the
// events (hops), so they are as accurate as the hosts' clocks agree; a
// hop whose times are missing is left out, and one that clocks make
// negative counts as 0.
func serverTiming(received, published, collected time.Time, hops *deliveryv1.HopTimes) string {
	var b strings.Builder
	add := func(name string, from, to time.Time) {
		if from.IsZero() || to.IsZero() {
			return
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		ms := float64(max(to.Sub(from), 0)) / float64(time.Millisecond)
		b.WriteString(name)
		b.WriteString(";dur=")
		b.WriteString(strconv.FormatFloat(ms, 'f', 3, 64))
	}
	requested, created, dispatched := timeOf(hops.GetTurnRequestedAt()), timeOf(hops.GetReplyCreatedAt()), timeOf(hops.GetDispatchedAt())
	add("gateway", received, published)
	add("router", published, requested)
	add("worker", requested, created)
	add("delivery", created, dispatched)
	add("return", dispatched, collected)
	add("total", received, collected)
	return b.String()
}

// timeOf is ts as a time, the zero time when ts is not set.
func timeOf(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}
