-- +goose Up
-- The run whose outcome the row holds (pkg/cron RunID: the job and the
-- instant the run stands for). The scheduler writes it when it fires a
-- run; a run's outcome (its turn failed) applies only to that run or to
-- one still pending, so an older run that ends late cannot overwrite a
-- newer one's status.
ALTER TABLE cron_jobs ADD COLUMN last_run_id text NOT NULL DEFAULT '';

-- Completed jobs are deleted once they are older than cron.completed_retention
-- (Hermes prunes its completed one-shots after 7 days).
CREATE INDEX cron_jobs_completed ON cron_jobs ((coalesce(last_run_at, updated_at))) WHERE state = 'completed';

-- +goose Down
DROP INDEX cron_jobs_completed;
ALTER TABLE cron_jobs DROP COLUMN last_run_id;
