-- +goose Up
-- When schedule_zone last changed (the job's next run was first computed
-- in that zone). A scheduler moves a job computed in another zone to
-- its own only when the zone was set before the scheduler started: one
-- set since may come from a router started with a newer cron.timezone
-- (a rolling change), which an older one must not undo. updated_at,
-- read for that before, also moves on writes of a run's status
-- (RecordOutcome, a delivery failure, a failed firing), which kept such
-- a job in its old zone for one more run. Rows from before: their
-- updated_at, as that rule read them. A router of an older release
-- leaves the column as it was when it moves a job, so a router of this
-- release may move that job back to its zone, once (the older one,
-- reading updated_at, leaves it there).
ALTER TABLE cron_jobs ADD COLUMN schedule_zone_at timestamptz;
UPDATE cron_jobs SET schedule_zone_at = updated_at;
ALTER TABLE cron_jobs ALTER COLUMN schedule_zone_at SET DEFAULT now(),
  ALTER COLUMN schedule_zone_at SET NOT NULL;

-- +goose Down
ALTER TABLE cron_jobs DROP COLUMN schedule_zone_at;
