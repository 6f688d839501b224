-- +goose Up
-- The goal judge's verdict on one turn (/goal), written by the worker
-- that ran the turn in the same transaction as the goal's new state and
-- the continuation it queues (session_queue, event id goal:<turn id>).
-- A retried or redelivered turn finds its verdict here: it neither
-- counts the turn twice nor queues a second continuation, and it
-- announces the same status line (message) again, under the same bus
-- id, which delivery takes once. Rows older than a day are of no use to
-- any retry; the retention sweep (pkg/retention) deletes them, and those
-- of deleted sessions.
CREATE TABLE goal_verdicts (
    turn_id     text PRIMARY KEY,
    session_key text NOT NULL,
    verdict     text NOT NULL,
    reason      text NOT NULL,
    message     text NOT NULL,
    continued   boolean NOT NULL,
    created_at  timestamptz NOT NULL
);
CREATE INDEX goal_verdicts_created ON goal_verdicts (created_at);

-- +goose Down
DROP TABLE goal_verdicts;
