-- examples/demo/seed.sql - append N historical events to demo.events, fast, in one statement.
--
--   psql -v ON_ERROR_STOP=1 -v rows=200000 -f examples/demo/seed.sql "$URL"
--
-- rows defaults to 200000. Rows written before the schema change leave content_len,
-- pubkey_hex and tag_count NULL: they are what the demo backfills repair. Running it again
-- appends more rows after the existing ones (event numbers continue from max(id)).
--
-- Realistic enough to exercise the engine: created_at has second precision and about 25 events
-- share each second (ties the compound key must order by event_id); event IDs and pubkeys are
-- 32-byte sha256 values; 5000 authors; a few kinds with their typical content; 0 to 3 tags;
-- some contents with multi-byte characters so octet_length differs from char_length.

\if :{?rows}
\else
\set rows 200000
\endif

SET synchronous_commit = off;

INSERT INTO demo.events (event_id, pubkey, created_at, kind, content, tags)
SELECT sha256(convert_to('event:' || g, 'UTF8')),
       sha256(convert_to('author:' || (g * 7919) % 5000, 'UTF8')),
       timestamptz '2024-01-01 00:00:00+00' + (g / 25) * interval '1 second',
       k.kind,
       CASE k.kind
           WHEN 7 THEN CASE WHEN g % 5 = 0 THEN '🤙' ELSE '+' END
           WHEN 6 THEN ''
           WHEN 0 THEN '{"name":"user' || (g * 7919) % 5000 || '","about":"demo"}'
           WHEN 3 THEN ''
           ELSE left(repeat(md5(g::text) || ' ', (1 + g % 12)::int), (8 + (g * 7919) % 400)::int)
                || CASE WHEN g % 10 = 0 THEN ' ⚡ zap' WHEN g % 10 = 1 THEN ' café' ELSE '' END
       END,
       CASE g % 4
           WHEN 0 THEN '[]'::jsonb
           WHEN 1 THEN jsonb_build_array(
               jsonb_build_array('p', encode(sha256(convert_to('author:' || g % 5000, 'UTF8')), 'hex')))
           WHEN 2 THEN jsonb_build_array(
               jsonb_build_array('e', encode(sha256(convert_to('event:' || g / 2, 'UTF8')), 'hex')),
               jsonb_build_array('t', 'nostr'))
           ELSE jsonb_build_array(
               jsonb_build_array('e', encode(sha256(convert_to('event:' || g / 3, 'UTF8')), 'hex'), '', 'root'),
               jsonb_build_array('p', encode(sha256(convert_to('author:' || g % 4999, 'UTF8')), 'hex')),
               jsonb_build_array('client', 'buzz-demo'))
       END
FROM (SELECT coalesce(max(id), 0) AS base FROM demo.events) s,
     generate_series(s.base + 1, s.base + :rows) AS g,
     LATERAL (SELECT CASE
                         WHEN g % 20 < 12 THEN 1     -- text note
                         WHEN g % 20 < 15 THEN 7     -- reaction
                         WHEN g % 20 < 17 THEN 6     -- repost
                         WHEN g % 20 = 17 THEN 0     -- metadata
                         WHEN g % 20 = 18 THEN 3     -- contacts
                         ELSE 30023                  -- long-form article
                     END AS kind) k;

-- planner statistics: start records reltuples as the backfill's source_estimate (progress/ETA)
ANALYZE demo.events;
