-- +goose Up
-- Memory writes held by the gate (Hermes's pending/memory/<id>.json):
-- the tool stages one row per call, /memory approve applies it and
-- /memory reject drops it. A decision is a conditional UPDATE ... WHERE
-- state = 'pending', so two replicas (or a redelivered /memory approve)
-- apply a write once. (user_key, turn_id, call_id) makes a tool call
-- that runs again after a worker died stage nothing new.
CREATE TABLE memory_pending_writes (
    user_key    text        NOT NULL,
    id          text        NOT NULL,
    action      text        NOT NULL CHECK (action IN ('add', 'remove')),
    content     text        NOT NULL DEFAULT '',
    note_id     bigint,
    summary     text        NOT NULL,
    session_key text        NOT NULL DEFAULT '',
    turn_id     text        NOT NULL DEFAULT '',
    call_id     text        NOT NULL DEFAULT '',
    state       text        NOT NULL DEFAULT 'pending'
                            CHECK (state IN ('pending', 'approved', 'rejected', 'failed')),
    result      text        NOT NULL DEFAULT '',
    decided_by  text        NOT NULL DEFAULT '',
    decided_at  timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_key, id)
);
CREATE UNIQUE INDEX memory_pending_writes_call_idx ON memory_pending_writes (user_key, turn_id, call_id)
    WHERE turn_id <> '' AND call_id <> '';
CREATE INDEX memory_pending_writes_pending_idx ON memory_pending_writes (user_key, created_at)
    WHERE state = 'pending';

-- +goose Down
DROP TABLE memory_pending_writes;
