-- examples/demo/write_path.sql - the relay's new normal write path, as a trigger.
--
-- The rollout rule (docs/definitions.md, "Rolling it out"): the write path that maintains a
-- backfill's postcondition is deployed and fully rolled out, and old writers are drained,
-- BEFORE the backfill starts. Then every row created after the captured upper bound is
-- already correct, and the bounded historical repair is all that is left.
--
-- In a real relay this is application code writing the three columns on insert; a trigger is
-- the shortest stand-in. It fires on INSERT and when a source column changes, never on the
-- backfills' own UPDATEs (they set only the derived columns). Idempotent.

CREATE OR REPLACE FUNCTION demo.events_derive() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.content_len := octet_length(NEW.content);
    NEW.pubkey_hex := encode(NEW.pubkey, 'hex');
    NEW.tag_count := jsonb_array_length(NEW.tags);
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS events_derive ON demo.events;
CREATE TRIGGER events_derive
    BEFORE INSERT OR UPDATE OF content, pubkey, tags ON demo.events
    FOR EACH ROW EXECUTE FUNCTION demo.events_derive();
