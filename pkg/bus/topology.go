// Package bus is Switchboard's message layer over NATS JetStream: the
// streams and subjects every service agrees on, publishing with dedupe ids
// and trace context, and typed consumers that ack, nak with backoff, or
// dead-letter.
package bus

import (
	"fmt"
	"hash/fnv"
	"strconv"
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
	// SubjectTurnCompletedIdle carries the completions that leave the
	// router nothing to do: no message waits behind the turn and its usage
	// is stored with its final. The router does not consume it.
	SubjectTurnCompletedIdle = "turns.turn.completed.idle"
	SubjectControl           = "turns.control"
	SubjectReplies           = "replies.event"
	SubjectDeadLetter        = "deadletter"
	subjectGateway           = "gateway"
)

// DefaultPartitions is how many partitions the inbound and reply subjects
// of new streams have when the topology names no count. Messages of one
// chat always land in the same partition, so a consumer that handles one
// message per partition at a time keeps platform order; the count bounds
// how many inbound messages (and reply events) are handled at once across
// all replicas. Each partition is a durable consumer whose state the
// server writes up to ten times a second, so more partitions cost CPU.
const DefaultPartitions = 8

// legacyPartitions is the count of streams created before it was
// configurable (their subjects end in a wildcard).
const legacyPartitions = 16

// MaxPartitions bounds the configured count.
const MaxPartitions = 256

// Topology names streams and subjects. A non-empty Prefix isolates one
// deployment (or one test) from others on the same NATS server.
type Topology struct {
	Prefix string
	// Replicas for every stream: 1 on a single node, 3 in a cluster.
	Replicas int
	// DedupeWindow is how long JetStream remembers Nats-Msg-Id values.
	// Default 30 s. The server holds an entry per id published within
	// it (about 150 B), and up to three times that many until it
	// compacts its list of them: at hundreds of turns a second, five ids
	// a turn, a 2-minute window grew to a hundred megabytes. It catches
	// a publisher's quick retries; later copies are stopped by the
	// services' own records (the router's inbound dedupe, delivery's
	// idempotency keys, the usage records, the turns' generations).
	DedupeWindow time.Duration
	// Retention bounds how long events stay in the non-work-queue streams.
	Retention time.Duration
	// Storage is file by default; tests may use memory.
	Storage jetstream.StorageType
	// Partitions of the inbound and reply subjects (0: DefaultPartitions).
	// It is fixed when the streams are created: Bus.EnsureStreams reads
	// the count of existing streams back, and that count wins.
	Partitions int
	// legacy: the streams were created before the count was configurable
	// and keep their wildcard subjects (so processes of both kinds declare
	// the same subjects during a rolling upgrade).
	legacy bool
}

// PartitionCount is how many partitions the inbound and reply subjects have.
func (t Topology) PartitionCount() int {
	if t.Partitions > 0 {
		return t.Partitions
	}
	return DefaultPartitions
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
func (t Topology) Partition(key string) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(t.PartitionCount()))
}

// InboundSubject is the subject a gateway publishes a chat's messages on.
// chatKey identifies the chat: "<platform>:<account>:<chat_id>".
func (t Topology) InboundSubject(chatKey string) string {
	return t.InboundPartitionSubject(t.Partition(chatKey))
}

// InboundPartitionSubject is the subject of one inbound partition.
func (t Topology) InboundPartitionSubject(p int) string {
	return t.Subject(fmt.Sprintf("%s.%d", SubjectInbound, p))
}

