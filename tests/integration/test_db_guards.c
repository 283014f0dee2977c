/*
 * test_db_guards.c - every database-level guard of the engine schema refuses exactly the write
 * it exists to refuse, and the batch fence refuses each way a claim can go stale.
 *
 * These guards are the database's last line against any writer (a buggy engine, an operator's
 * psql, a hostile tool), so the refused writes here are direct SQL on the tables, as such a
 * writer would send them. Every state they are attempted on was made by the engine (bf_register,
 * bt_act, workers); no lifecycle column is written to prepare a state. Each attempt, refused or
 * legal, runs in its own transaction that is rolled back, so no case changes another's rows.
 *
 * (1) Inventory: the CHECK constraints and triggers on the buzz_backfill tables, read from
 * pg_constraint and pg_trigger by name, equal the guards listed below (a trigger counts only
 * while enabled). A guard added without a case here, or one removed, fails "inventory".
 *
 * (2) One case per guard, named after it: the write the guard refuses fails with its SQLSTATE
 * (23514 and the constraint's name for a CHECK; the trigger's BFI0n and message for a trigger,
 * attributed to the trigger by name: with just that trigger disabled, in a transaction rolled
 * back, the same write goes through), and a near-identical legal write (the same statement with
 * the value at the limit, or with the columns the guard ties together set consistently)
 * changes the row, so a case cannot pass because its statement fails for another reason.
 *
 * (3) The batch fence (registry.c add_fence, with the conditions compile_fence and compile_loop
 * append) and the batch verdict (buzz_backfill.batch_verdict; batch.c bf__batch_callback for the
 * callback form), condition by condition. Each is proved by a worker step whose batch is
 * stale in that one way only, asserting that the step commits nothing (target rows, checkpoint,
 * counters). Where a suite already proves a condition it is named, not repeated:
 *
 *   condition                                    proved by
 *   f.id = the backfill's ID                      fence_id (here)
 *   lifecycle f.state = 'running'                 fence_lifecycle (here)
 *   generation                                    conformance_01_claim_race (takeover by a process
 *                                                 reusing the owner identity: only the generation
 *                                                 differs)
 *   owner                                         fence_owner (here)
 *   live claim (claim_expires_at > clock)         conformance_05_stale_owner
 *                                                 test_own_lease_expiry_is_counted (nobody takes
 *                                                 over: only the expiry differs)
 *   CAS on the old checkpoint                     fence_checkpoint_cas (here)
 *   new checkpoint after the old (callback)       fence_callback_after_old (here)
 *   new checkpoint within the bound (callback)    fence_callback_within_bound (here)
 *   new checkpoint after the old, within the      not provable: the loop's last key is read from
 *   bound (loop)                                  the keyset "key > c AND key <= b" of the same
 *                                                 iteration, over its own variables, so both
 *                                                 hold by construction (scripts/guard-mutants.sh
 *                                                 reports them as equivalent mutants)
 *   batch_verdict BFS01 (fence matched nothing)   conformance_03_rollback test_fence_fails_
 *                                                 declarative, conformance_05_stale_owner
 *                                                 (pause, takeover), test_batch_loop
 *   batch_callback's fenced-out check (BFS01)     conformance_03_rollback
 *                                                 test_fence_fails_callback
 *   batch_verdict BFB01, rows changed > bound     verdict_touched_over_bound (here, through the
 *                                                 loop: the key's unique index dropped after the
 *                                                 claim checked it); conformance_02 calls the
 *                                                 function directly
 *   batch_verdict BFB01, keys selected > bound    verdict_selected_over_bound (here, on the
 *                                                 function: the loop's keyset LIMIT, proved by
 *                                                 conformance_02_bounded_batch, keeps a step from
 *                                                 reaching it)
 *
 * In production every claim and every operator action advances the generation, so a lifecycle,
 * owner or checkpoint change under a batch in flight always comes with a new generation; the
 * lifecycle, owner and CAS conditions matter against a writer that bypasses the engine (or a
 * copy of a claim), and that is the writer their cases use: while the batch waits on a barrier
 * inside its transaction, the test changes that one column of the backfill row.
 *
 * scripts/guard-mutants.sh disables each guard in turn in a copy of the source tree and checks
 * that this suite (and, for the fence, the suites named above) then fails.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bt.h"

#define ID_PENDING   "guards.pending_v1"
#define ID_PAUSED    "guards.paused_v1"
#define ID_RUNNING   "guards.running_v1"
#define ID_COMPLETED "guards.completed_v1"
#define ID_WATCHED   "guards.watched_v1" /* watch_writers = on: its watch and old_writer rows */
#define REQUEST_ID   "guards-start-completed"

#define ID_F_LIFECYCLE "fence.lifecycle_v1"
#define ID_F_OWNER     "fence.owner_v1"
#define ID_F_CAS       "fence.cas_v1"
#define ID_F_ID_A      "fence.id_a_v1"
#define ID_F_ID_B      "fence.id_b_v1"
#define ID_F_CB_OLD    "fence.cb_after_old_v1"
#define ID_F_CB_BOUND  "fence.cb_within_bound_v1"
#define ID_F_OVER      "fence.over_bound_v1"

/* barrier keys (bt_barrier) */
#define KEY_LIFECYCLE 801
#define KEY_OWNER     802
#define KEY_CAS       803
#define STR_(x)       #x
#define STR(x)        STR_(x)

/* ---- definitions ------------------------------------------------------------------------ */

#define ITEMS_DEF(var, stable_id, tbl)                                                             \
    static const bf_definition var = {                                                             \
        .id = stable_id,                                                                           \
        .table = tbl,                                                                              \
        .key = {{"id", BF_KEY_BIGINT}},                                                            \
        .nkey = 1,                                                                                 \
        .batch_size = 10,                                                                          \
        .needs_repair = "t.fixed IS NULL",                                                         \
        .update_set = "fixed = t.val * 2, counter = t.counter + 1",                                \
    }

ITEMS_DEF(def_pending, ID_PENDING, "g_pending");
ITEMS_DEF(def_paused, ID_PAUSED, "g_paused");
ITEMS_DEF(def_running, ID_RUNNING, "g_running");
ITEMS_DEF(def_completed, ID_COMPLETED, "g_completed");
/* completed with its old-writer watch (schema version 10): one old write counted while it ran */
static const bf_definition def_watched = {
    .id = ID_WATCHED,
    .table = "g_watched",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2, counter = t.counter + 1",
    .watch_writers = BF_WATCH_ON,
};
ITEMS_DEF(def_id_a, ID_F_ID_A, "f_id_a");
ITEMS_DEF(def_id_b, ID_F_ID_B, "f_id_b");
ITEMS_DEF(def_over, ID_F_OVER, "f_over");

/* Batches that wait on their barrier (while the test holds it) inside their mutation. */
#define PARKED_SET(barrier)                                                                        \
    "counter = t.counter + 1,"                                                                     \
    " fixed = CASE WHEN public.bt_barrier(" STR(barrier) ") THEN t.val * 2 END"
