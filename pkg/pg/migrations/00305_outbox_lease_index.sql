-- +goose NO TRANSACTION
-- +goose Up
-- Each round of a delivery replica's send loop asks when the earliest
-- lease of a row being sent runs out (outbox.Store.ClaimNext), so the
-- loop wakes then and takes over the row of a sender that died, not at
-- its next poll; this index answers that from the rows being sent, not
-- from every waiting row. Built without blocking the sends of a running
-- system; an interrupted build leaves an invalid index of this name,
-- which is dropped and built again.
DROP INDEX CONCURRENTLY IF EXISTS delivery_outbox_lease;
CREATE INDEX CONCURRENTLY delivery_outbox_lease ON delivery_outbox (lease_until)
    WHERE state = 'sending';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS delivery_outbox_lease;
