-- +goose Up
-- The run of a job in flight, which holds the job's next fire until it
-- ends (Hermes's tick keeps a job whose run is still going from firing
-- again): running_run_id is the run (pkg/cron RunID) the scheduler
-- published last ('' once its turn ended, or for a run blocked before
-- publishing), running_until when the hold lapses even if no end came
-- (a turn lost for good: the firing plus cron.max_run_duration). The
-- router that handles the run's TurnCompleted clears both and computes
-- the job's next run from the run's end.
ALTER TABLE cron_jobs ADD COLUMN running_run_id text NOT NULL DEFAULT '';
ALTER TABLE cron_jobs ADD COLUMN running_until timestamptz;

-- +goose Down
ALTER TABLE cron_jobs DROP COLUMN running_until;
ALTER TABLE cron_jobs DROP COLUMN running_run_id;