#define PARKED_DEF(var, stable_id, tbl, barrier)                                                   \
    static const bf_definition var = {                                                             \
        .id = stable_id,                                                                           \
        .table = tbl,                                                                              \
        .key = {{"id", BF_KEY_BIGINT}},                                                            \
        .nkey = 1,                                                                                 \
        .batch_size = 10,                                                                          \
        .needs_repair = "t.fixed IS NULL",                                                         \
        .update_set = PARKED_SET(barrier),                                                         \
    }

PARKED_DEF(def_lifecycle, ID_F_LIFECYCLE, "f_lifecycle", KEY_LIFECYCLE);
PARKED_DEF(def_owner, ID_F_OWNER, "f_owner", KEY_OWNER);
PARKED_DEF(def_cas, ID_F_CAS, "f_cas", KEY_CAS);

/* A callback that, once told to, also rewrites the batch's keys in bf_batch after mutating its
 * rows, as a buggy callback using bf_batch as scratch space would: the fence computes the new
 * checkpoint from bf_batch, so it must refuse one that is not after the old checkpoint or is
 * beyond the bound. */
typedef enum cb_mode { CB_HONEST, CB_REWIND, CB_BEYOND_BOUND } cb_mode;

typedef struct cb_arg {
    const char *table;
    cb_mode mode;
} cb_arg;

static cb_arg cb_after_old = {"f_cb_old", CB_HONEST};
static cb_arg cb_within_bound = {"f_cb_bound", CB_HONEST};

static bf_err cb_mutate(bf_txn *txn, void *arg)
{
    const cb_arg *a = arg;
    char sql[256];
    snprintf(sql, sizeof sql,
             "UPDATE %s t SET fixed = t.val * 2, counter = t.counter + 1 FROM bf_batch b"
             " WHERE t.id = b.id AND t.fixed IS NULL",
             a->table);
    bf_err err = bf_txn_exec(txn, sql, 0, NULL, NULL);
    if (err == BF_OK && a->mode == CB_REWIND) /* the batch's last key becomes 5 */
        err = bf_txn_exec(txn,
                          "DO $$BEGIN DELETE FROM bf_batch; INSERT INTO bf_batch VALUES (5); END$$",
                          0, NULL, NULL);
    if (err == BF_OK && a->mode == CB_BEYOND_BOUND) /* the bound is 30 */
        err =
            bf_txn_exec(txn, "DO $$BEGIN INSERT INTO bf_batch VALUES (1000); END$$", 0, NULL, NULL);
    return err;
}

static const bf_definition def_cb_old = {
    .id = ID_F_CB_OLD,
    .table = "f_cb_old",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .mutate = cb_mutate,
    .arg = &cb_after_old,
};

static const bf_definition def_cb_bound = {
    .id = ID_F_CB_BOUND,
    .table = "f_cb_bound",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .mutate = cb_mutate,
    .arg = &cb_within_bound,
};

static const bf_definition *const defs[] = {
    &def_pending, &def_paused, &def_running, &def_completed, &def_lifecycle, &def_owner,   &def_cas,
    &def_id_a,    &def_id_b,   &def_cb_old,  &def_cb_bound,  &def_over,      &def_watched,
};

static const bf_actor operator_who = {.actor = "test-operator", .authority = "test"};

static bf_registry *reg;
static bf_engine *op;            /* the operator's engine */
static bf_engine *holder_engine; /* holds the claim of ID_RUNNING for the whole suite */
static bf_worker *holder;
static PGconn *conn;

/* ---- the guards ------------------------------------------------------------------------- */

typedef enum guard_kind { GUARD_CHECK, GUARD_TRIGGER } guard_kind;

#define MAX_REFUSED 16

typedef struct guard_case {
    const char *table; /* of the buzz_backfill schema */
    const char *name;  /* constraint or trigger */
    guard_kind kind;
    const char *sqlstate;
    const char *message; /* a trigger's primary message */
    /* refused writes (a trigger's first one is refused by that trigger alone), and the
     * near-identical legal write, which is accepted and changes one row */
    const char *refused[MAX_REFUSED];
    const char *legal;
} guard_case;

#define SET_ROW(set, id) "UPDATE buzz_backfill.backfill SET " set " WHERE id = '" id "'"
#define AUDIT_ROW(cols, values)                                                                    \
    "INSERT INTO buzz_backfill.audit (" cols ") VALUES ('" ID_RUNNING "', " values ")"
#define SET_REQUEST(set)                                                                           \
    "UPDATE buzz_backfill.request SET " set " WHERE request_id = '" REQUEST_ID "'"
/* the progress of ID_COMPLETED's lifecycle validation (schema version 9), its worker's */
#define SET_PROGRESS(set)                                                                          \
    "UPDATE buzz_backfill.validation_progress SET " set " WHERE backfill_id = '" ID_COMPLETED "'"
/* the watch and the one old_writer row of ID_WATCHED (schema version 10) */
#define SET_WATCH(set) "UPDATE buzz_backfill.watch SET " set " WHERE backfill_id = '" ID_WATCHED "'"
#define SET_OLD_WRITER(set)                                                                        \
    "UPDATE buzz_backfill.old_writer SET " set " WHERE backfill_id = '" ID_WATCHED "'"
#define FIRST_AUDIT                                                                                \
    "(SELECT min(seq) FROM buzz_backfill.audit WHERE backfill_id = '" ID_COMPLETED "')"

#define CHECK_CASE(tbl, cname, ...)                                                                \
    {                                                                                              \
        .table = tbl, .name = cname, .kind = GUARD_CHECK, .sqlstate = "23514", __VA_ARGS__         \
    }

