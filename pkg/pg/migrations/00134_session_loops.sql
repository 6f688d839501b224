-- +goose Up
-- A chat's recurring in-session prompts: /loop (Hermes's
-- hermes_cli/loops.py LoopState) and /heartbeat (hermes_cli/heartbeat.py
-- HeartbeatState), which Hermes keeps in its session database's
-- state_meta under loop:<session_id> and heartbeat:<session_id>. One of
-- each kind per session key, for the conversation (session_id) it was
-- set in: /new ends it. A router replica's scheduler claims a due row
-- (FOR UPDATE SKIP LOCKED), advances it and queues its wakeup in the
-- session's queue (session_queue, event id <kind>:<id>:<tick>) in one
-- transaction: a tick fires once across replicas and crashes.
-- template is the MessageReceived (source, reply route) the wakeups are
-- made from. last_event_id is the last wakeup queued; completed_event_id
-- and completed_message the last one whose answer the worker evaluated
-- and what it announced, so a redelivered turn changes nothing and
-- announces the same line again.
CREATE TABLE session_loops (
    session_key        text NOT NULL,
    kind               text NOT NULL CHECK (kind IN ('loop', 'heartbeat')),
    id                 text NOT NULL,
    session_id         text NOT NULL,
    prompt             text NOT NULL,
    status             text NOT NULL CHECK (status IN ('active', 'paused', 'done', 'cleared')),
    interval_ms        bigint NOT NULL,
    delay_ms           bigint NOT NULL DEFAULT 0,
    times              integer NOT NULL DEFAULT 0,
    until_text         text NOT NULL DEFAULT '',
    max_ticks          integer NOT NULL DEFAULT 0,
    ticks              integer NOT NULL DEFAULT 0,
    next_due_at        timestamptz NOT NULL,
    last_fired_at      timestamptz,
    paused_reason      text NOT NULL DEFAULT '',
    last_stop_reason   text NOT NULL DEFAULT '',
    last_digest        text NOT NULL DEFAULT '',
    template           bytea NOT NULL,
    last_event_id      text NOT NULL DEFAULT '',
    completed_event_id text NOT NULL DEFAULT '',
    completed_message  text NOT NULL DEFAULT '',
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    PRIMARY KEY (session_key, kind)
);
CREATE INDEX session_loops_due ON session_loops (next_due_at) WHERE status = 'active';

-- +goose Down
DROP TABLE session_loops;
