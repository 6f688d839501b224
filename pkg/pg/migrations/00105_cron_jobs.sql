-- +goose Up
-- Scheduled agent tasks (Hermes's cron jobs). Any router replica's
-- scheduler claims due rows with FOR UPDATE SKIP LOCKED, publishes the run
-- under an event id made of the job and the scheduled instant, and
-- advances next_run_at in the same transaction (see pkg/cron/scheduler).
CREATE TABLE cron_jobs (
    id               text        PRIMARY KEY,
    -- Who created it and may list and change it: "<platform>:<user>" in a
    -- direct chat, "session:<session key>" in a group (the worker's user key).
    owner            text        NOT NULL,
    name             text        NOT NULL,
    prompt           text        NOT NULL,
    -- The schedule as parsed: kind once|interval|cron, its canonical
    -- expression (RFC 3339 instant, "every <n>m", five cron fields) and
    -- what lists show.
    schedule_kind    text        NOT NULL CHECK (schedule_kind IN ('once', 'interval', 'cron')),
    schedule_expr    text        NOT NULL,
    schedule_display text        NOT NULL,
    -- origin, local, <platform> (its home channel), <platform>:<chat>[:<thread>]
    -- or <platform>:#<name>, resolved when the job fires.
    deliver          text        NOT NULL DEFAULT 'origin',
    -- The chat the job was created from.
    origin_platform  text        NOT NULL DEFAULT '',
    origin_account   text        NOT NULL DEFAULT '',
    origin_chat_id   text        NOT NULL DEFAULT '',
    origin_thread_id text        NOT NULL DEFAULT '',
    -- NULL: forever.
    repeat_times     integer     CHECK (repeat_times IS NULL OR repeat_times > 0),
    repeat_completed integer     NOT NULL DEFAULT 0,
    state            text        NOT NULL DEFAULT 'scheduled'
                     CHECK (state IN ('scheduled', 'paused', 'completed')),
    -- The next scheduled instant; NULL once completed.
    next_run_at      timestamptz,
    -- A run asked for with "run", fired on the next tick, whatever the state.
    manual_run_at    timestamptz,
    last_run_at      timestamptz,
    last_status      text        NOT NULL DEFAULT '',
    last_error       text        NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX cron_jobs_due ON cron_jobs (next_run_at) WHERE state = 'scheduled';
CREATE INDEX cron_jobs_manual ON cron_jobs (manual_run_at) WHERE manual_run_at IS NOT NULL;
CREATE INDEX cron_jobs_owner ON cron_jobs (owner, created_at);

-- +goose Down
DROP TABLE cron_jobs;
