-- +goose Up
-- The fence without a row lock. switchboard_fence used to share-lock the
-- session row: every fenced write then dirtied the row (a WAL record per
-- lock, a multixact when two overlapped) and waited on, or held up, the
-- router's unrelated updates of the row (activity, usage). The fence now
-- takes a shared transaction-level advisory lock on the session key, in
-- its own class, and every change of a session's generation takes the
-- same lock exclusively (a trigger, so no generation bump can forget it).
-- A fenced transaction therefore reads the generation after any bump that
-- committed before it, and no bump commits until it has: the same
-- guarantee, kept in the lock table instead of on the row.
--
-- Deadlock-free as long as fenced writes never touch the sessions table
-- (they write turns, transcripts, prompts and summaries): a bump holds the
-- row when it waits for the advisory lock, a fenced write holds the
-- advisory lock and never waits for the row.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION switchboard_fence(key text, gen bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    cur bigint;
BEGIN
    -- 21314 is 'SB': the advisory lock class of session generations.
    PERFORM pg_advisory_xact_lock_shared(21314, hashtext(key));
    -- A volatile function's next statement takes a new snapshot: it sees
    -- every bump that committed before the lock was granted.
    SELECT generation INTO cur FROM sessions WHERE session_key = key;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'session % not found', key USING ERRCODE = 'SB409';
    END IF;
    IF cur <> gen THEN
        RAISE EXCEPTION 'session at generation %, turn at %', cur, gen USING ERRCODE = 'SB409';
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION switchboard_generation_bump() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(21314, hashtext(NEW.session_key));
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER sessions_generation_bump
    BEFORE UPDATE OF generation ON sessions
    FOR EACH ROW WHEN (OLD.generation IS DISTINCT FROM NEW.generation)
    EXECUTE FUNCTION switchboard_generation_bump();

-- +goose Down
DROP TRIGGER sessions_generation_bump ON sessions;
DROP FUNCTION switchboard_generation_bump();
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION switchboard_fence(key text, gen bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    cur bigint;
BEGIN
    SELECT generation INTO cur FROM sessions WHERE session_key = key FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'session % not found', key USING ERRCODE = 'SB409';
    END IF;
    IF cur <> gen THEN
        RAISE EXCEPTION 'session at generation %, turn at %', cur, gen USING ERRCODE = 'SB409';
    END IF;
END
$$;
-- +goose StatementEnd
