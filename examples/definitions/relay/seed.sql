-- examples/definitions/relay/seed.sql - N historical events (event_d_tag and tag_names NULL).
--
--   psql -v ON_ERROR_STOP=1 -v rows=20000 -f examples/definitions/relay/seed.sql "$URL"
--
-- Kinds 1 (notes, no d tag), 30023 (long-form, a d tag), 30000 (lists, a d tag after a p tag);
-- some events carry an empty tag [] that the normalization trigger drops on their first update.
\if :{?rows}
\else
\set rows 20000
\endif

INSERT INTO relay.events (event_id, pubkey, created_at, kind, tags)
SELECT sha256(convert_to('relay-event:' || g, 'UTF8')),
       sha256(convert_to('author:' || g % 700, 'UTF8')),
       timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second',
       k.kind,
       CASE k.kind
           WHEN 1 THEN jsonb_build_array(jsonb_build_array('t', 'nostr'))
           WHEN 30023 THEN jsonb_build_array(jsonb_build_array('d', 'article-' || g % 97),
                                             jsonb_build_array('title', 'post ' || g))
           ELSE jsonb_build_array(jsonb_build_array('p', encode(sha256(convert_to('p' || g, 'UTF8')), 'hex')),
                                  jsonb_build_array('d', 'list-' || g % 13))
       END || CASE WHEN g % 10 = 0 THEN '[[]]'::jsonb ELSE '[]'::jsonb END
FROM generate_series(coalesce((SELECT count(*) FROM relay.events), 0) + 1,
                     coalesce((SELECT count(*) FROM relay.events), 0) + :rows) AS g,
     LATERAL (SELECT (ARRAY[1, 1, 30023, 30000])[1 + g % 4] AS kind) AS k;

ANALYZE relay.events;
