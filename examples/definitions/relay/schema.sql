-- examples/definitions/relay/schema.sql - a Nostr relay's events table as relays store it (a
-- schema of this project's own, for the file definitions next to it).
--
--   id              uuid primary key (random: rows arrive anywhere in the key space)
--   event_id        the 32-byte sha256 of the event, unique
--   tags            jsonb array of arrays, e.g. [["d","profile"],["p","<hex>"]]
--   tags_rewritten  bumped by a trigger that rewrites tags on every update (normalization)
--   event_d_tag     added by a compatible schema change, NULL on older rows: the value of the
--                   first "d" tag ('' when there is none), what parameterized replaceable
--                   events are addressed by. The new write path fills it; d_tag.def repairs the
--                   historical rows.
--
-- Idempotent. Seed with seed.sql.

CREATE SCHEMA IF NOT EXISTS relay;

CREATE TABLE IF NOT EXISTS relay.events (
    id             uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    event_id       bytea       NOT NULL UNIQUE CHECK (octet_length(event_id) = 32),
    pubkey         bytea       NOT NULL CHECK (octet_length(pubkey) = 32),
    created_at     timestamptz NOT NULL,
    kind           integer     NOT NULL CHECK (kind >= 0),
    tags           jsonb       NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(tags) = 'array'),
    tags_rewritten integer     NOT NULL DEFAULT 0,
    event_d_tag    text        NULL, -- added by the schema change
    tag_names      text[]      NULL  -- added by the schema change (tag_names.def)
);

-- The value a parameterized replaceable event is addressed by.
CREATE OR REPLACE FUNCTION relay.d_tag(tags jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce((SELECT e->>1 FROM jsonb_array_elements(tags) e
                     WHERE jsonb_typeof(e) = 'array' AND e->>0 = 'd' LIMIT 1), '')
$$;

-- The relay's tag normalization: every update rewrites tags (drops empty tags) and counts it.
-- It fires for every row a backfill batch updates, inside the batch's transaction
-- (docs/definitions.md, Triggers); the repair's result depends only on the normalized tags.
CREATE OR REPLACE FUNCTION relay.normalize_tags() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.tags := coalesce((SELECT jsonb_agg(e ORDER BY o) FROM jsonb_array_elements(NEW.tags)
                          WITH ORDINALITY AS x(e, o) WHERE jsonb_array_length(e) > 0), '[]');
    NEW.tags_rewritten := OLD.tags_rewritten + 1;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS events_normalize_tags ON relay.events;
CREATE TRIGGER events_normalize_tags BEFORE UPDATE ON relay.events
    FOR EACH ROW EXECUTE FUNCTION relay.normalize_tags();
