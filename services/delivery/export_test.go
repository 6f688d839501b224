package delivery

import (
	"context"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/outbox"
)

// SetHousekeeping makes housekeeping read the outbox gauge and prune at
// these intervals, for the services started until restore is called.
func SetHousekeeping(count, prune time.Duration) (restore func()) {
	oldCount, oldPrune := outboxCountInterval, pruneInterval
	outboxCountInterval, pruneInterval = count, prune
	return func() { outboxCountInterval, pruneInterval = oldCount, oldPrune }
}

// SetSendHook runs f before each send of an outbox row (not a reply sent
// straight from the consumer), for the services running until restore.
func SetSendHook(f func(outbox.Row)) (restore func()) {
	sendHook.Store(&f)
	return func() { sendHook.Store(nil) }
}

// SetSegmentHook runs f (with the replica's id and the turn) once a
// break's new stream segment is recorded, before the stream goes on,
// for the services running until restore.
func SetSegmentHook(f func(replica, turn string)) (restore func()) {
	segmentHook.Store(&f)
	return func() { segmentHook.Store(nil) }
}

// SetTypingHook runs f (with the indicator's context and the turn)
// before a typing indicator's first request, for the services running
// until restore.
func SetTypingHook(f func(ctx context.Context, turn string)) (restore func()) {
	typingHook.Store(&f)
	return func() { typingHook.Store(nil) }
}

// SetGoneHook runs f (with the replica asked) before each question
// whether a replica that holds rows under a lease is still there, for the
// services running until restore.
func SetGoneHook(f func(replica string)) (restore func()) {
	goneHook.Store(&f)
	return func() { goneHook.Store(nil) }
}
