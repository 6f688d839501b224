-- +goose Up
-- The fence of a turn's attempts. The generation fence (00202, 00203)
-- refuses the writes of a turn the session moved on from, but not those
-- of an earlier attempt at the same turn: a worker frozen (SIGSTOP, a VM
-- pause) past its lock while the bus gave the turn to another attempt
-- runs the same turn at the same generation, and only the Redis lock
-- checks stopped it, with a few instructions unfenced between the last
-- check and a commit.
--
-- An attempt after the first (the bus numbers a turn's deliveries from 1,
-- a later one with a greater number) claims the turn here when it reads
-- it, once it holds the session lock: switchboard_claim_attempt records
-- its number, and raises SB409 when a later attempt claimed it already.
-- Every fenced write of a worker that knows its attempt calls
-- switchboard_fence_attempt instead of switchboard_fence, which also
-- raises SB409 once a later attempt than the writer's claimed the turn:
-- a later claim fences the earlier attempts for good. A first attempt
-- claims nothing (no earlier attempt is left to fence), so a turn
-- delivered once writes no row here and its writes cost no more
-- statements.
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
    attempt     integer NOT NULL,
    claimed_at  timestamptz NOT NULL DEFAULT now()
);
-- The retention deletes a session's rows by key.
CREATE INDEX worker_turn_attempts_session_idx ON worker_turn_attempts (session_key);

-- +goose StatementBegin
CREATE FUNCTION switchboard_claim_attempt(key text, turn text, att integer) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(21314, hashtext(key));
    INSERT INTO worker_turn_attempts AS a (turn_id, session_key, attempt) VALUES (turn, key, att)
    ON CONFLICT (turn_id) DO UPDATE SET attempt = EXCLUDED.attempt, claimed_at = now()
        WHERE a.attempt <= EXCLUDED.attempt;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'turn % was claimed by a later attempt than %', turn, att USING ERRCODE = 'SB409';
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION switchboard_fence_attempt(key text, gen bigint, turn text, att integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    holder integer;
BEGIN
    PERFORM switchboard_fence(key, gen);
    -- A new snapshot, taken under the advisory lock: it sees every claim
    -- that committed before the lock was granted.
    SELECT a.attempt INTO holder FROM worker_turn_attempts a WHERE a.turn_id = turn;
    IF holder > att THEN
        RAISE EXCEPTION 'turn % taken over by attempt %, write of attempt %', turn, holder, att USING ERRCODE = 'SB409';
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION switchboard_fence_attempt(text, bigint, text, integer);
DROP FUNCTION switchboard_claim_attempt(text, text, integer);
DROP TABLE worker_turn_attempts;
