package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// WatchAdvisories logs and counts JetStream's advisories about messages
// that exhausted their deliveries or were terminated, for the streams of
// this topology, until ctx ends. A message the server stopped delivering
// on its own (its deliveries went to processes that died or handed it
// back, so no handler dead-lettered it) is copied to the dead-letter
// stream here, and removed from a work queue, so that it is not lost
// without a trace: every process that watches does it, and the copies
// are one (the dead-letter dedupe id).
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
		if kind == "max_deliveries" {
			go b.rescue(ctx, adv.Stream, adv.Consumer, adv.StreamSeq, adv.Deliveries)
		}
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

// rescue dead-letters the message at seq of the (full) stream name that
// the server gave up delivering to consumer.
func (b *Bus) rescue(ctx context.Context, full, consumer string, seq, deliveries uint64) {
	name := strings.TrimPrefix(full, b.topo.Stream(""))
	declared, ok := b.topo.streamConfig(name)
	if !ok || declared.Name != full || name == StreamDeadLetter {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := b.js.Stream(ctx, full)
	if err != nil {
		b.log.Warn("dead-letter a message the server gave up on: stream", "stream", full, "err", err)
		return
	}
	raw, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return // acked meanwhile, or rescued by another process
	}
	if err != nil {
		b.log.Warn("dead-letter a message the server gave up on: read", "stream", full, "stream_seq", seq, "err", err)
		return
	}
	dl, id := deadLetterMsg(b.topo, name, consumer, seq, raw.Subject, raw.Header, raw.Data, "server_max_deliveries",
		errors.New("the server stopped delivering it: its deliveries ended without a handler's verdict"), int(deliveries))
	if _, err := b.js.PublishMsg(ctx, dl, jetstream.WithMsgID(id)); err != nil {
		b.log.Error("dead-letter a message the server gave up on", "stream", full, "stream_seq", seq, "err", err)
		return
	}
	terminated.WithLabelValues(consumer, "server_max_deliveries").Inc()
	b.log.Error("message dead-lettered: the server stopped delivering it", "stream", full, "consumer", consumer,
		"stream_seq", seq, "subject", raw.Subject, "msg_id", raw.Header.Get(nats.MsgIdHdr))
	if declared.Retention == jetstream.WorkQueuePolicy {
		// The work queue would keep it for ever: nobody will ack it.
		if err := s.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			b.log.Warn("remove a dead-lettered message from its work queue", "stream", full, "stream_seq", seq, "err", err)
		}
	}
}
