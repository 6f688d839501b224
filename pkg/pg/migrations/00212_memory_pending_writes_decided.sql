-- +goose NO TRANSACTION
-- +goose Up
-- The session retention (pkg/retention) deletes the memory writes the
-- gate decided (approved, rejected or failed) once decided_at is older
-- than retention.MemoryDecisionsAge, a batch at a time (DELETE ... WHERE
-- (user_key, id) IN (SELECT ... WHERE state <> 'pending' AND decided_at
-- < $1 LIMIT $2)); this index finds them without reading the pending
-- ones or the whole table. Built without blocking the memory tool's
-- stagings and /memory on a running system; an interrupted build leaves
-- an invalid index of this name, which is dropped and built again.
DROP INDEX CONCURRENTLY IF EXISTS memory_pending_writes_decided_idx;
CREATE INDEX CONCURRENTLY memory_pending_writes_decided_idx ON memory_pending_writes (decided_at)
    WHERE state <> 'pending';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS memory_pending_writes_decided_idx;
