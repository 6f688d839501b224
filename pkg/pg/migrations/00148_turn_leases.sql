-- +goose Up
-- A session's running turn, as Postgres knows it. The Redis lock alone
-- said whether a turn ran: when Redis lost its data (a restart without
-- persistence, a failover) while a turn ran, a message before the turn's
-- worker renewed its lock found the session free and started a second
-- turn beside the first, whose writes the new generation then refused:
-- its message went unanswered.
--
-- A turn start (sessionstore: BeginFree, StartTurn) writes the lease of
-- the turn it starts, in its transaction: the turn, its generation, and
-- until when it holds the session without a word from a worker (the
-- router's grant TTL: how long a turn may wait for a worker). The worker
-- renews it with its lock, to the lock's TTL; a later attempt's claim
-- renews it too. A start is refused while the lease holds: the session is
-- still at the lease's generation (no /stop or /new moved it on), the
-- lease has not expired, and the worker has not recorded the turn's end
-- (its worker_turns row, which the turn writes as it ends). The message
-- then waits in the queue for the turn's completion, as it does behind a
-- held lock.
--
-- The lease is written after the generation bump in a start's
-- transaction, so that a start holds it only once every fenced write of
-- the session has committed (migration 00203); a worker writes it alone
-- or last in a batch, waiting for nothing while it holds the row. Rows go
-- with their session.
CREATE TABLE turn_leases (
    session_key text PRIMARY KEY REFERENCES sessions (session_key) ON DELETE CASCADE,
    turn_id     text NOT NULL,
    generation  bigint NOT NULL,
    expires_at  timestamptz NOT NULL
);

-- +goose Down
DROP TABLE turn_leases;
