-- +goose Up
-- A job whose firing fails (the scheduler panics on it, or the bus or the
-- database fails before its run is queued) is retried with a growing
-- delay rather than every tick: fire_failures counts the failures in a
-- row (a firing that succeeds resets it), fire_retry_at is when the next
-- try may be. A panic that is the job's cron.pause_after_fire_failures-th
-- failure in a row pauses it (an outage of the bus or the database only
-- delays), and paused_reason says why (Hermes's paused_reason,
-- shown by /cron list; '' for a pause asked for by hand).
ALTER TABLE cron_jobs ADD COLUMN fire_failures integer NOT NULL DEFAULT 0;
ALTER TABLE cron_jobs ADD COLUMN fire_retry_at timestamptz;
ALTER TABLE cron_jobs ADD COLUMN paused_reason text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE cron_jobs DROP COLUMN paused_reason;
ALTER TABLE cron_jobs DROP COLUMN fire_retry_at;
ALTER TABLE cron_jobs DROP COLUMN fire_failures;
