-- +goose NO TRANSACTION
-- +goose Up
-- The session retention (pkg/retention) finds a session's outbox rows by
-- its key: to keep a session that still has a row to send, and to delete
-- its sent and dead rows with it. Built without blocking the sends of a
-- running system; an interrupted build leaves an invalid index of this
-- name, which is dropped and built again. Rows without a session (sends
-- of no conversation) are left out.
DROP INDEX CONCURRENTLY IF EXISTS delivery_outbox_session;
CREATE INDEX CONCURRENTLY delivery_outbox_session ON delivery_outbox (session_key)
    WHERE session_key <> '';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS delivery_outbox_session;
