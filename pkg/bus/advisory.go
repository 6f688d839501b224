package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
)

// WatchAdvisories logs and counts JetStream's advisories about messages
// that exhausted their deliveries or were terminated, for the streams of
// this topology, until ctx ends.
func (b *Bus) WatchAdvisories(ctx context.Context) error {
	prefix := b.topo.Stream("")
	handler := func(m *nats.Msg) {
		var adv struct {
			Type       string `json:"type"`
			Stream     string `json:"stream"`
			Consumer   string `json:"consumer"`
			StreamSeq  uint64 `json:"stream_seq"`
			Deliveries uint64 `json:"deliveries"`
			Reason     string `json:"reason"`
		}
		if err := json.Unmarshal(m.Data, &adv); err != nil {
			return
		}
		if prefix != "" && !strings.HasPrefix(adv.Stream, prefix) {
			return
		}
		kind := "max_deliveries"
		if strings.Contains(m.Subject, "MSG_TERMINATED") {
			kind = "terminated"
		}
		advisories.WithLabelValues(kind, adv.Stream, adv.Consumer).Inc()
		b.log.Warn("jetstream advisory", "kind", kind, "stream", adv.Stream, "consumer", adv.Consumer,
			"stream_seq", adv.StreamSeq, "deliveries", adv.Deliveries, "reason", adv.Reason)
	}
	var subs []*nats.Subscription
	for _, subj := range []string{"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>", "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>"} {
		s, err := b.nc.Subscribe(subj, handler)
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", subj, err)
		}
		subs = append(subs, s)
	}
	<-ctx.Done()
	for _, s := range subs {
		_ = s.Unsubscribe()
	}
	return nil
}
