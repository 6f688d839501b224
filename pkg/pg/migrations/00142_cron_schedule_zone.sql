-- +goose Up
-- The time zone (cron.timezone, an IANA name or "Local") next_run_at was
-- computed in. A cron expression means a reading of the wall clock in
-- that zone, so when cron.timezone changes the scheduler moves a job's
-- next run to the same reading in the new zone (pkg/cron/scheduler)
-- rather than firing it once more at the old zone's time. '' (rows from
-- before): the zone of the scheduler that reads it.
ALTER TABLE cron_jobs ADD COLUMN schedule_zone text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE cron_jobs DROP COLUMN schedule_zone;