// ReplySubject is the subject a session's reply events are published on.
func (t Topology) ReplySubject(sessionKey string) string {
	return t.ReplyPartitionSubject(t.Partition(sessionKey))
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

// FetchSubject is the request/reply subject on which a platform gateway
// downloads attachments for the workers (AttachmentFetchRequested).
func (t Topology) FetchSubject(platform string) string {
	return t.Subject(subjectGateway + "." + platform + ".fetch")
}

// SendSubject is the request/reply subject a platform gateway serves.
func (t Topology) SendSubject(platform string) string {
	return t.Subject(subjectGateway + "." + platform + ".send")
}

// SendingSubject is the core NATS subject on which one replica of a
// platform gateway (its instance name, hashed into one token) answers
// whether it is still sending a key it reserved: a replica that finds
// the reservation asks there, and no responder means the replica is gone.
func (t Topology) SendingSubject(platform, instance string) string {
	h := fnv.New64a()
	h.Write([]byte(instance))
	return t.Subject(fmt.Sprintf("%s.%s.sending.%016x", subjectGateway, platform, h.Sum64()))
}

// DeliveryAliveSubject is the core NATS subject on which one delivery
// replica (its replica id, hashed into one token) answers while it runs:
// a replica that finds outbox rows being sent under another's lease asks
// there, and no responder means that replica is gone.
func (t Topology) DeliveryAliveSubject(replica string) string {
	h := fnv.New64a()
	h.Write([]byte(replica))
	return t.Subject(fmt.Sprintf("delivery.alive.%016x", h.Sum64()))
}

// PressSubject is the core NATS subject of the answer to one button
// press whose gateway holds it (a Telegram callback query, a Teams
// invoke, answered once): the replica holding it subscribes while it
// holds it, and the router, or a replica that got the press's refusal,
// sends the answer there. interactionID is the press's
// Interaction.id, hashed into one token.
func (t Topology) PressSubject(platform, interactionID string) string {
	h := fnv.New64a()
	h.Write([]byte(interactionID))
	return t.Subject(fmt.Sprintf("%s.%s.press.%016x", subjectGateway, platform, h.Sum64()))
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
		dedupe = 30 * time.Second
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
			Subjects:    t.partitionSubjects(SubjectInbound),
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
			Subjects:    []string{t.Subject(SubjectTurnStarted), t.Subject(SubjectTurnCompleted), t.Subject(SubjectTurnCompletedIdle)},
			Retention:   jetstream.LimitsPolicy,
			MaxAge:      retention,
		}),
		common(jetstream.StreamConfig{
			Name:        t.Stream(StreamReplies),
			Description: "reply events from agent workers",
			Subjects:    t.partitionSubjects(SubjectReplies),
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

// partitionSubjects lists the subjects of base's partitions, each by name:
// a publish to a partition the stream does not have fails instead of
// being stored where no consumer reads, and the stream's subjects say its
// partition count.
func (t Topology) partitionSubjects(base string) []string {
	if t.legacy {
		return []string{t.Subject(base + ".>")}
	}
	n := t.PartitionCount()
	subjects := make([]string, n)
	for p := range n {
		subjects[p] = t.Subject(fmt.Sprintf("%s.%d", base, p))
	}
	return subjects
}

// partitionsOf reads the partition count of a stream of base's
// partitions from its subjects: one subject per partition, or the
// wildcard of a stream created before the count was configurable
// (legacy). ok is false for subjects of another shape.
func (t Topology) partitionsOf(base string, subjects []string) (n int, legacy, ok bool) {
	if len(subjects) == 1 && subjects[0] == t.Subject(base+".>") {
		return legacyPartitions, true, true
	}
	seen := make([]bool, len(subjects))
	for _, s := range subjects {
		p, err := strconv.Atoi(strings.TrimPrefix(s, t.Subject(base)+"."))
		if err != nil || !strings.HasPrefix(s, t.Subject(base)+".") || p < 0 || p >= len(subjects) || seen[p] {
			return 0, false, false
		}
		seen[p] = true
	}
	return len(subjects), false, len(subjects) > 0
}

// streamConfig is the declared config of the named (unprefixed) stream.
func (t Topology) streamConfig(name string) (jetstream.StreamConfig, bool) {
	full := t.Stream(name)
	for _, c := range t.StreamConfigs() {
		if c.Name == full {
			return c, true
		}
	}
	return jetstream.StreamConfig{}, false
}

// workQueue reports whether the named (unprefixed) stream is a work queue.
func (t Topology) workQueue(name string) bool {
	c, ok := t.streamConfig(name)
	return ok && c.Retention == jetstream.WorkQueuePolicy
}
