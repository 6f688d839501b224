package bus

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// LostRace reports whether a conditional write to a KV bucket was
// refused because the key is no longer at the revision the writer read:
// another writer got there first, and the caller reads again (or gives
// way). Each conditional write reports it its own way, and the servers
// differ: Update's and Delete's (LastRevision) revision mismatch,
// Create's existing key, and the stream's wrong last sequence that
// Create and Update return as they are when the key's last entry is a
// delete marker, or from an older server.
func LostRace(err error) bool {
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return true
	}
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
