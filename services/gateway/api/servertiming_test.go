package api

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
)

func TestServerTimingHeader(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms float64) *timestamppb.Timestamp {
		return timestamppb.New(t0.Add(time.Duration(ms * float64(time.Millisecond))))
	}
	ms := func(v float64) time.Time { return at(v).AsTime() }
	cases := []struct {
		name string
		hops *deliveryv1.HopTimes
		want string
	}{
		{"every hop", &deliveryv1.HopTimes{TurnRequestedAt: at(0.9), ReplyCreatedAt: at(2.4), DispatchedAt: at(2.5)},
			"gateway;dur=0.200, router;dur=0.700, worker;dur=1.500, delivery;dur=0.100, return;dur=0.100, total;dur=2.600"},
		{"no hop times: the gateway's own and the total", nil, "gateway;dur=0.200, total;dur=2.600"},
		{"a reply without its turn's time", &deliveryv1.HopTimes{ReplyCreatedAt: at(2.4), DispatchedAt: at(2.5)},
			"gateway;dur=0.200, delivery;dur=0.100, return;dur=0.100, total;dur=2.600"},
		{"a clock behind the gateway's counts as 0", &deliveryv1.HopTimes{TurnRequestedAt: at(0.1), ReplyCreatedAt: at(2.4), DispatchedAt: at(2.5)},
			"gateway;dur=0.200, router;dur=0.000, worker;dur=2.300, delivery;dur=0.100, return;dur=0.100, total;dur=2.600"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := serverTiming(ms(0), ms(0.2), ms(2.6), c.hops); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

// A plain completion reports the time of each hop the reply's events
// were stamped with; a streamed one has no header (it is sent before the
// reply).
func TestPlainCompletionReportsServerTiming(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	r.hops = func() *deliveryv1.HopTimes {
		requested := time.Now()
		return &deliveryv1.HopTimes{TurnRequestedAt: timestamppb.New(requested),
			ReplyCreatedAt: timestamppb.New(requested.Add(3 * time.Millisecond)),
			DispatchedAt:   timestamppb.New(requested.Add(5 * time.Millisecond))}
	}
	chat := "http://" + s.Addr() + "/v1/chat/completions"
	res := do(t, "POST", chat, testKey, `{"model":"x","messages":[{"role":"user","content":"hi"}]}`, nil)
	if res.code != 200 {
		t.Fatalf("status %d: %s", res.code, res.body)
	}
	got := map[string]float64{}
	for _, m := range regexp.MustCompile(`(\w+);dur=([0-9.]+)`).FindAllStringSubmatch(res.header.Get(HeaderServerTiming), -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		got[m[1]] = v
	}
	if len(got) != 6 || got["worker"] != 3 || got["delivery"] != 2 {
		t.Fatalf("Server-Timing %q", res.header.Get(HeaderServerTiming))
	}
	// The stamps were read after the gateway published the message and
	// before it collected the reply.
	if got["total"] < got["gateway"]+got["router"]-0.002 {
		t.Fatalf("the total is shorter than the hops before the worker: %v", got)
	}
	streamed := do(t, "POST", chat, testKey, `{"model":"x","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if streamed.code != 200 || streamed.header.Get(HeaderServerTiming) != "" {
		t.Fatalf("streamed: %d, Server-Timing %q", streamed.code, streamed.header.Get(HeaderServerTiming))
	}
}
