-- +goose NO TRANSACTION
-- +goose Up
-- Sent rows are kept for delivery.sent_retention, then deleted by the
-- delivery service's housekeeping, which finds them by this index (built
-- without blocking the sends of a running system). A build that was
-- interrupted leaves an invalid index of this name: it is dropped and
-- built again.
DROP INDEX CONCURRENTLY IF EXISTS delivery_outbox_sent;
CREATE INDEX CONCURRENTLY delivery_outbox_sent ON delivery_outbox (updated_at)
    WHERE state = 'sent';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS delivery_outbox_sent;
