-- +goose Up
-- The fence of a turn's attempts. The generation fence (00202, 00203)
-- refuses the writes of a turn the session moved on from, but not those
-- of an earlier attempt at the same turn: a worker frozen (SIGSTOP, a VM
-- pause) past its lock while the bus gave the turn to another attempt
-- runs the same turn at the same generation, and only the Redis lock
-- checks stopped it, with a few instructions unfenced between the last
-- check and a commit.
--
-- An attempt after the first (the bus's delivery count) claims the turn
-- here when it reads it, once it holds the session lock:
-- switchboard_claim_attempt records when it took the lock (by Redis's
-- clock: the lock's holders take it one after the other, so that time
-- orders them), and raises SB409 when an attempt that took the lock later
-- claimed it already. The delivery count does not order the attempts: it
-- starts again at 1 when the consumer is recreated or the turn's message
-- published anew, and an attempt it numbers lower may be the newer one.
-- Every fenced write of a worker that knows its lock's time calls
-- switchboard_fence_attempt instead of switchboard_fence, which also
-- raises SB409 once an attempt that took the lock later than the writer
-- claimed the turn: a later claim fences the earlier attempts for good.
-- A first attempt claims nothing (no earlier attempt is left to fence),
-- so a turn delivered once writes no row here and its writes cost no
-- more statements.
--
-- The claim takes the session's generation advisory lock (00203)
-- exclusively, as a generation bump does: a fenced write in flight
-- commits before the claim (and the claiming attempt's reads, in the
-- same transaction, see it), and one that starts later sees the claim.
-- No deadlock: the claim touches no sessions row, and a fenced write
-- never waits for a claim's row.
--
-- A worker from before this migration neither claims nor checks: its
-- attempts stay unfenced by attempt (as before), and a turn with no row
-- here fences nobody by attempt.
CREATE TABLE worker_turn_attempts (
    turn_id     text PRIMARY KEY,
    session_key text NOT NULL,
    -- attempt is the claiming delivery's number, for the logs only.
    attempt     integer NOT NULL,
    -- locked_at is when the claiming attempt took the session lock, by
    -- Redis's clock: it orders the attempts.
    locked_at   timestamptz NOT NULL,
    claimed_at  timestamptz NOT NULL DEFAULT now()
);
-- The retention deletes a session's rows by key.
CREATE INDEX worker_turn_attempts_session_idx ON worker_turn_attempts (session_key);

-- +goose StatementBegin
CREATE FUNCTION switchboard_claim_attempt(key text, turn text, att integer, locked timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(21314, hashtext(key));
    INSERT INTO worker_turn_attempts AS a (turn_id, session_key, attempt, locked_at) VALUES (turn, key, att, locked)
    ON CONFLICT (turn_id) DO UPDATE SET attempt = EXCLUDED.attempt, locked_at = EXCLUDED.locked_at, claimed_at = now()
        WHERE a.locked_at <= EXCLUDED.locked_at;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'turn % was claimed by an attempt that took the lock after attempt % did', turn, att USING ERRCODE = 'SB409';
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION switchboard_fence_attempt(key text, gen bigint, turn text, locked timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    holder integer;
    holder_locked timestamptz;
BEGIN
    PERFORM switchboard_fence(key, gen);
    -- A new snapshot, taken under the advisory lock: it sees every claim
    -- that committed before the lock was granted.
    SELECT a.attempt, a.locked_at INTO holder, holder_locked FROM worker_turn_attempts a WHERE a.turn_id = turn;
    IF holder_locked > locked THEN
        RAISE EXCEPTION 'turn % taken over by attempt % (locked at %), write of an attempt locked at %', turn, holder, holder_locked, locked USING ERRCODE = 'SB409';
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION switchboard_fence_attempt(text, bigint, text, timestamptz);
DROP FUNCTION switchboard_claim_attempt(text, text, integer, timestamptz);
DROP TABLE worker_turn_attempts;
