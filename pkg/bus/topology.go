// Package bus is Switchboard's message layer over NATS JetStream: the
// streams and subjects every service agrees on, publishing with dedupe ids
// and trace context, and typed consumers that ack, nak with backoff, or
// dead-letter.
package bus

import (
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Stream names (before the topology prefix).
const (
	StreamInbound    = "INBOUND"
	StreamTurns      = "TURNS"
	StreamTurnEvents = "TURN_EVENTS"
	StreamReplies    = "REPLIES"
	StreamDeadLetter = "DEADLETTER"
)

// Subjects (before the topology prefix). Partitioned subjects end in
// ".<partition>"; use the Topology methods to build them.
const (
	SubjectInbound       = "inbound.message.received"
	SubjectTurnRequested = "turns.turn.requested"
	SubjectTurnStarted   = "turns.turn.started"
	SubjectTurnCompleted = "turns.turn.completed"
	SubjectControl       = "turns.control"
	SubjectReplies       = "replies.event"
	SubjectDeadLetter    = "deadletter"
	subjectGateway       = "gateway"
)

// Partitions is how many partitions the inbound and reply subjects have.
// Messages of one chat always land in the same partition, so a consumer that
// handles one message per partition at a time keeps platform order.
const Partitions = 16

// Topology names streams and subjects. A non-empty Prefix isolates one
// deployment (or one test) from others on the same NATS server.
type Topology struct {
	Prefix string
	// Replicas for every stream: 1 on a single node, 3 in a cluster.
	Replicas int
	// DedupeWindow is how long JetStream remembers Nats-Msg-Id values.
	DedupeWindow time.Duration
	// Retention bounds how long events stay in the non-work-queue streams.
	Retention time.Duration
	// Storage is file by default; tests may use memory.
	Storage jetstream.StorageType
}

// Subject prefixes s with the topology prefix.
func (t Topology) Subject(s string) string {
	if t.Prefix == "" {
		return s
	}
	return t.Prefix + "." + s
}

// Stream prefixes a stream name with the topology prefix.
func (t Topology) Stream(name string) string {
	if t.Prefix == "" {
		return name
	}
	return strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(t.Prefix)) + "_" + name
}

// Partition maps a key (a chat or a session key) to a partition.
func Partition(key string) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % Partitions)
}

// InboundSubject is the subject a gateway publishes a chat's messages on.
// chatKey identifies the chat: "<platform>:<account>:<chat_id>".
func (t Topology) InboundSubject(chatKey string) string {
	return t.Subject(fmt.Sprintf("%s.%d", SubjectInbound, Partition(chatKey)))
}

// InboundPartitionSubject is the subject of one inbound partition.
func (t Topology) InboundPartitionSubject(p int) string {
	return t.Subject(fmt.Sprintf("%s.%d", SubjectInbound, p))
}

// ReplySubject is the subject a session's reply events are published on.
func (t Topology) ReplySubject(sessionKey string) string {
	return t.ReplyPartitionSubject(Partition(sessionKey))
}

// ReplyPartitionSubject is the subject of one reply partition.
func (t Topology) ReplyPartitionSubject(p int) string {
	return t.Subject(fmt.Sprintf("%s.%d", SubjectReplies, p))
}

// ControlSubject is the core NATS subject for control messages of one
// session; the worker running the session's turn subscribes to it.
func (t Topology) ControlSubject(sessionKey string) string {
	h := fnv.New64a()
	h.Write([]byte(sessionKey))
	return t.Subject(fmt.Sprintf("%s.%016x", SubjectControl, h.Sum64()))
}

// SendSubject is the request/reply subject a platform gateway serves.
func (t Topology) SendSubject(platform string) string {
	return t.Subject(subjectGateway + "." + platform + ".send")
}

// StreamConfigs declares every stream. EnsureStreams creates or updates
// them; declaring them in one place keeps services in agreement.
func (t Topology) StreamConfigs() []jetstream.StreamConfig {
	replicas := t.Replicas
	if replicas <= 0 {
		replicas = 1
	}
	dedupe := t.DedupeWindow
	if dedupe <= 0 {
		dedupe = 10 * time.Minute
	}
	retention := t.Retention
	if retention <= 0 {
		retention = 24 * time.Hour
	}
	storage := t.Storage
	common := func(c jetstream.StreamConfig) jetstream.StreamConfig {
		c.Replicas = replicas
		c.Storage = storage
		c.Duplicates = dedupe
		c.Discard = jetstream.DiscardOld
		return c
	}
	return []jetstream.StreamConfig{
		common(jetstream.StreamConfig{
			Name:        t.Stream(StreamInbound),
			Description: "normalized inbound events from platform gateways",
			Subjects:    []string{t.Subject(SubjectInbound + ".>")},
			Retention:   jetstream.LimitsPolicy,
			MaxAge:      retention,
		}),
		common(jetstream.StreamConfig{
			Name:        t.Stream(StreamTurns),
			Description: "turns waiting for an agent worker (work queue)",
			Subjects:    []string{t.Subject(SubjectTurnRequested)},
			Retention:   jetstream.WorkQueuePolicy,
		}),
		common(jetstream.StreamConfig{
			Name:        t.Stream(StreamTurnEvents),
			Description: "turn lifecycle events",
			Subjects:    []string{t.Subject(SubjectTurnStarted), t.Subject(SubjectTurnCompleted)},
			Retention:   jetstream.LimitsPolicy,
			MaxAge:      retention,
		}),
		common(jetstream.StreamConfig{
			Name:        t.Stream(StreamReplies),
			Description: "reply events from agent workers",
			Subjects:    []string{t.Subject(SubjectReplies + ".>")},
			Retention:   jetstream.LimitsPolicy,
			MaxAge:      retention,
		}),
		common(jetstream.StreamConfig{
			Name:        t.Stream(StreamDeadLetter),
			Description: "messages a consumer gave up on, with the reason",
			Subjects:    []string{t.Subject(SubjectDeadLetter + ".>")},
			Retention:   jetstream.LimitsPolicy,
			MaxAge:      30 * 24 * time.Hour,
		}),
	}
}

// workQueue reports whether the named (unprefixed) stream is a work queue.
func (t Topology) workQueue(name string) bool {
	full := t.Stream(name)
	for _, c := range t.StreamConfigs() {
		if c.Name == full {
			return c.Retention == jetstream.WorkQueuePolicy
		}
	}
	return false
}
