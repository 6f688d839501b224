-- +goose NO TRANSACTION
-- +goose Up
-- The session retention (pkg/retention) deletes a deleted session's goal
-- verdicts by its key (DELETE FROM goal_verdicts WHERE session_key =
-- ANY($1)); without this index each batch read the whole table. Built
-- without blocking the turns of a running system; an interrupted build
-- leaves an invalid index of this name, which is dropped and built again.
DROP INDEX CONCURRENTLY IF EXISTS goal_verdicts_session;
CREATE INDEX CONCURRENTLY goal_verdicts_session ON goal_verdicts (session_key);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS goal_verdicts_session;
