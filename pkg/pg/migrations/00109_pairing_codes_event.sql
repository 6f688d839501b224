-- +goose Up
-- The inbound event a pairing code was issued for
-- (<platform>:<account>:<event_id>), so the redelivery of that event
-- after a crash between the code's commit and the event's
-- acknowledgement recognises its own code (the notice carrying it is on
-- the bus already) instead of answering "a code was sent to you
-- recently" as well. Expand only: codes issued by an earlier release
-- keep '' and match no event.
ALTER TABLE pairing_codes ADD COLUMN event_id text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE pairing_codes DROP COLUMN event_id;
