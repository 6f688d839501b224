-- +goose NO TRANSACTION
-- +goose Up
-- /sessions and /resume in a Slack DM read the conversations of every
-- thread of the DM: the keys that start with the DM's key and ":"
-- (sessionstore.ChatHistory), a range of keys in byte order, which the
-- primary key, in the database's collation, cannot find without reading
-- the whole table. Built without blocking a running system; an
-- interrupted build leaves an invalid index of this name, which is
-- dropped and built again.
DROP INDEX CONCURRENTLY IF EXISTS session_history_key_bytes_idx;
CREATE INDEX CONCURRENTLY session_history_key_bytes_idx ON session_history ((session_key COLLATE "C"));

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS session_history_key_bytes_idx;
