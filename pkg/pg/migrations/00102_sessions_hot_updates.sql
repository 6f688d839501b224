-- +goose NO TRANSACTION
-- +goose Up
-- Keep the session row's frequent updates heap-only (HOT). A turn updates
-- its session three times (arrival, turn start, usage), and each update
-- set updated_at, which sessions_platform_idx indexed: so every update
-- wrote a new entry into both indexes and left dead ones to vacuum. No
-- query reads sessions by updated_at (listings go by platform and key),
-- so the index is now (platform, session_key), which no update changes,
-- and pages keep 30% free for the new row versions HOT needs.
-- CONCURRENTLY: a large sessions table stays writable meanwhile.
CREATE INDEX CONCURRENTLY IF NOT EXISTS sessions_platform_key_idx ON sessions (platform, session_key);
DROP INDEX CONCURRENTLY IF EXISTS sessions_platform_idx;
ALTER TABLE sessions SET (fillfactor = 70);

-- +goose Down
ALTER TABLE sessions RESET (fillfactor);
CREATE INDEX CONCURRENTLY IF NOT EXISTS sessions_platform_idx ON sessions (platform, updated_at DESC);
DROP INDEX CONCURRENTLY IF EXISTS sessions_platform_key_idx;
