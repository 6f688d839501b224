-- +goose Up
-- Steering a turn took (the router's /steer, busy mode steer) waits in
-- the session's queue (session_queue, queued by the router before it
-- asked the turn) until the turn gives it to the model: the fenced write
-- of the step that carries the text removes its queued messages, in the
-- same transaction, with this function, right after switchboard_fence.
-- Text the turn never gives to the model (its model call failed, a newer
-- message interrupted it, its worker died) stays queued and runs as the
-- session's next input, once.
--
-- A message that is gone, or locked by a transaction in flight (a turn
-- start taking it as an input, a reset or a /stop clearing the queue),
-- refuses the write as the fence does (SB409): another turn has the text,
-- so this one must not give it to the model too. SKIP LOCKED keeps the
-- fenced write from waiting for a queue row while it holds the fence's
-- shared lock, which a turn start's generation bump may wait for
-- (migration 00203): the write gives way instead of deadlocking.
-- +goose StatementBegin
CREATE FUNCTION switchboard_take_steering(key text, event_ids text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    taken bigint;
BEGIN
    WITH d AS (
        DELETE FROM session_queue WHERE id IN (
            SELECT q.id FROM session_queue q
            WHERE q.session_key = key AND q.event_id = ANY (event_ids)
            FOR UPDATE SKIP LOCKED)
        RETURNING 1)
    SELECT count(*) INTO taken FROM d;
    IF taken < (SELECT count(DISTINCT e) FROM unnest(event_ids) AS e) THEN
        RAISE EXCEPTION 'steering of session % is no longer queued for this turn', key USING ERRCODE = 'SB409';
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION switchboard_take_steering(text, text[]);
