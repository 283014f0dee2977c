/*
 * demo_definitions.c - the demo's definitions module, and the canonical example of writing
 * backfill definitions (docs/definitions.md walks through it).
 *
 * It owns three definitions over demo.events (examples/demo/schema.sql), the event table of a
 * Nostr relay after a schema change added three derived columns that historical rows lack:
 *
 *   demo.events.content_len_v1  declarative, single bigint key, required
 *   demo.events.pubkey_hex_v1   declarative, compound (created_at, event_id) key, explicit
 *                               postcondition and prerequisite, not required (manual start)
 *   demo.events.tag_count_v1    C callbacks for the mutation and the validation, required
 *
 * Built as a shared object (target buzz-demo-definitions) that exports one symbol,
 * buzz_backfill_module (BF_MODULE_SYMBOL), for bf_registry_load_module(). The same
 * definitions could be linked into a program statically and passed to bf_registry_add().
 *
 * Rules every definition here follows (the spec's, see docs/definitions.md):
 *   - The stable ID names the behaviour. Once a backfill with this ID has started anywhere,
 *     a material change (source set, key, mutation, validation) gets a new ID (_v2), never an
 *     edit of this one. Metadata (description, owner, revision) may change freely.
 *   - The ordering key is unique in the table and has a btree index; ties need a compound key.
 *   - batch_size bounds the rows selected AND the rows the mutation touches per transaction.
 *   - The mutation is idempotent (it only touches rows that still need repair).
 *   - The normal write path (examples/demo/write_path.sql) maintains the postcondition for new
 *     rows and was fully rolled out before any of these starts.
 *   - Definitions are immutable static data that outlive the registry.
 */
#include <stddef.h>

#include "buzz/definition.h"

/* ---- (a) declarative, single key ------------------------------------------------------- */

/*
 * The common case: a predicate that says which rows still need repair and the SET list that
 * repairs them. The engine selects the next batch_size keys after the checkpoint (up to the
 * bound captured at start), applies update_set to those where needs_repair holds, and advances
 * the checkpoint, all in one statement of one transaction. Validation defaults to "no row
 * through the bound still needs repair".
 *
 * required = true: the relay's automatic mode starts it and stays unready until it completes.
 * That is safe only because its write path shipped in an earlier release.
 */
static const bf_definition content_len_v1 = {
    .id = "demo.events.content_len_v1",
    .description = "set content_len = octet_length(content) on events stored before it existed",
    .owner = "relay storage team",
    .revision = "2024-06-01.1",
    .table = "demo.events",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 2000,
    .required = true,
    .needs_repair = "t.content_len IS NULL",
    .update_set = "content_len = octet_length(t.content)",
};

/* ---- (b) declarative, compound key, postcondition, prerequisite ------------------------ */

/*
 * created_at alone is not unique (many events per second), so the key is the compound
 * (created_at, event_id), compared as a row value: ties on created_at are ordered by event_id
 * and are neither skipped nor repeated. The table's UNIQUE (created_at, event_id) index serves
 * each keyset step.
 *
 * postcondition is stricter than NOT needs_repair: validation also rejects a wrong value, not
 * only a missing one. The prerequisite runs before the first batch of each claim; when it is
 * false the backfill enters blocked with an actionable diagnostic instead of failing on a
 * missing column.
 *
 * required = false: this one ships in the same release as its write-path change, so it must
 * not auto-start; an operator starts it once the rollout is complete and old writers drained.
 */
static const bf_definition pubkey_hex_v1 = {
    .id = "demo.events.pubkey_hex_v1",
    .description = "set pubkey_hex = encode(pubkey, 'hex') on events stored before it existed",
    .owner = "relay storage team",
    .revision = "2024-06-01.1",
    .table = "demo.events",
    .key = {{"created_at", BF_KEY_TIMESTAMPTZ}, {"event_id", BF_KEY_BYTEA}},
    .nkey = 2,
    .batch_size = 1000,
    .required = false,
    .needs_repair = "t.pubkey_hex IS NULL",
    .update_set = "pubkey_hex = encode(t.pubkey, 'hex')",
    .postcondition = "t.pubkey_hex = encode(t.pubkey, 'hex')",
    .prerequisite = "EXISTS (SELECT 1 FROM pg_catalog.pg_attribute"
                    " WHERE attrelid = to_regclass('demo.events')"
                    " AND attname = 'pubkey_hex' AND NOT attisdropped)",
    .validate_chunk = 20000,
    .retry = {.max_attempts = 8, .base_ms = 500, .cap_ms = 60000},
};

