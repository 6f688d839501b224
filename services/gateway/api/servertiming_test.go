package api

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
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

// A completion reports the time of each hop the reply's events were
// stamped with: a plain one in its Server-Timing header, a streamed one
// in a Server-Timing trailer (its header goes out before the reply).
func TestCompletionsReportServerTiming(t *testing.T) {
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
	for _, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"model":"x","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
		req, err := http.NewRequest("POST", chat, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+testKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("stream %v: %d %v %s", stream, resp.StatusCode, err, data)
		}
		header := resp.Header.Get(HeaderServerTiming)
		if stream {
			if header != "" {
				t.Fatalf("a streamed response has a Server-Timing header %q", header)
			}
			header = resp.Trailer.Get(HeaderServerTiming)
		}
		got := map[string]float64{}
		for _, m := range regexp.MustCompile(`(\w+);dur=([0-9.]+)`).FindAllStringSubmatch(header, -1) {
			v, _ := strconv.ParseFloat(m[2], 64)
			got[m[1]] = v
		}
		if len(got) != 6 || got["worker"] != 3 || got["delivery"] != 2 {
			t.Fatalf("stream %v: Server-Timing %q", stream, header)
		}
		// The stamps were read after the gateway published the message and
		// before it collected the reply.
		if got["total"] < got["gateway"]+got["router"]-0.002 {
			t.Fatalf("stream %v: the total is shorter than the hops before the worker: %v", stream, got)
		}
	}
}
