package pg

// AsyncCommit, queued first in a pgx.Batch (which runs as one implicit
// transaction) or sent inside a transaction, makes that transaction's
// commit return without waiting for the WAL flush; the session's setting
// is untouched. Such a commit is lost only if Postgres itself crashes, and
// any later synchronous commit flushes it (the WAL is flushed in order).
// Use it for writes that are redone or harmless when lost; the contract
// is in docs/architecture.md ("Durability of commits").
const AsyncCommit = `SELECT set_config('synchronous_commit', 'off', true)`
