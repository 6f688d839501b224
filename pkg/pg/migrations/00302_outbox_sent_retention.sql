-- +goose NO TRANSACTION
-- +goose Up
-- Sent rows are kept for delivery.sent_retention, then deleted by the
-- delivery service's housekeeping, which finds them by this index (built
-- without blocking the sends of a running system).
CREATE INDEX CONCURRENTLY IF NOT EXISTS delivery_outbox_sent ON delivery_outbox (updated_at)
    WHERE state = 'sent';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS delivery_outbox_sent;
