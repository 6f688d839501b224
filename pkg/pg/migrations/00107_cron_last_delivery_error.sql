-- +goose Up
-- Why the answer of the job's last run (last_run_id) was not delivered:
-- the delivery service dead-lettered or expired one of its messages
-- (Hermes's last_delivery_error; last_status becomes delivery_failed
-- unless the run itself failed). '' when none failed; a new run clears it.
ALTER TABLE cron_jobs ADD COLUMN last_delivery_error text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE cron_jobs DROP COLUMN last_delivery_error;
