-- +goose Up
-- A turn's token usage, written with its final by the worker (the one
-- attempt that decides the turn). The router used to add every turn's
-- usage to its session row after the turn, taking the row's lock that the
-- session's next turn start needs, and a Redis round trip to do it once;
-- it now adds only what a turn that ended without a final used. A session's
-- usage is its row's counts plus the sum over its conversation's turns.
-- Constant defaults: no table rewrite.
ALTER TABLE worker_turns
    ADD COLUMN IF NOT EXISTS input_tokens       bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS output_tokens      bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS cache_read_tokens  bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS cache_write_tokens bigint NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE worker_turns
    DROP COLUMN IF EXISTS input_tokens,
    DROP COLUMN IF EXISTS output_tokens,
    DROP COLUMN IF EXISTS cache_read_tokens,
    DROP COLUMN IF EXISTS cache_write_tokens;
