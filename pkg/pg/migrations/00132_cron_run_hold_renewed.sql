-- +goose Up
-- A run in flight holds its job for as long as its turn is alive
-- (migration 00118 bounded the hold by a time, so a turn that outlasted
-- cron.max_run_duration overlapped the job's next run): running_until is
-- now when the scheduler next looks whether the run still goes (renewed
-- while it does, released once it is gone without an end), and
-- next_skip_at the first instant of the schedule not yet counted as a
-- fire skipped while the run held the job (NULL: next_run_at), and
-- run_gone_at when the scheduler first found the run showing no sign of
-- life (released only if it still shows none a tick later: a dead
-- worker's turn is between attempts for a moment).
ALTER TABLE cron_jobs ADD COLUMN next_skip_at timestamptz;
ALTER TABLE cron_jobs ADD COLUMN run_gone_at timestamptz;
-- The scheduler's look at held jobs, apart from the due ones.
CREATE INDEX cron_jobs_running ON cron_jobs (running_until) WHERE running_run_id <> '';

-- +goose Down
DROP INDEX cron_jobs_running;
ALTER TABLE cron_jobs DROP COLUMN run_gone_at;
ALTER TABLE cron_jobs DROP COLUMN next_skip_at;
