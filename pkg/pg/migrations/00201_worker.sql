-- +goose Up
-- Agent worker tables. Writes that belong to a turn are fenced by the
-- router's sessions(session_key, generation) row (migration 001xx); this
-- migration deliberately does not reference that table so the two can be
-- applied in either order.

-- One row per turn a worker has started: its progress and, once decided,
-- the one final reply (kept so a redelivered turn republishes the same
-- event with the same seq instead of producing a second answer).
CREATE TABLE worker_turns (
    turn_id     text PRIMARY KEY,
    session_key text NOT NULL,
    session_id  text NOT NULL,
    generation  bigint NOT NULL,
    -- running, completed, interrupted, stopped, failed
    status      text NOT NULL DEFAULT 'running',
    final_seq   bigint NOT NULL DEFAULT 0,
    -- final_text or error (empty while running)
    final_kind  text NOT NULL DEFAULT '',
    final_text  text NOT NULL DEFAULT '',
    error_code  text NOT NULL DEFAULT '',
    model       text NOT NULL DEFAULT '',
    started_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX worker_turns_session_idx ON worker_turns (session_key, started_at);

-- The transcript: every message of a conversation, one committed step each.
-- (turn_id, step) orders a turn's steps; a redelivered turn resumes after
-- the last committed step.
CREATE TABLE transcript_messages (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_key  text NOT NULL,
    session_id   text NOT NULL,
    -- "<platform>:<user id>": whose conversation it is (session_search).
    user_key     text NOT NULL DEFAULT '',
    turn_id      text NOT NULL,
    generation   bigint NOT NULL,
    step         integer NOT NULL,
    -- user, assistant, tool, system
    role         text NOT NULL,
    content      text NOT NULL DEFAULT '',
    -- assistant: [{"id","name","arguments"}]
    tool_calls   jsonb,
    tool_call_id text NOT NULL DEFAULT '',
    tool_name    text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    search       tsvector GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED,
    UNIQUE (turn_id, step)
);
CREATE INDEX transcript_messages_session_idx ON transcript_messages (session_id, id);
CREATE INDEX transcript_messages_user_idx ON transcript_messages (user_key, id);
CREATE INDEX transcript_messages_search_idx ON transcript_messages USING GIN (search);

-- Context compression: a summary replaces the messages up to upto_id.
CREATE TABLE transcript_summaries (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id  text NOT NULL,
    session_key text NOT NULL,
    upto_id     bigint NOT NULL,
    summary     text NOT NULL,
    turn_id     text NOT NULL,
    generation  bigint NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX transcript_summaries_session_idx ON transcript_summaries (session_id, upto_id DESC);

-- The rendered system prompt of a conversation and the config signature it
-- was rendered under; reused byte-identical until the signature changes.
CREATE TABLE session_prompts (
    session_id  text PRIMARY KEY,
    session_key text NOT NULL,
    signature   text NOT NULL,
    prompt      text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Durable notes per user (the memory tool).
CREATE TABLE agent_memories (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_key   text NOT NULL,
    content    text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX agent_memories_user_idx ON agent_memories (user_key, id);

-- +goose Down
DROP TABLE agent_memories;
DROP TABLE session_prompts;
DROP TABLE transcript_summaries;
DROP TABLE transcript_messages;
DROP TABLE worker_turns;