/* ---- (c) C callbacks ------------------------------------------------------------------- */

/*
 * The callback form, for what one SET list cannot say. Before each call the engine has put the
 * batch's keys (columns named as the key) into the temporary table bf_batch. The callback runs
 * its statements through bf_txn_exec()/bf_txn_query_int() only, never a connection of its own;
 * every row they write counts against batch_size, and exceeding it rolls the whole batch back
 * (BF_ERR_BATCH_BOUND). Return BF_OK and the engine advances the checkpoint in the same
 * transaction; return BF_ERR_PREREQUISITE or BF_ERR_DATA_INVARIANT (after bf_txn_set_diag) to
 * block the backfill with an actionable diagnostic; any other error fails the attempt (retried
 * with backoff when transient). Join bf_batch on the key so the planner uses the key's index.
 */
static bf_err tag_count_mutate(bf_txn *txn, void *arg)
{
    (void)arg;
    /* A data invariant the mutation relies on. The demo schema's CHECK constraint already
     * guarantees it; a relay whose schema does not would block here with a diagnostic that
     * says what is wrong (and names no row values), rather than with the bare "data exception
     * (22023)" that jsonb_array_length() of a non-array would be classified as. */
    long long not_arrays = 0;
    bf_err err = bf_txn_query_int(txn,
                                  "SELECT count(*) FROM demo.events t JOIN bf_batch b"
                                  " ON t.id = b.id WHERE jsonb_typeof(t.tags) <> 'array'",
                                  0, NULL, &not_arrays);
    if (err != BF_OK)
        return err;
    if (not_arrays > 0) {
        bf_txn_set_diag(txn, "%lld events in the batch have tags that are not a JSON array",
                        not_arrays);
        return BF_ERR_DATA_INVARIANT;
    }
    /* idempotent: rows already repaired (by an earlier attempt or the write path) are skipped */
    long updated = 0;
    return bf_txn_exec(txn,
                       "UPDATE demo.events t SET tag_count = jsonb_array_length(t.tags)"
                       " FROM bf_batch b WHERE t.id = b.id AND t.tag_count IS NULL",
                       0, NULL, &updated);
}

/*
 * Validation callback: called once per chunk of keys (in bf_batch) inside a READ ONLY
 * transaction, from the first key through the bound. It proves the postcondition for the chunk
 * or says, without row values, why not.
 */
static bf_err tag_count_validate(bf_txn *txn, void *arg)
{
    (void)arg;
    long long wrong = 0;
    bf_err err = bf_txn_query_int(txn,
                                  "SELECT count(*) FROM demo.events t JOIN bf_batch b"
                                  " ON t.id = b.id"
                                  " WHERE t.tag_count IS DISTINCT FROM jsonb_array_length(t.tags)",
                                  0, NULL, &wrong);
    if (err != BF_OK)
        return err;
    if (wrong > 0) {
        bf_txn_set_diag(txn, "%lld of %ld rows in the chunk have a missing or wrong tag_count",
                        wrong, bf_txn_batch_rows(txn));
        return BF_ERR_VALIDATION_FAILED;
    }
    return BF_OK;
}

static const bf_definition tag_count_v1 = {
    .id = "demo.events.tag_count_v1",
    .description = "set tag_count = jsonb_array_length(tags) on events stored before it existed",
    .owner = "relay storage team",
    .revision = "2024-06-01.1",
    .table = "demo.events",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 2000,
    .required = true,
    .mutate = tag_count_mutate,
    .validate = tag_count_validate,
};

/* ---- the module ------------------------------------------------------------------------ */

static const bf_definition *const demo_definitions[] = {
    &content_len_v1,
    &pubkey_hex_v1,
    &tag_count_v1,
};

/* The one exported symbol (BF_MODULE_SYMBOL). bf_registry_load_module() checks abi and adds
 * every definition, all or nothing. */
extern const bf_module buzz_backfill_module;
const bf_module buzz_backfill_module = {
    .abi = BF_MODULE_ABI,
    .name = "buzz-demo-definitions",
    .definitions = demo_definitions,
    .count = sizeof demo_definitions / sizeof demo_definitions[0],
};
