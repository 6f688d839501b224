package delivery

import "time"

// SetHousekeeping makes housekeeping read the outbox gauge and prune at
// these intervals, for the services started until restore is called.
func SetHousekeeping(count, prune time.Duration) (restore func()) {
	oldCount, oldPrune := outboxCountInterval, pruneInterval
	outboxCountInterval, pruneInterval = count, prune
	return func() { outboxCountInterval, pruneInterval = oldCount, oldPrune }
}