static const guard_case guards[] = {
    /* ---- backfill: one compact row per stable ID, text bounded ---- */
    /* backfill_id_check: stable IDs match [a-z][a-z0-9_.-]{2,62} */
    CHECK_CASE("backfill", "backfill_id_check",
               .refused = {SET_ROW("id = 'Guards.pending_v1'", ID_PENDING),
                           SET_ROW("id = 'gu'", ID_PENDING),
                           SET_ROW("id = 'g' || repeat('x', 63)", ID_PENDING)},
               .legal = SET_ROW("id = 'g' || repeat('x', 62)", ID_PENDING)),
    /* backfill_state_check: only the spec's seven states (no cancellation state) */
    CHECK_CASE("backfill", "backfill_state_check",
               .refused = {SET_ROW("state = 'cancelled'", ID_PAUSED)},
               .legal = SET_ROW("state = 'running'", ID_PAUSED)),
    /* backfill_key_types_check: 1..95 bytes */
    CHECK_CASE("backfill", "backfill_key_types_check",
               .refused = {SET_ROW("key_types = ''", ID_PENDING),
                           SET_ROW("key_types = repeat('k', 96)", ID_PENDING)},
               .legal = SET_ROW("key_types = repeat('k', 95)", ID_PENDING)),
    /* backfill_batch_size_check: 1..100000 */
    CHECK_CASE("backfill", "backfill_batch_size_check",
               .refused = {SET_ROW("batch_size = 0", ID_PENDING),
                           SET_ROW("batch_size = 100001", ID_PENDING)},
               .legal = SET_ROW("batch_size = 100000", ID_PENDING)),
    /* backfill_description_check, _owner_meta_check, _revision_check: at most 200 bytes */
    CHECK_CASE("backfill", "backfill_description_check",
               .refused = {SET_ROW("description = repeat('d', 201)", ID_PENDING)},
               .legal = SET_ROW("description = repeat('d', 200)", ID_PENDING)),
    CHECK_CASE("backfill", "backfill_owner_meta_check",
               .refused = {SET_ROW("owner_meta = repeat('o', 201)", ID_PENDING)},
               .legal = SET_ROW("owner_meta = repeat('o', 200)", ID_PENDING)),
    CHECK_CASE("backfill", "backfill_revision_check",
               .refused = {SET_ROW("revision = repeat('r', 201)", ID_PENDING)},
               .legal = SET_ROW("revision = repeat('r', 200)", ID_PENDING)),
    /* backfill_generation_check: never negative */
    CHECK_CASE("backfill", "backfill_generation_check",
               .refused = {SET_ROW("generation = -1", ID_PAUSED)},
               .legal = SET_ROW("generation = 0", ID_PAUSED)),
    /* backfill_claim_owner_check: under 128 bytes (BF_OWNER_MAX) */
    CHECK_CASE("backfill", "backfill_claim_owner_check",
               .refused = {SET_ROW("claim_owner = repeat('w', 128)", ID_RUNNING)},
               .legal = SET_ROW("claim_owner = repeat('w', 127)", ID_RUNNING)),
    /* backfill_attempts_check: never negative */
    CHECK_CASE("backfill", "backfill_attempts_check",
               .refused = {SET_ROW("attempts = -1", ID_RUNNING)},
               .legal = SET_ROW("attempts = 0", ID_RUNNING)),
    /* backfill_error_class_check: under 32 bytes; backfill_error_detail_check: under 512 */
    CHECK_CASE("backfill", "backfill_error_class_check",
               .refused = {SET_ROW("error_class = repeat('e', 32)", ID_RUNNING)},
               .legal = SET_ROW("error_class = repeat('e', 31)", ID_RUNNING)),
    CHECK_CASE("backfill", "backfill_error_detail_check",
               .refused = {SET_ROW("error_detail = repeat('e', 512)", ID_RUNNING)},
               .legal = SET_ROW("error_detail = repeat('e', 511)", ID_RUNNING)),
    /* backfill_validation_outcome_check: success, failure or current-state */
    CHECK_CASE("backfill", "backfill_validation_outcome_check",
               .refused = {SET_ROW("validation_outcome = 'maybe'", ID_RUNNING)},
               .legal = SET_ROW("validation_outcome = 'failure'", ID_RUNNING)),
    /* backfill_validation_detail_check: under 512 bytes; _validation_request_check: under 64 */
    CHECK_CASE("backfill", "backfill_validation_detail_check",
               .refused = {SET_ROW("validation_detail = repeat('v', 512)", ID_RUNNING)},
               .legal = SET_ROW("validation_detail = repeat('v', 511)", ID_RUNNING)),
    CHECK_CASE("backfill", "backfill_validation_request_check",
               .refused = {SET_ROW("validation_request = repeat('q', 64)", ID_RUNNING)},
               .legal = SET_ROW("validation_request = repeat('q', 63)", ID_RUNNING)),
    /* backfill_rows_covered_check: never negative */
    CHECK_CASE("backfill", "backfill_rows_covered_check",
               .refused = {SET_ROW("rows_covered = -1", ID_RUNNING)},
               .legal = SET_ROW("rows_covered = 0", ID_RUNNING)),
    /* backfill_check: leaving pending captures the bound or its emptiness (bound_empty) */
    CHECK_CASE("backfill", "backfill_check",
               .refused = {SET_ROW("state = 'running'", ID_PENDING),
                           SET_ROW("bound_empty = false", ID_PENDING)},
               .legal = SET_ROW("state = 'running', bound_empty = true", ID_PENDING)),
    /* backfill_check1: a bound exists only for a source set that is not empty */
    CHECK_CASE("backfill", "backfill_check1",
               .refused = {SET_ROW("state = 'running', bound_empty = true, bound = ARRAY['10']",
                                   ID_PENDING)},
               .legal = SET_ROW("state = 'running', bound_empty = false, bound = ARRAY['10']",
                                ID_PENDING)),
    /* backfill_check2: a claim has both an owner and an expiry */
    CHECK_CASE("backfill", "backfill_check2",
               .refused = {SET_ROW("claim_expires_at = NULL", ID_RUNNING),
                           SET_ROW("claim_owner = NULL", ID_RUNNING)},
               .legal = SET_ROW("claim_owner = NULL, claim_expires_at = NULL", ID_RUNNING)),
    /* backfill_check3: only a running or validating row holds a claim */
    CHECK_CASE("backfill", "backfill_check3", .refused = {SET_ROW("state = 'paused'", ID_RUNNING)},
               .legal = SET_ROW("state = 'paused', claim_owner = NULL, claim_expires_at = NULL",
                                ID_RUNNING)),
    /* bound_text_length: the bound's text[] form is under 512 bytes (BF_KEY_TEXT_MAX): here
     * '{' + 510 digits + '}' is 512 bytes, refused, and 511 bytes are accepted */
    CHECK_CASE("backfill", "bound_text_length",
               .refused = {SET_ROW("state = 'running', bound_empty = false,"
                                   " bound = ARRAY[repeat('9', 510)]",
                                   ID_PENDING)},
               .legal = SET_ROW("state = 'running', bound_empty = false,"
                                " bound = ARRAY[repeat('9', 509)]",
                                ID_PENDING)),
    /* checkpoint_text_length: likewise the checkpoint */
    CHECK_CASE("backfill", "checkpoint_text_length",
               .refused = {SET_ROW("checkpoint = ARRAY[repeat('9', 510)]", ID_RUNNING)},
               .legal = SET_ROW("checkpoint = ARRAY[repeat('9', 509)]", ID_RUNNING)),
    /* throttling state (schema version 6): an adaptive batch size is at least one key */
    CHECK_CASE("backfill", "batch_size_current_positive",
               .refused = {SET_ROW("batch_size_current = 0", ID_RUNNING)},
               .legal = SET_ROW("batch_size_current = 1", ID_RUNNING)),
    /* throttle_signal_length, throttle_value_length: bounded like every stored text */
    CHECK_CASE("backfill", "throttle_signal_length",
               .refused = {SET_ROW("throttle_signal = repeat('s', 24),"
                                   " throttled_since = clock_timestamp()",
                                   ID_RUNNING)},
               .legal = SET_ROW("throttle_signal = repeat('s', 23),"
                                " throttled_since = clock_timestamp()",
                                ID_RUNNING)),
    CHECK_CASE("backfill", "throttle_value_length",
               .refused = {SET_ROW("throttle_value = repeat('v', 64)", ID_RUNNING)},
               .legal = SET_ROW("throttle_value = repeat('v', 63)", ID_RUNNING)),
    /* throttle_since: a throttle signal and its start come together */
    CHECK_CASE("backfill", "throttle_since",
               .refused = {SET_ROW("throttle_signal = 'rate'", ID_RUNNING),
                           SET_ROW("throttled_since = clock_timestamp()", ID_RUNNING)},
               .legal = SET_ROW("throttle_signal = 'rate', throttled_since = clock_timestamp()",
                                ID_RUNNING)),
    /* slow state (schema version 7): bounded, and a value and its start come together */
    CHECK_CASE("backfill", "slow_value_length",
               .refused = {SET_ROW("slow_value = repeat('v', 64), slow_since = clock_timestamp()",
                                   ID_RUNNING)},
               .legal = SET_ROW("slow_value = repeat('v', 63), slow_since = clock_timestamp()",
                                ID_RUNNING)),
    CHECK_CASE("backfill", "slow_since",
               .refused = {SET_ROW("slow_value = 'batch 1 s, median 1 ms'", ID_RUNNING),
                           SET_ROW("slow_since = clock_timestamp()", ID_RUNNING)},
               .legal = SET_ROW("slow_value = 'batch 1 s, median 1 ms',"
                                " slow_since = clock_timestamp()",
                                ID_RUNNING)),
    /* definition_digest (schema version 8): 64 lower-case hex digits */
    CHECK_CASE("backfill", "definition_digest_format",
               .refused = {SET_ROW("definition_digest = repeat('a', 63)", ID_RUNNING),
                           SET_ROW("definition_digest = repeat('A', 64)", ID_RUNNING)},
               .legal = SET_ROW("definition_digest = repeat('a', 64)", ID_RUNNING)),

    /* ---- audit: appended rows, text bounded ---- */
    /* audit_backfill_id_check: at most 80 bytes (the row's own backfill_id, not ID_RUNNING) */
    CHECK_CASE("audit", "audit_backfill_id_check",
               .refused = {"INSERT INTO buzz_backfill.audit (backfill_id, action, authority,"
                           " outcome) VALUES (repeat('b', 81), 'pause', 'test', 'rejected')"},
               .legal = "INSERT INTO buzz_backfill.audit (backfill_id, action, authority, outcome)"
                        " VALUES (repeat('b', 80), 'pause', 'test', 'rejected')"),
    /* audit_action_check: under 24 bytes */
    CHECK_CASE("audit", "audit_action_check",
               .refused = {AUDIT_ROW("backfill_id, action, authority, outcome",
                                     "repeat('a', 24), 'test', 'rejected'")},
               .legal = AUDIT_ROW("backfill_id, action, authority, outcome",
                                  "repeat('a', 23), 'test', 'rejected'")),
    /* audit_actor_check, audit_authority_check: under 128 bytes */
    CHECK_CASE("audit", "audit_actor_check",
               .refused = {AUDIT_ROW("backfill_id, action, actor, authority, outcome",
                                     "'pause', repeat('a', 128), 'test', 'rejected'")},
               .legal = AUDIT_ROW("backfill_id, action, actor, authority, outcome",
                                  "'pause', repeat('a', 127), 'test', 'rejected'")),
    CHECK_CASE("audit", "audit_authority_check",
               .refused = {AUDIT_ROW("backfill_id, action, authority, outcome",
                                     "'pause', repeat('a', 128), 'rejected'")},
               .legal = AUDIT_ROW("backfill_id, action, authority, outcome",
                                  "'pause', repeat('a', 127), 'rejected'")),
    /* audit_request_id_check: under 64 bytes */
    CHECK_CASE("audit", "audit_request_id_check",
               .refused = {AUDIT_ROW("backfill_id, action, authority, request_id, outcome",
                                     "'pause', 'test', repeat('q', 64), 'rejected'")},
               .legal = AUDIT_ROW("backfill_id, action, authority, request_id, outcome",
                                  "'pause', 'test', repeat('q', 63), 'rejected'")),
    /* audit_outcome_check: under 512 bytes */
    CHECK_CASE("audit", "audit_outcome_check",
               .refused = {AUDIT_ROW("backfill_id, action, authority, outcome",
                                     "'pause', 'test', repeat('o', 512)")},
               .legal = AUDIT_ROW("backfill_id, action, authority, outcome",
                                  "'pause', 'test', repeat('o', 511)")),
    /* audit_count_positive: a coalesced row counts at least one attempt (the window is valid,
     * so audit_window does not refuse count 0) */
    CHECK_CASE("audit", "audit_count_positive",
               .refused = {AUDIT_ROW("backfill_id, action, authority, outcome, count,"
                                     " window_start, window_end",
                                     "'pause', 'test', 'rejected', 0,"
                                     " now() - interval '1 minute', now()")},
               .legal = AUDIT_ROW("backfill_id, action, authority, outcome, count,"
                                  " window_start, window_end",
                                  "'pause', 'test', 'rejected', 1,"
                                  " now() - interval '1 minute', now()")),
    /* audit_window: a count above one needs a window; start and end come together, in order */
    CHECK_CASE("audit", "audit_window",
               .refused = {AUDIT_ROW("backfill_id, action, authority, outcome, count,"
                                     " window_start, window_end",
                                     "'pause', 'test', 'rejected', 5, NULL, NULL"),
                           AUDIT_ROW("backfill_id, action, authority, outcome, count,"
                                     " window_start, window_end",
                                     "'pause', 'test', 'rejected', 5, now(), NULL"),
                           AUDIT_ROW("backfill_id, action, authority, outcome, count,"
                                     " window_start, window_end",
                                     "'pause', 'test', 'rejected', 5, NULL, now()"),
                           AUDIT_ROW("backfill_id, action, authority, outcome, count,"
                                     " window_start, window_end",
                                     "'pause', 'test', 'rejected', 5, now(),"
                                     " now() - interval '1 minute'")},
               .legal = AUDIT_ROW("backfill_id, action, authority, outcome, count,"
                                  " window_start, window_end",
                                  "'pause', 'test', 'rejected', 5, now() - interval '1 minute',"
                                  " now()")),

    /* ---- request: idempotency records, text bounded (the engine wrote REQUEST_ID) ---- */
    /* request_request_id_check: 1..63 bytes */
    CHECK_CASE(
        "request", "request_request_id_check",
        .refused = {SET_REQUEST("request_id = ''"), SET_REQUEST("request_id = repeat('q', 64)")},
        .legal = SET_REQUEST("request_id = repeat('q', 63)")),
    /* request_action_check: under 24 bytes */
    CHECK_CASE("request", "request_action_check",
               .refused = {SET_REQUEST("action = repeat('a', 24)")},
               .legal = SET_REQUEST("action = repeat('a', 23)")),
    /* request_backfill_id_check: at most 80 bytes */
    CHECK_CASE("request", "request_backfill_id_check",
               .refused = {SET_REQUEST("backfill_id = repeat('b', 81)")},
               .legal = SET_REQUEST("backfill_id = repeat('b', 80)")),
    /* request_detail_check: under 512 bytes */
    CHECK_CASE("request", "request_detail_check",
               .refused = {SET_REQUEST("detail = repeat('d', 512)")},
               .legal = SET_REQUEST("detail = repeat('d', 511)")),

    /* ---- validation_progress: a validator's own record, text bounded ---- */
    /* validation_progress_owner_check: under 128 bytes, like a claim owner */
    CHECK_CASE("validation_progress", "validation_progress_owner_check",
               .refused = {SET_PROGRESS("owner = repeat('o', 128)")},
               .legal = SET_PROGRESS("owner = repeat('o', 127)")),

    /* ---- watch, old_writer: the old-writer watchdog's records, text bounded ---- */
    /* watch_table_name_check: under 300 bytes (a quoted schema.table) */
    CHECK_CASE("watch", "watch_table_name_check",
               .refused = {SET_WATCH("table_name = repeat('t', 300)")},
               .legal = SET_WATCH("table_name = repeat('t', 299)")),
    /* watch_trigger_name_check: under 64 bytes, an identifier */
    CHECK_CASE("watch", "watch_trigger_name_check",
               .refused = {SET_WATCH("trigger_name = repeat('g', 64)")},
               .legal = SET_WATCH("trigger_name = repeat('g', 63)")),
    /* watch_mode_check: 'on' or 'heal' (an off watch has no row) */
    CHECK_CASE("watch", "watch_mode_check",
               .refused = {SET_WATCH("mode = 'off'"), SET_WATCH("mode = 'default'")},
               .legal = SET_WATCH("mode = 'heal'")),
    /* old_writer_application_name_check: under 256 bytes */
    CHECK_CASE("old_writer", "old_writer_application_name_check",
               .refused = {SET_OLD_WRITER("application_name = repeat('a', 256)")},
               .legal = SET_OLD_WRITER("application_name = repeat('a', 255)")),
    /* old_writer_client_addr_check: under 64 bytes */
    CHECK_CASE("old_writer", "old_writer_client_addr_check",
               .refused = {SET_OLD_WRITER("client_addr = repeat('c', 64)")},
               .legal = SET_OLD_WRITER("client_addr = repeat('c', 63)")),
    /* old_writer_role_name_check: under 256 bytes */
    CHECK_CASE("old_writer", "old_writer_role_name_check",
               .refused = {SET_OLD_WRITER("role_name = repeat('r', 256)")},
               .legal = SET_OLD_WRITER("role_name = repeat('r', 255)")),

    /* ---- triggers ---- */
    /* guard_1_completed: a completed row's execution state never changes (every column of its
     * WHEN clause); what a revalidation records still may */
    {.table = "backfill",
     .name = "guard_1_completed",
     .kind = GUARD_TRIGGER,
     .sqlstate = "BFI01",
     .message = "completed backfill is immutable",
     .refused = {SET_ROW("checkpoint = ARRAY['5']", ID_COMPLETED),
                 SET_ROW("state = 'running'", ID_COMPLETED),
                 SET_ROW("bound = ARRAY['5']", ID_COMPLETED),
                 SET_ROW("bound_empty = true", ID_COMPLETED),
                 SET_ROW("generation = generation + 1", ID_COMPLETED),
                 SET_ROW("claim_owner = 'w', claim_expires_at = now()", ID_COMPLETED),
                 SET_ROW("rows_committed = rows_committed + 1", ID_COMPLETED),
                 SET_ROW("rows_covered = rows_covered + 1", ID_COMPLETED),
                 SET_ROW("batches_committed = batches_committed + 1", ID_COMPLETED),
                 SET_ROW("started_at = now()", ID_COMPLETED),
                 SET_ROW("completed_at = now()", ID_COMPLETED),
                 SET_ROW("key_types = 'integer'", ID_COMPLETED),
                 SET_ROW("id = 'guards.renamed_v1'", ID_COMPLETED)},
     .legal = SET_ROW("validation_outcome = 'failure', validation_detail = 'revalidated',"
                      " validated_at = now(), updated_at = now()",
                      ID_COMPLETED)},
    /* guard_1_completed_delete: a completed row is never deleted (another row can be) */
    {.table = "backfill",
     .name = "guard_1_completed_delete",
     .kind = GUARD_TRIGGER,
     .sqlstate = "BFI01",
     .message = "completed backfill is immutable",
     .refused = {"DELETE FROM buzz_backfill.backfill WHERE id = '" ID_COMPLETED "'"},
     .legal = "DELETE FROM buzz_backfill.backfill WHERE id = '" ID_PAUSED "'"},
    /* guard_2_bound: a captured bound (or captured emptiness) never changes; writing it back
     * unchanged is no change */
    {.table = "backfill",
     .name = "guard_2_bound",
     .kind = GUARD_TRIGGER,
     .sqlstate = "BFI02",
     .message = "captured bound is immutable",
     .refused = {SET_ROW("bound = ARRAY['29']", ID_RUNNING),
                 SET_ROW("bound = NULL, bound_empty = true", ID_RUNNING),
                 SET_ROW("bound = ARRAY['31']", ID_PAUSED)},
     .legal = SET_ROW("bound = ARRAY['30'], bound_empty = false", ID_RUNNING)},
    /* guard_3_truncate: the backfill table is never truncated (completed rows are permanent);
     * deleting an unfinished row is a legal write */
    {.table = "backfill",
     .name = "guard_3_truncate",
     .kind = GUARD_TRIGGER,
     .sqlstate = "BFI01",
     .message = "completed backfills are permanent: no TRUNCATE",
     .refused = {"TRUNCATE buzz_backfill.backfill"},
     .legal = "DELETE FROM buzz_backfill.backfill WHERE id = '" ID_PAUSED "'"},
    /* audit_no_truncate: the audit is never truncated; the same statement on the request
     * table, which has no such guard, is legal */
    {.table = "audit",
     .name = "audit_no_truncate",
     .kind = GUARD_TRIGGER,
     .sqlstate = "BFI03",
     .message = "audit is append-only",
     .refused = {"TRUNCATE buzz_backfill.audit"},
     .legal = "TRUNCATE buzz_backfill.request"},
    /* audit_append_only: audit rows are never updated or deleted; appending is the one write */
    {.table = "audit",
     .name = "audit_append_only",
     .kind = GUARD_TRIGGER,
     .sqlstate = "BFI03",
     .message = "audit is append-only",
     .refused = {"UPDATE buzz_backfill.audit SET outcome = 'rewritten' WHERE seq = " FIRST_AUDIT,
                 "DELETE FROM buzz_backfill.audit WHERE seq = " FIRST_AUDIT},
     .legal = "INSERT INTO buzz_backfill.audit (backfill_id, action, authority, outcome)"
              " SELECT backfill_id, action, authority, 'rewritten' FROM buzz_backfill.audit"
              " WHERE seq = " FIRST_AUDIT},
};

