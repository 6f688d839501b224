-- +goose Up
-- switchboard_fence(key, generation) share-locks the session row for the
-- rest of the transaction and raises SQLSTATE SB409 when the session is
-- gone or at another generation. A fenced write sends it first in the same
-- pipelined batch (one round trip, one implicit transaction), so a stale
-- turn's statements after it never commit.
-- +goose StatementBegin
CREATE FUNCTION switchboard_fence(key text, gen bigint) RETURNS void
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

-- +goose Down
DROP FUNCTION switchboard_fence(text, bigint);
