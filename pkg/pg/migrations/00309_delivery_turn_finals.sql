-- +goose Up
-- The one final reply (its answer, or the message saying it failed) a
-- turn gets in a chat. Attempts of one turn may each publish one at a
-- different seq: a last attempt's apology whose write failed goes out
-- uncommitted beside an earlier attempt's committed final (an older
-- worker's, frozen past its lock, or one a failed read missed), and a
-- superseded attempt may say "interrupted" while a later one answers. The
-- first final event of a turn that reaches delivery records its seq and a
-- digest of its body here; a final with another digest is dropped, the
-- one recorded handled again as often as it comes back (its outbox keys
-- keep it sent once). Per-request platforms (the API) are not recorded:
-- their gateway takes a request's first final. Delivery's housekeeping
-- forgets rows older than finalsKeep, by created_at.
CREATE TABLE delivery_turn_finals (
    turn_id    text        PRIMARY KEY,
    seq        bigint      NOT NULL,
    digest     bytea       NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE INDEX delivery_turn_finals_created ON delivery_turn_finals (created_at);

-- +goose Down
DROP TABLE delivery_turn_finals;