#define NGUARDS (sizeof guards / sizeof guards[0])

/* ---- setup: every state made through the engine ----------------------------------------- */

static void start(const char *id)
{
    assert_int_equal(bt_act(op, BF_ACTION_START, id), BF_OK);
}

static int setup(void **state)
{
    (void)state;
    bt_db_create("db_guards");
    conn = bt_connect();
    bt_install_barrier(conn);
    bt_make_items(conn, "g_pending", 10);
    bt_make_items(conn, "g_paused", 30);
    bt_make_items(conn, "g_running", 30);
    bt_make_items(conn, "g_completed", 20);
    bt_make_items(conn, "g_watched", 20);
    bt_make_items(conn, "f_lifecycle", 30);
    bt_make_items(conn, "f_owner", 30);
    bt_make_items(conn, "f_cas", 40);
    bt_make_items(conn, "f_id_a", 30);
    bt_make_items(conn, "f_id_b", 30);
    bt_make_items(conn, "f_cb_old", 30);
    bt_make_items(conn, "f_cb_bound", 30);
    bt_make_items(conn, "f_over", 30);
    reg = bt_registry(defs, sizeof defs / sizeof defs[0]);
    op = bt_engine(reg, "operator", 0);
    assert_int_equal(bf_register_all(op), BF_OK);

    /* paused: one batch committed (bound {30}, checkpoint {10}), then paused */
    start(ID_PAUSED);
    bf_engine *we = bt_engine(reg, "guards-worker", 30000);
    bf_worker *w = bt_claimed_worker(we, ID_PAUSED);
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    assert_int_equal(bt_act(op, BF_ACTION_PAUSE, ID_PAUSED), BF_OK);
    bf_worker_free(w);

    /* completed, started with a request ID (the request record the request cases change) */
    bf_actor who = operator_who;
    who.request_id = REQUEST_ID;
    bf_action_result res;
    assert_int_equal(bf_action_apply(op, BF_ACTION_START, ID_COMPLETED, &who, &res), BF_OK);
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);
    assert_int_equal(bf_worker_run(w, true), BF_OK);
    bf_worker_free(w);
    assert_int_equal(bt_get(op, ID_COMPLETED).state, BF_STATE_COMPLETED);

    /* watched: started (its trigger installed), one old write of a row the batches then
     * repair, completed (the watch removed, its record and the count kept) */
    start(ID_WATCHED);
    PGconn *old = bt_connect();
    bt_exec(old, "SET application_name = 'guards-old-writer'");
    bt_exec(old, "UPDATE g_watched SET val = val + 1 WHERE id = 5");
    PQfinish(old);
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);
    assert_int_equal(bf_worker_run(w, true), BF_OK);
    bf_worker_free(w);
    assert_int_equal(bt_get(op, ID_WATCHED).state, BF_STATE_COMPLETED);
    assert_int_equal(
        bt_int(conn, "SELECT count(*) FROM buzz_backfill.old_writer WHERE backfill_id = '%s'",
               ID_WATCHED),
        1);
    bf_engine_close(we);

    /* running: one batch committed, the claim held (lease 10 min) until teardown */
    start(ID_RUNNING);
    holder_engine = bt_engine(reg, "guards-holder", 600000);
    holder = bt_claimed_worker(holder_engine, ID_RUNNING);
    assert_int_equal(bf_worker_step(holder, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    bf_backfill row = bt_get(op, ID_RUNNING);
    assert_true(row.claimed);
    assert_string_equal(row.bound, "30");
    assert_int_equal(bt_get(op, ID_PENDING).state, BF_STATE_PENDING);
    assert_int_equal(bt_get(op, ID_PAUSED).state, BF_STATE_PAUSED);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bf_worker_free(holder);
    bf_engine_close(holder_engine);
    bf_engine_close(op);
    PQfinish(conn);
    bt_db_drop_registry(reg);
    return 0;
}

/* ---- attempts --------------------------------------------------------------------------- */

/* Run sql in a transaction that is then rolled back; returns its result (caller clears). */
static PGresult *attempt(const char *sql)
{
    bt_exec(conn, "BEGIN");
    PGresult *r = PQexec(conn, sql);
    bt_exec(conn, "ROLLBACK");
    return r;
}

static const char *field_or(const PGresult *r, int code, const char *none)
{
    const char *v = PQresultErrorField(r, code);
    return v != NULL ? v : none;
}

/* The guard refuses sql: its SQLSTATE, and its constraint name or trigger message. */
static void expect_refused(const guard_case *g, const char *sql)
{
    PGresult *r = attempt(sql);
    if (PQresultStatus(r) != PGRES_FATAL_ERROR)
        fail_msg("%s did not refuse: %s", g->name, sql);
    const char *state = field_or(r, PG_DIAG_SQLSTATE, "(none)");
    const char *message = field_or(r, PG_DIAG_MESSAGE_PRIMARY, "(none)");
    if (strcmp(state, g->sqlstate) != 0)
        fail_msg("%s: %s refused with %s (%s), expected %s", g->name, sql, state, message,
                 g->sqlstate);
    if (g->kind == GUARD_CHECK) {
        assert_string_equal(field_or(r, PG_DIAG_CONSTRAINT_NAME, "(none)"), g->name);
        assert_string_equal(field_or(r, PG_DIAG_TABLE_NAME, "(none)"), g->table);
    } else {
        assert_string_equal(message, g->message);
    }
    PQclear(r);
}

/* sql succeeds and changes exactly one row (rolled back). */
/* The write succeeded and changed one row (a TRUNCATE reports no row count: it succeeded). */
static bool changed_one(const PGresult *r, const char *sql)
{
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        return false;
    return strncmp(sql, "TRUNCATE", 8) == 0 || strcmp(PQcmdTuples((PGresult *)r), "1") == 0;
}

static void expect_accepted(const guard_case *g, const char *sql)
{
    PGresult *r = attempt(sql);
    if (!changed_one(r, sql))
        fail_msg("%s: the legal write failed: %s: %s", g->name, sql, PQerrorMessage(conn));
    PQclear(r);
}

/* The refusal is the trigger's own: with only that trigger disabled (in a transaction rolled
 * back, so nobody else ever sees it disabled) the first refused write changes its row. */
static void expect_trigger_attributed(const guard_case *g)
{
    bt_exec(conn, "BEGIN");
    bt_exec(conn, "ALTER TABLE buzz_backfill.%s DISABLE TRIGGER %s", g->table, g->name);
    PGresult *r = PQexec(conn, g->refused[0]);
    bool ok = changed_one(r, g->refused[0]);
    if (!ok)
        fail_msg("%s: with the trigger disabled the write still fails: %s: %s", g->name,
                 g->refused[0], PQerrorMessage(conn));
    PQclear(r);
    bt_exec(conn, "ROLLBACK");
}

static void test_guard(void **state)
{
    const guard_case *g = *state;
    for (int i = 0; i < MAX_REFUSED && g->refused[i] != NULL; i++)
        expect_refused(g, g->refused[i]);
    expect_accepted(g, g->legal);
    if (g->kind == GUARD_TRIGGER)
        expect_trigger_attributed(g);
}

/* ---- (1) inventory ---------------------------------------------------------------------- */

static void test_inventory(void **state)
{
    (void)state;
    char known[8192] = "";
    size_t off = 0;
    for (size_t i = 0; i < NGUARDS; i++)
        off += (size_t)snprintf(known + off, sizeof known - off, "%s%s.%s %s", i ? "," : "",
                                guards[i].table, guards[i].name,
                                guards[i].kind == GUARD_CHECK ? "check" : "trigger");
    assert_true(off < sizeof known);
    /* a trigger that is disabled (or fires only for replication) guards nothing */
    PGresult *r = PQexecParams(
        conn,
        "WITH catalog AS ("
        "  SELECT c.relname || '.' || k.conname || ' check' AS guard FROM pg_constraint k"
        "  JOIN pg_class c ON c.oid = k.conrelid"
        "  WHERE k.contype = 'c' AND c.relnamespace = 'buzz_backfill'::regnamespace"
        "  UNION ALL SELECT c.relname || '.' || t.tgname || CASE WHEN t.tgenabled IN ('O', 'A')"
        "   THEN ' trigger' ELSE ' trigger (disabled)' END FROM pg_trigger t"
        "  JOIN pg_class c ON c.oid = t.tgrelid"
        "  WHERE NOT t.tgisinternal AND c.relnamespace = 'buzz_backfill'::regnamespace),"
        " known AS (SELECT unnest(string_to_array($1, ',')) AS guard)"
        " SELECT (SELECT string_agg(guard, ', ' ORDER BY guard)"
        "         FROM (SELECT guard FROM catalog EXCEPT SELECT guard FROM known) u),"
        "        (SELECT string_agg(guard, ', ' ORDER BY guard)"
        "         FROM (SELECT guard FROM known EXCEPT SELECT guard FROM catalog) m),"
        "        (SELECT count(*) FROM catalog)",
        1, NULL, (const char *const[]){known}, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    if (!PQgetisnull(r, 0, 0))
        fail_msg("guards without a case in this suite: %s", PQgetvalue(r, 0, 0));
    if (!PQgetisnull(r, 0, 1))
        fail_msg("guards this suite knows that the schema lacks: %s", PQgetvalue(r, 0, 1));
    assert_int_equal(strtol(PQgetvalue(r, 0, 2), NULL, 10), (long)NGUARDS);
    PQclear(r);
}

/* ---- (3) the fence ---------------------------------------------------------------------- */

/* The batch committed nothing: target rows after `done` unmutated, progress as before. */
static void expect_nothing_committed(const char *id, const char *table, const bf_backfill *before)
{
    bf_backfill row = bt_get(op, id);
    assert_int_equal(row.rows_committed, before->rows_committed);
    assert_int_equal(row.rows_covered, before->rows_covered);
    assert_int_equal(row.batches_committed, before->batches_committed);
    assert_int_equal(bt_int(conn, "SELECT coalesce(sum(counter), 0) FROM %s", table),
                     before->rows_committed);
}

/* A claimed worker of its own engine (owner given) with one batch committed: checkpoint {10}. */
static bf_worker *worker_after_one_batch(const char *id, const char *owner, bf_engine **engine_out)
{
    start(id);
    bf_engine *we = bt_engine(reg, owner, 30000);
    bf_worker *w = bt_claimed_worker(we, id);
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    assert_string_equal(info.checkpoint, "{10}");
    *engine_out = we;
    return w;
}

/* Park the worker's next batch on the barrier inside its mutation, run interference (NULL: none)
 * on the backfill row meanwhile, release the batch; returns the step's report. */
static bf_step_info step_parked(bf_worker *w, int key, const char *interference)
{
    bt_lock(conn, key);
    bt_step_thread t;
    bt_step_thread_start(&t, w, false);
    bt_wait_waiters(conn, key, 1);
    if (interference != NULL)
        bt_exec(conn, "%s", interference);
    bt_unlock(conn, key);
    bt_step_thread_join(&t, 60);
    assert_int_equal(t.err, BF_OK);
    return t.info;
}

/* A parked batch commits when nothing interferes (so the stale one below fails for its one
 * change only); then the next batch, parked, is made stale by `interference` and commits
 * nothing. Returns that step's report. */
static bf_step_info stale_batch_case(const char *id, const char *table, int key,
                                     const char *interference)
{
    bf_engine *we = NULL;
    bf_worker *w = worker_after_one_batch(id, "fence-worker", &we);
    bf_step_info info = step_parked(w, key, NULL);
    assert_int_equal(info.step, BF_STEP_BATCH);
    assert_string_equal(info.checkpoint, "{20}");

    bf_backfill before = bt_get(op, id);
    assert_true(before.claimed);
    info = step_parked(w, key, interference);
    assert_int_not_equal(info.step, BF_STEP_BATCH);
    expect_nothing_committed(id, table, &before);
    assert_int_equal(bt_int(conn, "SELECT count(*) FROM %s WHERE id > 20 AND fixed IS NULL", table),
                     bt_int(conn, "SELECT count(*) FROM %s WHERE id > 20", table));
    bf_worker_free(w);
    bf_engine_close(we);
    return info;
}

/* Guard: add_fence "f.state = 'running'". The row leaves running (to validating, which may
 * hold a claim) with the generation, owner, claim and checkpoint unchanged. */
static void test_fence_lifecycle(void **state)
{
    (void)state;
    stale_batch_case(ID_F_LIFECYCLE, "f_lifecycle", KEY_LIFECYCLE,
                     SET_ROW("state = 'validating'", ID_F_LIFECYCLE));
    assert_int_equal(bt_get(op, ID_F_LIFECYCLE).state, BF_STATE_VALIDATING);
    assert_string_equal(bt_get(op, ID_F_LIFECYCLE).checkpoint, "20");
}

/* Guard: add_fence "f.claim_owner = owner". Another owner holds the claim at the same
 * generation (a copied claim): only the owner differs. */
static void test_fence_owner(void **state)
{
    (void)state;
    stale_batch_case(ID_F_OWNER, "f_owner", KEY_OWNER,
                     SET_ROW("claim_owner = 'impostor'", ID_F_OWNER));
    bf_backfill row = bt_get(op, ID_F_OWNER);
    assert_string_equal(row.claim_owner, "impostor");
    assert_string_equal(row.checkpoint, "20");
}

/* Guard: add_fence's compare-and-swap "f.checkpoint IS NOT DISTINCT FROM old". Another writer
 * under the same claim moved the checkpoint through the bound ({40}) while the batch of keys
 * 21..30 was in flight: without the CAS that batch would commit a second application of its
 * rows and rewind the checkpoint to {30}. */
static void test_fence_checkpoint_cas(void **state)
{
    (void)state;
    stale_batch_case(ID_F_CAS, "f_cas", KEY_CAS, SET_ROW("checkpoint = ARRAY['40']", ID_F_CAS));
    bf_backfill row = bt_get(op, ID_F_CAS);
    assert_string_equal(row.checkpoint, "40"); /* never moved backward */
    assert_int_equal(bt_int(conn, "SELECT count(*) FROM f_cas WHERE counter > 0"), 20);
}

/* Guard: add_fence "f.id = id". Two processes with one owner identity (a restarted container
 * reusing host:pid) each hold the claim of another backfill at the same generation, both
 * before their first batch: A's fence must move A's row alone. */
static void test_fence_id(void **state)
{
    (void)state;
    start(ID_F_ID_A);
    start(ID_F_ID_B);
    bf_engine *ea = bt_engine(reg, "host:1", 30000);
    bf_engine *eb = bt_engine(reg, "host:1", 30000);
    bf_worker *wa = NULL, *wb = NULL;
    int64_t ga = 0, gb = 0;
    assert_int_equal(bf_worker_new(&wa, ea, NULL), BF_OK);
    assert_int_equal(bf_worker_new(&wb, eb, NULL), BF_OK);
    assert_int_equal(bf_worker_claim(wa, ID_F_ID_A, &ga), BF_OK);
    assert_int_equal(bf_worker_claim(wb, ID_F_ID_B, &gb), BF_OK);
    assert_int_equal(ga, gb); /* the same history: only the ID tells the rows apart */
    bf_backfill b_before = bt_get(op, ID_F_ID_B);
    assert_false(b_before.has_checkpoint);

    bf_step_info info;
    assert_int_equal(bf_worker_step(wa, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    assert_string_equal(bt_get(op, ID_F_ID_A).checkpoint, "10");
    bf_backfill b = bt_get(op, ID_F_ID_B);
    assert_false(b.has_checkpoint);
    assert_int_equal(b.batches_committed, 0);
    assert_int_equal(b.rows_committed, 0);
    assert_int_equal(b.rows_covered, 0);
    assert_int_equal(b.generation, gb);
    assert_int_equal(bt_int(conn, "SELECT coalesce(sum(counter), 0) FROM f_id_b"), 0);

    /* B's own batch starts from B's own (absent) checkpoint */
    assert_int_equal(bf_worker_step(wb, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    assert_string_equal(info.checkpoint, "{10}");
    bf_worker_free(wa);
    bf_worker_free(wb);
    bf_engine_close(ea);
    bf_engine_close(eb);
}

/* A callback batch after one honest one, its callback now in `mode`: commits nothing. */
static void callback_case(const char *id, cb_arg *arg, cb_mode mode)
{
    bf_engine *we = NULL;
    arg->mode = CB_HONEST;
    bf_worker *w = worker_after_one_batch(id, "fence-callback", &we);
    bf_backfill before = bt_get(op, id);
    arg->mode = mode;
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    arg->mode = CB_HONEST;
    assert_int_not_equal(info.step, BF_STEP_BATCH);
    expect_nothing_committed(id, arg->table, &before);
    assert_string_equal(bt_get(op, id).checkpoint, "10");
    bf_worker_free(w);
    bf_engine_close(we);
}

/* Guard: compile_fence "l > old checkpoint". The callback's bf_batch ends at key 5, before the
 * checkpoint {10}: the checkpoint would move backward. */
static void test_fence_callback_after_old(void **state)
{
    (void)state;
    callback_case(ID_F_CB_OLD, &cb_after_old, CB_REWIND);
}

/* Guard: compile_fence "l <= bound". The callback's bf_batch ends at key 1000, beyond the bound
 * {30}: the checkpoint would pass the bound. */
static void test_fence_callback_within_bound(void **state)
{
    (void)state;
    callback_case(ID_F_CB_BOUND, &cb_within_bound, CB_BEYOND_BOUND);
}

/* Guard: batch_verdict "touched > batch_limit" (BFB01), through the batch loop. The key's
 * unique index is checked once per claim (worker.c step_prerequisite); dropped after that, a
 * duplicate of the next batch's last key puts 11 rows in a key range of 10 keys, and only the
 * verdict keeps the batch within its bound. */
static void test_verdict_touched_over_bound(void **state)
{
    (void)state;
    bf_engine *we = NULL;
    bf_worker *w = worker_after_one_batch(ID_F_OVER, "fence-over", &we);
    bt_exec(conn, "ALTER TABLE f_over DROP CONSTRAINT f_over_pkey;"
                  "INSERT INTO f_over (id, val) VALUES (20, 20)");
    bf_backfill before = bt_get(op, ID_F_OVER);
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_FAILED);
    bf_backfill row = bt_get(op, ID_F_OVER);
    assert_int_equal(row.state, BF_STATE_FAILED);
    assert_string_equal(row.error_class, "batch_bound");
    assert_string_equal(row.checkpoint, "10");
    expect_nothing_committed(ID_F_OVER, "f_over", &before);
    bf_worker_free(w);
    bf_engine_close(we);
}

/* Guard: batch_verdict "selected > batch_limit" (BFB01), on the function itself: the loop's
 * keyset LIMIT keeps every step from reaching it (conformance_02 proves the LIMIT). One key
 * more than the bound is refused, the bound itself is not. */
static void test_verdict_selected_over_bound(void **state)
{
    (void)state;
    PGresult *r = attempt("SELECT buzz_backfill.batch_verdict(11, 10, 1, 10)");
    assert_int_equal(PQresultStatus(r), PGRES_FATAL_ERROR);
    assert_string_equal(field_or(r, PG_DIAG_SQLSTATE, "(none)"), "BFB01");
    PQclear(r);
    assert_int_equal(bt_int(conn, "SELECT buzz_backfill.batch_verdict(10, 10, 1, 10)"), 10);
}

int main(void)
{
    static const struct {
        const char *name;
        CMUnitTestFunction fn;
    } fence[] = {
        {"fence_id", test_fence_id},
        {"fence_lifecycle", test_fence_lifecycle},
        {"fence_owner", test_fence_owner},
        {"fence_checkpoint_cas", test_fence_checkpoint_cas},
        {"fence_callback_after_old", test_fence_callback_after_old},
        {"fence_callback_within_bound", test_fence_callback_within_bound},
        {"verdict_touched_over_bound", test_verdict_touched_over_bound},
        {"verdict_selected_over_bound", test_verdict_selected_over_bound},
    };
    struct CMUnitTest tests[1 + NGUARDS + sizeof fence / sizeof fence[0]];
    size_t n = 0;
    tests[n++] = (struct CMUnitTest){.name = "inventory", .test_func = test_inventory};
    for (size_t i = 0; i < NGUARDS; i++)
        tests[n++] = (struct CMUnitTest){
            .name = guards[i].name, .test_func = test_guard, .initial_state = (void *)&guards[i]};
    for (size_t i = 0; i < sizeof fence / sizeof fence[0]; i++)
        tests[n++] = (struct CMUnitTest){.name = fence[i].name, .test_func = fence[i].fn};
    return cmocka_run_group_tests(tests, setup, teardown);
}
