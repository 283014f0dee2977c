-- examples/demo/schema.sql - the demo application's schema: the event table of a Nostr relay.
--
-- The story the demo tells: the relay stored events for a long time; then a compatible schema
-- change added three derived columns (content_len, pubkey_hex, tag_count). They are NULL on
-- every row written before the change. The new write path (write_path.sql) fills them for new
-- rows; the backfills in examples/demo_definitions.c repair the historical ones.
--
-- Idempotent: safe to run again on a database that already has it.

CREATE SCHEMA IF NOT EXISTS demo;

CREATE TABLE IF NOT EXISTS demo.events (
    id          bigserial   PRIMARY KEY,
    event_id    bytea       NOT NULL CHECK (octet_length(event_id) = 32), -- sha256 of the event
    pubkey      bytea       NOT NULL CHECK (octet_length(pubkey) = 32),   -- author's x-only key
    created_at  timestamptz NOT NULL,                                     -- second precision
    kind        integer     NOT NULL CHECK (kind >= 0),
    content     text        NOT NULL,
    tags        jsonb       NOT NULL CHECK (jsonb_typeof(tags) = 'array'),

    -- added by the schema change; NULL on rows written before it
    content_len integer     NULL, -- octet_length(content)
    pubkey_hex  text        NULL, -- encode(pubkey, 'hex')
    tag_count   integer     NULL, -- jsonb_array_length(tags)

    -- The relay's ordering key. Many events share one created_at (it has second precision),
    -- so the key is compound: (created_at, event_id) is unique and totally ordered. The
    -- constraint's btree index serves every keyset step of demo.events.pubkey_hex_v1.
    CONSTRAINT events_created_at_event_id_key UNIQUE (created_at, event_id)
);

COMMENT ON TABLE demo.events IS 'buzz-backfill demo: Nostr events';
COMMENT ON COLUMN demo.events.content_len IS 'octet_length(content); backfill demo.events.content_len_v1';
COMMENT ON COLUMN demo.events.pubkey_hex IS 'encode(pubkey, ''hex''); backfill demo.events.pubkey_hex_v1';
COMMENT ON COLUMN demo.events.tag_count IS 'jsonb_array_length(tags); backfill demo.events.tag_count_v1';
