-- +goose Up
-- How full a chat's context window was at its latest turn: the prompt
-- tokens of that turn's latest model call (input + cache read + cache
-- write), the number the runtime footer shows as its percentage. The
-- worker writes it with the turn's final (in the same statement: no
-- round trip more); /context reads it, mid-turn too, so /context and
-- /footer agree. One row per session key, for its current conversation
-- (session_id): a row of an earlier conversation is not this one's
-- figure. Hermes keeps the same figure as its session store's
-- last_prompt_tokens. Its own table, not a column of worker_turns
-- (migration 00201), so that the two migrations apply in either order.
CREATE TABLE session_context (
    session_key    text PRIMARY KEY,
    session_id     text NOT NULL,
    turn_id        text NOT NULL,
    context_tokens bigint NOT NULL,
    model          text NOT NULL DEFAULT '',
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE session_context;
