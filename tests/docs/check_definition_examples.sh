#!/usr/bin/env bash
# The file definitions of examples/definitions/ run to completion through a real
# buzz-backfilld, each set on a fresh database of $BUZZ_TEST_PG_URL with its own schema:
#   demo/   the three demo repairs (content_len, pubkey_hex, tag_count) over
#           examples/demo/schema.sql, seeded by examples/demo/seed.sql
#   relay/  a relay's events table (uuid key, jsonb tags, a trigger rewriting tags on every
#           update): event_d_tag (declarative) and tag_names (SQL callback form)
# Each definition is checked by the preflight, started with buzzctl, and must complete; then
# every row is checked with SQL of this script's own (not the definitions' postconditions).
# Usage: check_definition_examples.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$1"
src="$2"
BUZZCTL="$build/client/buzzctl"
DAEMON="$build/server/buzz-backfilld"
# shellcheck source=tests/docs/daemon_db.sh
. "$src/tests/docs/daemon_db.sh"

# run_set NAME SCHEMA_AND_SEED_FILES... -- IDS...: preflight, daemon, start and complete each
run_set()
{
    local name="$1" files=() ids=()
    shift
    while [[ "$1" != "--" ]]; do files+=("$1"); shift; done
    shift
    ids=("$@")
    local args=()
    for f in "${files[@]}"; do args+=(-f "$f"); done
    psql "$db_url" -q -v ON_ERROR_STOP=1 -v rows=5000 "${args[@]}" >/dev/null 2>&1 ||
        fail "$name: the schema or seed failed"
    # the files are installed as a package would: a directory only its owner may write
    local defs="$work/$name.d"
    install -d -m 0755 "$defs"
    install -m 0644 "$src/examples/definitions/$name"/*.def "$defs/"
    BUZZ_BACKFILL_DATABASE_URL="$db_url" "$DAEMON" --definitions-dir "$defs" migrate \
        >/dev/null 2>&1 || fail "$name: migrate failed"
    local out
    out="$(BUZZ_BACKFILL_DATABASE_URL="$db_url" "$DAEMON" --definitions-dir "$defs" preflight \
        2>/dev/null)" || fail "$name: preflight: $out"
    local url="ipc://$work/$name.sock"
    env BUZZ_BACKFILL_DATABASE_URL="$db_url" BUZZ_BACKFILL_LISTEN="$url" \
        BUZZ_BACKFILL_IPC_BOUNDARY=on BUZZ_BACKFILL_WORKERS=2 \
        BUZZ_BACKFILL_DEFINITIONS_DIR="$defs" "$DAEMON" run 2>"$work/daemon.log" &
    daemon=$!
    for id in "${ids[@]}"; do
        local ok=0
        for _ in $(seq 1 100); do # registration follows the listeners
            if "$BUZZCTL" --url "$url" start "$id" >/dev/null 2>&1; then ok=1; break; fi
            kill -0 "$daemon" 2>/dev/null || fail "$name: the daemon exited"
            sleep 0.1
        done
        ((ok)) || fail "$name: buzzctl start $id failed"
    done
    for id in "${ids[@]}"; do
        local state=""
        for _ in $(seq 1 600); do
            state="$(psql "$db_url" -qtAc "SELECT state FROM buzz_backfill.backfill
                                          WHERE id = '$id'")"
            [[ "$state" == completed || "$state" == failed || "$state" == blocked ]] && break
            sleep 0.1
        done
        [[ "$state" == completed ]] || fail "$name: $id ended $state, not completed"
        echo "$name: $id completed"
    done
    daemon_stop "$name: the daemon did not stop cleanly"
}

# expect NAME SQL: SQL counts wrong rows; it must be 0
expect_none()
{
    local n
    n="$(psql "$db_url" -qtAc "$2")"
    [[ "$n" == 0 ]] || fail "$1: $n wrong rows"
}

daemon_db_begin defexamples
run_set demo "$src/examples/demo/schema.sql" "$src/examples/demo/seed.sql" -- \
    demo.events.content_len_v1 demo.events.pubkey_hex_v1 demo.events.tag_count_v1
expect_none content_len "SELECT count(*) FROM demo.events
                         WHERE content_len IS DISTINCT FROM octet_length(content)"
expect_none pubkey_hex "SELECT count(*) FROM demo.events
                        WHERE pubkey_hex IS DISTINCT FROM encode(pubkey, 'hex')"
expect_none tag_count "SELECT count(*) FROM demo.events
                       WHERE tag_count IS DISTINCT FROM jsonb_array_length(tags)"

psql "$BUZZ_TEST_PG_URL" -qtAc "DROP DATABASE $db WITH (FORCE)" >/dev/null
psql "$BUZZ_TEST_PG_URL" -qtAc "CREATE DATABASE $db" >/dev/null
run_set relay "$src/examples/definitions/relay/schema.sql" \
    "$src/examples/definitions/relay/seed.sql" -- \
    relay.events.d_tag_v1 relay.events.tag_names_v1
# the d tag by hand: the first ["d", x] of the (normalized) tags, '' without one
expect_none event_d_tag "SELECT count(*) FROM relay.events
    WHERE event_d_tag IS DISTINCT FROM CASE
        WHEN kind = 1 THEN ''
        WHEN kind = 30023 THEN tags->0->>1
        ELSE tags->1->>1 END"
expect_none tag_names "SELECT count(*) FROM relay.events
    WHERE tag_names IS DISTINCT FROM CASE
        WHEN kind = 1 THEN ARRAY['t']
        WHEN kind = 30023 THEN ARRAY['d', 'title']
        ELSE ARRAY['d', 'p'] END"
# the trigger ran for every repaired row (twice: once per backfill) and dropped the empty tags
expect_none trigger "SELECT count(*) FROM relay.events
    WHERE tags_rewritten <> 2
       OR EXISTS (SELECT 1 FROM jsonb_array_elements(tags) e WHERE jsonb_array_length(e) = 0)"
echo "check_definition_examples: ok"
