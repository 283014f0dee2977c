/*
 * migrate.c - the engine's own versioned schema (buzz_backfill), applied under an advisory lock.
 *
 * Each migration is append-only: once released its SQL never changes (the checksum of every
 * applied version is verified on each run), and a database at a version this binary does not
 * know is refused with BF_ERR_SCHEMA_TOO_NEW instead of being guessed at.
 */
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define MIGRATION_LOCK "SELECT pg_advisory_xact_lock(1111883776, 1)"

typedef struct migration {
    int version;
    const char *name;
    const char *sql;
} migration;

static const char m1_core[] =
    "CREATE TABLE buzz_backfill.backfill ("
    "  id text PRIMARY KEY CHECK (id ~ '^[a-z][a-z0-9_.-]{2,62}$'),"
    "  state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending','running','paused',"
    "    'blocked','failed','validating','completed')),"
    "  key_types text NOT NULL CHECK (octet_length(key_types) BETWEEN 1 AND 95),"
    "  batch_size integer NOT NULL CHECK (batch_size BETWEEN 1 AND 100000),"
    "  required boolean NOT NULL DEFAULT false,"
    "  description text NOT NULL DEFAULT '' CHECK (octet_length(description) <= 200),"
    "  owner_meta text NOT NULL DEFAULT '' CHECK (octet_length(owner_meta) <= 200),"
    "  revision text NOT NULL DEFAULT '' CHECK (octet_length(revision) <= 200),"
    "  bound text[],"
    "  bound_empty boolean,"
    "  checkpoint text[],"
    "  generation bigint NOT NULL DEFAULT 0 CHECK (generation >= 0),"
    "  claim_owner text CHECK (octet_length(claim_owner) < 128),"
    "  claim_expires_at timestamptz,"
    "  claimed_at timestamptz,"
    "  attempts integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),"
    "  next_attempt_at timestamptz,"
    "  error_class text CHECK (octet_length(error_class) < 32),"
    "  error_detail text CHECK (octet_length(error_detail) < 512),"
    "  error_at timestamptz,"
    "  validation_outcome text CHECK (validation_outcome IN ('success','failure','current-state')),"
    "  validation_detail text CHECK (octet_length(validation_detail) < 512),"
    "  validated_at timestamptz,"
    "  validation_request text CHECK (octet_length(validation_request) < 64),"
    "  rows_committed bigint NOT NULL DEFAULT 0,"
    "  batches_committed bigint NOT NULL DEFAULT 0,"
    "  source_estimate bigint,"
    "  registered_at timestamptz NOT NULL DEFAULT clock_timestamp(),"
    "  updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),"
    "  started_at timestamptz,"
    "  last_progress_at timestamptz,"
    "  completed_at timestamptz,"
    "  CHECK ((state = 'pending') = (bound_empty IS NULL)),"
    "  CHECK (bound IS NULL OR bound_empty = false),"
    "  CHECK ((claim_owner IS NULL) = (claim_expires_at IS NULL)),"
    "  CHECK (state IN ('running','validating') OR claim_owner IS NULL)"
    ");"
    "CREATE TABLE buzz_backfill.audit ("
    "  seq bigserial PRIMARY KEY,"
    "  at timestamptz NOT NULL DEFAULT clock_timestamp(),"
    "  backfill_id text CHECK (octet_length(backfill_id) <= 80),"
    "  action text NOT NULL CHECK (octet_length(action) < 24),"
    "  actor text CHECK (octet_length(actor) < 128),"
    "  authority text NOT NULL CHECK (octet_length(authority) < 128),"
    "  request_id text CHECK (octet_length(request_id) < 64),"
    "  prior_state text,"
    "  result_state text,"
    "  generation bigint,"
    "  outcome text NOT NULL CHECK (octet_length(outcome) < 512)"
    ");"
    "CREATE INDEX audit_backfill_seq ON buzz_backfill.audit (backfill_id, seq DESC);"
    /* the audit is append-only */
    "CREATE FUNCTION buzz_backfill.audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$"
    "BEGIN RAISE EXCEPTION 'audit is append-only' USING ERRCODE = 'BFI03'; END $$;"
    "CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON buzz_backfill.audit"
    "  FOR EACH ROW EXECUTE FUNCTION buzz_backfill.audit_append_only();"
    /* completed rows are immutable; a captured bound is never changed. The conditions are
     * trigger WHEN clauses, so ordinary updates (every batch's checkpoint) call no function;
     * triggers fire in name order, so a completed row reports BFI01 first */
    "CREATE FUNCTION buzz_backfill.reject_change() RETURNS trigger LANGUAGE plpgsql AS $$"
    "BEGIN RAISE EXCEPTION USING MESSAGE = TG_ARGV[0], ERRCODE = TG_ARGV[1]; END $$;"
    "CREATE TRIGGER guard_1_completed BEFORE UPDATE ON buzz_backfill.backfill FOR EACH ROW"
    "  WHEN (OLD.state = 'completed' AND"
    "     ROW(NEW.state, NEW.bound, NEW.bound_empty, NEW.checkpoint, NEW.generation,"
    "         NEW.claim_owner, NEW.rows_committed, NEW.batches_committed, NEW.started_at,"
    "         NEW.completed_at, NEW.key_types)"
    "     IS DISTINCT FROM"
    "     ROW(OLD.state, OLD.bound, OLD.bound_empty, OLD.checkpoint, OLD.generation,"
    "         OLD.claim_owner, OLD.rows_committed, OLD.batches_committed, OLD.started_at,"
    "         OLD.completed_at, OLD.key_types))"
    "  EXECUTE FUNCTION buzz_backfill.reject_change('completed backfill is immutable', 'BFI01');"
    "CREATE TRIGGER guard_1_completed_delete BEFORE DELETE ON buzz_backfill.backfill FOR EACH ROW"
    "  WHEN (OLD.state = 'completed')"
    "  EXECUTE FUNCTION buzz_backfill.reject_change('completed backfill is immutable', 'BFI01');"
    "CREATE TRIGGER guard_2_bound BEFORE UPDATE ON buzz_backfill.backfill FOR EACH ROW"
    "  WHEN (OLD.bound_empty IS NOT NULL AND"
    "     ROW(NEW.bound, NEW.bound_empty) IS DISTINCT FROM ROW(OLD.bound, OLD.bound_empty))"
    "  EXECUTE FUNCTION buzz_backfill.reject_change('captured bound is immutable', 'BFI02');"
    /* verdict of a declarative batch statement: raises to roll the whole batch back */
    "CREATE FUNCTION buzz_backfill.batch_verdict(selected bigint, touched bigint, fenced bigint,"
    "    batch_limit bigint) RETURNS bigint LANGUAGE plpgsql AS $$"
    "BEGIN"
    "  IF selected > batch_limit OR touched > batch_limit THEN"
    "    RAISE EXCEPTION 'batch exceeded its bound' USING ERRCODE = 'BFB01';"
    "  END IF;"
    "  IF selected > 0 AND fenced = 0 THEN"
    "    RAISE EXCEPTION 'claim or generation no longer current' USING ERRCODE = 'BFS01';"
    "  END IF;"
    "  RETURN touched;"
    "END $$;";

static const char m2_requests[] =
    "CREATE TABLE buzz_backfill.request ("
    "  request_id text PRIMARY KEY CHECK (octet_length(request_id) BETWEEN 1 AND 63),"
    "  action text NOT NULL CHECK (octet_length(action) < 24),"
    "  backfill_id text NOT NULL CHECK (octet_length(backfill_id) <= 80),"
    "  err integer,"
    "  changed boolean,"
    "  prior_state text,"
    "  result_state text,"
    "  generation bigint,"
    "  validation_outcome text,"
    "  detail text CHECK (octet_length(detail) < 512),"
    "  created_at timestamptz NOT NULL DEFAULT clock_timestamp()"
    ");"
    "CREATE INDEX request_created_at ON buzz_backfill.request (created_at);";

/* Keys passed by the checkpoint, comparable with source_estimate (rows_committed counts only the
 * rows a batch changed, which is fewer when some rows need no repair). Progress made before
 * this version is unknown: NULL, and NULL + n stays NULL, for rows that had already moved. The
 * completed-row guard now covers the new column too. */
static const char m3_rows_covered[] =
    "ALTER TABLE buzz_backfill.backfill ADD COLUMN rows_covered bigint"
    "  CHECK (rows_covered >= 0);"
    "ALTER TABLE buzz_backfill.backfill ALTER COLUMN rows_covered SET DEFAULT 0;"
    "UPDATE buzz_backfill.backfill SET rows_covered = 0"
    "  WHERE checkpoint IS NULL AND state <> 'completed';"
    "DROP TRIGGER guard_1_completed ON buzz_backfill.backfill;"
    "CREATE TRIGGER guard_1_completed BEFORE UPDATE ON buzz_backfill.backfill FOR EACH ROW"
    "  WHEN (OLD.state = 'completed' AND"
    "     ROW(NEW.state, NEW.bound, NEW.bound_empty, NEW.checkpoint, NEW.generation,"
    "         NEW.claim_owner, NEW.rows_committed, NEW.rows_covered, NEW.batches_committed,"
    "         NEW.started_at, NEW.completed_at, NEW.key_types)"
    "     IS DISTINCT FROM"
    "     ROW(OLD.state, OLD.bound, OLD.bound_empty, OLD.checkpoint, OLD.generation,"
    "         OLD.claim_owner, OLD.rows_committed, OLD.rows_covered, OLD.batches_committed,"
    "         OLD.started_at, OLD.completed_at, OLD.key_types))"
    "  EXECUTE FUNCTION buzz_backfill.reject_change('completed backfill is immutable', 'BFI01');";

/* Version 4: bounded keys and coalesced rejections.
 * - A bound or checkpoint is stored as text[] and read back into BF_KEY_TEXT_MAX-byte buffers;
 *   a key that sorts before the bound can still render longer (bytea), so the length of each
 *   is a constraint, checked on every write (NOT VALID: rows written before are not rescanned;
 *   a worker refuses to claim a row whose key it cannot hold).
 * - Unauthenticated rejections from one peer are written as one audit row per window: count
 *   attempts between window_start and window_end (both NULL, count 1, for a single event). */
#define M4_KEY_LIMIT "512"
_Static_assert(BF_KEY_TEXT_MAX == 512, "M4_KEY_LIMIT is BF_KEY_TEXT_MAX");
static const char m4_bounded_keys_coalesced_audit[] =
    "ALTER TABLE buzz_backfill.backfill ADD CONSTRAINT bound_text_length"
    "  CHECK (octet_length(bound::text) < " M4_KEY_LIMIT ") NOT VALID;"
    "ALTER TABLE buzz_backfill.backfill ADD CONSTRAINT checkpoint_text_length"
    "  CHECK (octet_length(checkpoint::text) < " M4_KEY_LIMIT ") NOT VALID;"
    "ALTER TABLE buzz_backfill.audit ADD COLUMN count integer NOT NULL DEFAULT 1"
    "  CONSTRAINT audit_count_positive CHECK (count >= 1);"
    "ALTER TABLE buzz_backfill.audit ADD COLUMN window_start timestamptz;"
    "ALTER TABLE buzz_backfill.audit ADD COLUMN window_end timestamptz;"
    "ALTER TABLE buzz_backfill.audit ADD CONSTRAINT audit_window CHECK ("
    "  (window_start IS NULL) = (window_end IS NULL) AND window_start <= window_end"
    "  AND (count = 1 OR window_start IS NOT NULL));";

/* Version 5: a completed row cannot be renamed either (renaming it would free its stable ID for
 * a second execution), and neither table can be emptied by TRUNCATE, which no row trigger
 * sees: completed rows are permanent and the audit is append-only. */
static const char m5_rename_truncate[] =
    "DROP TRIGGER guard_1_completed ON buzz_backfill.backfill;"
    "CREATE TRIGGER guard_1_completed BEFORE UPDATE ON buzz_backfill.backfill FOR EACH ROW"
    "  WHEN (OLD.state = 'completed' AND"
    "     ROW(NEW.id, NEW.state, NEW.bound, NEW.bound_empty, NEW.checkpoint, NEW.generation,"
    "         NEW.claim_owner, NEW.rows_committed, NEW.rows_covered, NEW.batches_committed,"
    "         NEW.started_at, NEW.completed_at, NEW.key_types)"
    "     IS DISTINCT FROM"
    "     ROW(OLD.id, OLD.state, OLD.bound, OLD.bound_empty, OLD.checkpoint, OLD.generation,"
    "         OLD.claim_owner, OLD.rows_committed, OLD.rows_covered, OLD.batches_committed,"
    "         OLD.started_at, OLD.completed_at, OLD.key_types))"
    "  EXECUTE FUNCTION buzz_backfill.reject_change('completed backfill is immutable', 'BFI01');"
    "CREATE TRIGGER guard_3_truncate BEFORE TRUNCATE ON buzz_backfill.backfill"
    "  FOR EACH STATEMENT EXECUTE FUNCTION"
    "  buzz_backfill.reject_change('completed backfills are permanent: no TRUNCATE', 'BFI01');"
    "CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON buzz_backfill.audit"
    "  FOR EACH STATEMENT EXECUTE FUNCTION buzz_backfill.audit_append_only();";

/* Version 6: throttling (docs/throttling.md) as observed state on the row: the batch size the
 * last worker used (adaptive sizing) and, while a worker waits on a health signal or a
 * rows-per-second ceiling, which signal, its value and since when. Only a claim holder writes
 * them (fenced like a renewal, worker.c); a claim clears the throttle fields, and the read
 * model shows them only while a live claim holds them. */
static const char m6_throttle[] =
    "ALTER TABLE buzz_backfill.backfill ADD COLUMN batch_size_current integer"
    "  CONSTRAINT batch_size_current_positive CHECK (batch_size_current >= 1);"
    "ALTER TABLE buzz_backfill.backfill ADD COLUMN throttle_signal text"
    "  CONSTRAINT throttle_signal_length CHECK (octet_length(throttle_signal) < 24);"
    "ALTER TABLE buzz_backfill.backfill ADD COLUMN throttle_value text"
    "  CONSTRAINT throttle_value_length CHECK (octet_length(throttle_value) < 64);"
    "ALTER TABLE buzz_backfill.backfill ADD COLUMN throttled_since timestamptz;"
    "ALTER TABLE buzz_backfill.backfill ADD CONSTRAINT throttle_since CHECK ("
    "  (throttle_signal IS NULL) = (throttled_since IS NULL));";

/* Version 7: a collapse as observed state (docs/throttling.md "slow batches"): while a claim
 * holder's last step was much slower than the backfill's recent median, what it saw and since
 * when. Written and cleared like the throttle fields (worker.c worker_observe), cleared by a
 * claim, shown only while a live claim holds them. */
static const char m7_slow[] =
    "ALTER TABLE buzz_backfill.backfill ADD COLUMN slow_value text"
    "  CONSTRAINT slow_value_length CHECK (octet_length(slow_value) < 64);"
    "ALTER TABLE buzz_backfill.backfill ADD COLUMN slow_since timestamptz;"
    "ALTER TABLE buzz_backfill.backfill ADD CONSTRAINT slow_since CHECK ("
    "  (slow_value IS NULL) = (slow_since IS NULL));";

/* Version 8: what the backfill's definition materially is (compile.c, a BLAKE2b digest of the
 * table, key, fragments and form), stored by the first registration. A process whose
 * definition of the ID differs materially fails closed: its registration is refused, it never
 * claims the row, and start and validation refuse it (the spec: a material change is a new
 * stable ID). NULL on rows registered before version 8, until a registration stores it. */
static const char m8_digest[] =
    "ALTER TABLE buzz_backfill.backfill ADD COLUMN definition_digest text"
    "  CONSTRAINT definition_digest_format CHECK (definition_digest ~ '^[0-9a-f]{64}$');";

/* Version 9: the progress of a running validation (validate.c), one row per stable ID, written
 * by the validator between its chunks (autocommitted, at most about once a second) and marked
 * finished when the run ends. A table of its own: the validator never waits on the row lock a
 * worker's batch holds on the backfill row, and no guard of that row is involved. A validator
 * that crashed or stopped leaves its row unfinished; expires_at (its last write plus its lease
 * and statement timeout) tells readers that it is no longer running. */
static const char m9_validation_progress[] =
    "CREATE TABLE buzz_backfill.validation_progress ("
    "  backfill_id text PRIMARY KEY,"
    "  owner text NOT NULL CHECK (octet_length(owner) < 128),"
    "  lifecycle boolean NOT NULL,"
    "  started_at timestamptz NOT NULL,"
    "  rows_checked bigint NOT NULL,"
    "  rows_needing_repair bigint NOT NULL,"
    "  updated_at timestamptz NOT NULL,"
    "  expires_at timestamptz NOT NULL,"
    "  finished_at timestamptz"
    ");";

/* Version 10: the old-writer watchdog (watch.c, docs/definitions.md "Old writers"). watch: one
 * row per backfill whose trigger was installed (the quoted table, the trigger and its
 * functions, so that removal needs no definition; removed_at once it is gone; blocked_through:
 * the newest violation a block on old writers already answered). old_writer: what the trigger
 * counted, per writer (application_name, client address, role; never a row value) and session
 * (backend_pid): a session only ever updates its own counter row, so old writers never wait on
 * each other's counts (nor deadlock through them); at most 256 rows per backfill, then one
 * "(other writers)" row. Readers sum a writer's sessions. old_writer_count() is the one thing
 * the trigger runs, as the engine's role (SECURITY DEFINER), only for a row that breaks the
 * postcondition; old_writer_seen() is the AFTER trigger's function. */
static const char m10_old_writers[] =
    "CREATE TABLE buzz_backfill.watch ("
    "  backfill_id text PRIMARY KEY,"
    "  table_name text NOT NULL CHECK (octet_length(table_name) < 300),"
    "  trigger_name text NOT NULL CHECK (octet_length(trigger_name) < 64),"
    "  functions text[] NOT NULL,"
    "  mode text NOT NULL CHECK (mode IN ('on', 'heal')),"
    "  installed_at timestamptz NOT NULL,"
    "  removed_at timestamptz,"
    "  blocked_through timestamptz"
    ");"
    "CREATE TABLE buzz_backfill.old_writer ("
    "  backfill_id text NOT NULL,"
    "  application_name text NOT NULL CHECK (octet_length(application_name) < 256),"
    "  client_addr text NOT NULL CHECK (octet_length(client_addr) < 64),"
    "  role_name text NOT NULL CHECK (octet_length(role_name) < 256),"
    "  backend_pid integer NOT NULL,"
    "  rows bigint NOT NULL,"
    "  healed bigint NOT NULL,"
    "  first_seen timestamptz NOT NULL,"
    "  last_seen timestamptz NOT NULL,"
    "  reported boolean NOT NULL DEFAULT false,"
    "  PRIMARY KEY (backfill_id, application_name, client_addr, role_name, backend_pid)"
    ");"
    "CREATE FUNCTION buzz_backfill.old_writer_count(p_id text, p_healed boolean) RETURNS void"
    " LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $bf$"
    " DECLARE"
    "  v_app text := left(coalesce(current_setting('application_name', true), ''), 63);"
    "  v_addr text := coalesce(host(inet_client_addr()), 'local');"
    "  v_role text := left(session_user::text, 63);"
    "  v_pid integer := pg_backend_pid();"
    " BEGIN"
    "  IF NOT EXISTS (SELECT 1 FROM buzz_backfill.old_writer WHERE backfill_id = p_id"
    "     AND application_name = v_app AND client_addr = v_addr AND role_name = v_role"
    "     AND backend_pid = v_pid)"
    "   AND (SELECT count(*) FROM buzz_backfill.old_writer WHERE backfill_id = p_id) >= 256 THEN"
    "   v_app := '(other writers)'; v_addr := ''; v_role := ''; v_pid := 0;"
    "  END IF;"
    "  INSERT INTO buzz_backfill.old_writer AS o (backfill_id, application_name, client_addr,"
    "   role_name, backend_pid, rows, healed, first_seen, last_seen)"
    "   VALUES (p_id, v_app, v_addr, v_role, v_pid, 1, CASE WHEN p_healed THEN 1 ELSE 0 END,"
    "   clock_timestamp(), clock_timestamp())"
    "   ON CONFLICT (backfill_id, application_name, client_addr, role_name, backend_pid)"
    "   DO UPDATE"
    "   SET rows = o.rows + 1, healed = o.healed + CASE WHEN p_healed THEN 1 ELSE 0 END,"
    "   last_seen = clock_timestamp();"
    " END $bf$;"
    "REVOKE ALL ON FUNCTION buzz_backfill.old_writer_count(text, boolean) FROM PUBLIC;"
    "CREATE FUNCTION buzz_backfill.old_writer_seen() RETURNS trigger"
    " LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $bf$"
    " BEGIN"
    "  PERFORM buzz_backfill.old_writer_count(TG_ARGV[0], false);"
    "  RETURN NULL;"
    " END $bf$;";

/* Version 11: whether a backfill has a watch row (watch.c), on the row itself, so that the
 * read model reads the watch only for the rows that have one (backfill.c, BF_WATCH_SQL): a
 * relation a statement names is locked and opened at every execution, read or not (issue 26).
 * Set by the statement that records the watch, in Start's transaction, which holds the row
 * already; never cleared, like the watch row it stands for. */
static const char m11_watched[] =
    "ALTER TABLE buzz_backfill.backfill ADD COLUMN watched boolean NOT NULL DEFAULT false;"
    "UPDATE buzz_backfill.backfill b SET watched = true"
    "  WHERE EXISTS (SELECT 1 FROM buzz_backfill.watch w WHERE w.backfill_id = b.id);";

static const migration migrations[] = {
    {1, "core: backfill, audit, guards", m1_core},
    {2, "idempotent requests", m2_requests},
    {3, "rows covered", m3_rows_covered},
    {4, "bounded keys, coalesced rejections", m4_bounded_keys_coalesced_audit},
    {5, "no rename or truncate of what is permanent", m5_rename_truncate},
    {6, "throttling state", m6_throttle},
    {7, "slow batches", m7_slow},
    {8, "definition digest", m8_digest},
    {9, "validation progress", m9_validation_progress},
    {10, "old writers", m10_old_writers},
    {11, "watched flag", m11_watched},
};

_Static_assert(BF_ARRAY_LEN(migrations) == BF_SCHEMA_VERSION, "BF_SCHEMA_VERSION is stale");

static char checksums[BF_SCHEMA_VERSION][65];
static pthread_once_t checksums_once = PTHREAD_ONCE_INIT;

static void checksums_compute(void)
{
    for (int i = 0; i < BF_SCHEMA_VERSION; i++) {
        unsigned char digest[crypto_hash_sha256_BYTES];
        const char *sql = migrations[i].sql;
        crypto_hash_sha256(digest, (const unsigned char *)sql, strlen(sql));
        sodium_bin2hex(checksums[i], sizeof checksums[i], digest, sizeof digest);
    }
}

/* SHA-256 of a migration's SQL, computed once per process. */
static void migration_checksum(const migration *m, char hex[65])
{
    pthread_once(&checksums_once, checksums_compute);
    memcpy(hex, checksums[m->version - 1], 65);
}

/* Compare applied versions with the known list. *next_out = first version to apply. */
static bf_err migrate_verify(bf_engine *e, const PGresult *applied, int *next_out)
{
    int next = 1;
    /* rows with a NULL version (readiness appends the gate's rows) end the list */
    for (int i = 0; i < PQntuples(applied) && !bf__isnull(applied, i, 0); i++) {
        int version = (int)bf__field_i64(applied, i, 0);
        if (version > BF_SCHEMA_VERSION)
            return bf__diag(e, BF_ERR_SCHEMA_TOO_NEW,
                            "database has engine schema version %d; this binary knows up to %d",
                            version, BF_SCHEMA_VERSION);
        if (version != next)
            return bf__diag(e, BF_ERR_SCHEMA_CHECKSUM, "engine schema version %d is missing", next);
        char hex[65];
        migration_checksum(&migrations[version - 1], hex);
        if (strcmp(hex, bf__field(applied, i, 1)) != 0)
            return bf__diag(e, BF_ERR_SCHEMA_CHECKSUM,
                            "engine schema version %d does not match this binary", version);
        next++;
    }
    *next_out = next;
    return BF_OK;
}

static const char applied_sql[] =
    "SELECT version, checksum FROM buzz_backfill.schema_migration ORDER BY version";

bf_err bf_migrate(bf_engine *e)
{
    bf_err err = bf__ensure_conn(e);
    if (err != BF_OK)
        return err;
    if ((err = bf__begin(e, false)) != BF_OK)
        return err;
    PGresult *applied = NULL;
    int next = 1;
    /* the migration is this client's own statements back to back: half a short lease between
     * two of them is a saturated machine, not a stalled client (a test's 1 s idle timeout ended
     * a migration so), so it gets at least a minute; a frozen migrator still lets go of the
     * migration lock within that */
    char idle[96];
    int idle_ms = bf__idle_tx_timeout_ms(e);
    bf__format(idle, sizeof idle, "SET LOCAL idle_in_transaction_session_timeout = %d",
               idle_ms > 60000 ? idle_ms : 60000);
    err = bf__exec0(e, "migration idle timeout", idle, 0, NULL);
    if (err == BF_OK)
        err = bf__exec0(e, "migration lock", MIGRATION_LOCK, 0, NULL);
    if (err == BF_OK)
        err = bf__exec0(e, "create schema", "CREATE SCHEMA IF NOT EXISTS buzz_backfill", 0, NULL);
    if (err == BF_OK)
        err = bf__exec0(e, "create migration table",
                        "CREATE TABLE IF NOT EXISTS buzz_backfill.schema_migration ("
                        " version integer PRIMARY KEY, name text NOT NULL,"
                        " checksum text NOT NULL,"
                        " applied_at timestamptz NOT NULL DEFAULT clock_timestamp())",
                        0, NULL);
    if (err == BF_OK)
        err = bf__exec(e, &applied, "read migrations", applied_sql, 0, NULL);
    if (err == BF_OK) {
        err = migrate_verify(e, applied, &next);
        PQclear(applied);
    }
    for (int v = next; err == BF_OK && v <= BF_SCHEMA_VERSION; v++) {
        const migration *m = &migrations[v - 1];
        PGresult *r = PQexec(e->conn, m->sql);
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            err = bf__pg_error(e, r, "apply migration");
        PQclear(r);
        if (err != BF_OK)
            break;
        char version[16], hex[65];
        bf__format(version, sizeof version, "%d", v);
        migration_checksum(m, hex);
        const char *params[] = {version, m->name, hex};
        err = bf__exec0(e, "record migration",
                        "INSERT INTO buzz_backfill.schema_migration (version, name, checksum)"
                        " VALUES ($1::integer, $2, $3)",
                        3, params);
    }
    if (err == BF_OK)
        err = bf__commit(e);
    if (err != BF_OK) {
        bf__rollback(e);
        return err;
    }
    /* one event per version, once it committed */
    for (int v = next; v <= BF_SCHEMA_VERSION; v++) {
        bf_log_record rec = BF_LOG_RECORD_INIT;
        rec.event = BF_EV_SCHEMA_MIGRATED;
        bf__log_event(e, &rec, "applied engine migration %d (%s)", v, migrations[v - 1].name);
    }
    return BF_OK;
}

/* The readiness statement: the applied migrations, then the gate's rows (version NULL). */
static const char readiness_sql[] =
    "SELECT m.version, m.checksum, NULL::text, NULL::text FROM buzz_backfill.schema_migration m"
    " UNION ALL SELECT NULL, NULL, r.id, b.state FROM unnest($1::text[]) AS r(id)"
    " LEFT JOIN buzz_backfill.backfill b ON b.id = r.id"
    " WHERE b.id IS NULL OR b.state <> 'completed' ORDER BY 1 NULLS LAST, 3";

/* Send a schema-reading statement prepared once per connection; a missing schema fails the
 * prepare itself and is reported as BF_ERR_SCHEMA_MISSING without noise in the log. */
static bf_err schema_send(bf_engine *e, bf_stmt stmt, const char *sql, int nparams,
                          const char *const *params)
{
    bf_err err = bf__ensure_conn(e);
    if (err != BF_OK)
        return err;
    PGresult *p;
    if (!bf__prepare_stmt(e, stmt, sql, nparams, &p)) {
        const char *state = PQresultErrorField(p, PG_DIAG_SQLSTATE);
        bool missing =
            state != NULL && (strcmp(state, "42P01") == 0 || strcmp(state, "3F000") == 0);
        err = missing ? bf__diag(e, BF_ERR_SCHEMA_MISSING, "engine schema is not installed")
                      : bf__pg_error(e, p, "read migrations");
        PQclear(p);
        return err;
    }
    return bf__send_stmt(e, "read migrations", stmt, sql, nparams, params);
}

/* The outcome of schema_send's statement (block: wait for it; else *done false while it is
 * still to come), with the applied versions verified. */
static bf_err schema_recv(bf_engine *e, bf_stmt stmt, PGresult **out, int *version_out, bool block,
                          bool *done)
{
    PGresult *r = NULL;
    bf_err err = bf__recv(e, &r, "read migrations", block, done);
    if (!*done)
        return BF_OK;
    if (err != BF_OK) {
        if (strcmp(e->sqlstate, "42P01") == 0 || strcmp(e->sqlstate, "3F000") == 0) {
            /* dropped since it was prepared: prepare again next time */
            bf__forget_stmt(e, stmt);
            return bf__diag(e, BF_ERR_SCHEMA_MISSING, "engine schema is not installed");
        }
        return err;
    }
    int next = 1;
    err = migrate_verify(e, r, &next);
    if (err == BF_OK && next <= BF_SCHEMA_VERSION)
        err = bf__diag(e, BF_ERR_SCHEMA_MISSING,
                       "engine schema is at version %d; this binary needs %d", next - 1,
                       BF_SCHEMA_VERSION);
    if (err != BF_OK) {
        PQclear(r);
        return err;
    }
    if (version_out != NULL)
        *version_out = next - 1;
    *out = r;
    return BF_OK;
}

bf_err bf_schema_check(bf_engine *e, int *version_out)
{
    if (e == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    bf_err err = schema_send(e, BF_STMT_MIGRATIONS, applied_sql, 0, NULL);
    if (err != BF_OK)
        return err;
    PGresult *r = NULL;
    bool done;
    err = schema_recv(e, BF_STMT_MIGRATIONS, &r, version_out, true, &done);
    PQclear(r);
    return err;
}

bf_err bf_readiness_begin(bf_engine *e, bool gate)
{
    if (e == NULL || e->async_op != BF_ASYNC_NONE)
        return BF_ERR_INVALID_ARGUMENT;
    bf_err err;
    if (gate) {
        const char *params[] = {bf__registry_ids(e->reg, true)};
        err = schema_send(e, BF_STMT_READINESS, readiness_sql, 1, params);
    } else {
        err = schema_send(e, BF_STMT_MIGRATIONS, applied_sql, 0, NULL);
    }
    if (err == BF_OK)
        e->async_op = gate ? BF_ASYNC_READINESS : BF_ASYNC_SCHEMA;
    return err;
}

/* bf_readiness_end, or with block the whole wait (bf_readiness_read). */
static bf_err readiness_finish(bf_engine *e, bf_gate_entry *ids, int max, int *gating_out,
                               bool block, bool *done)
{
    if (e == NULL || gating_out == NULL || done == NULL || max < 0 || (max > 0 && ids == NULL) ||
        (e->async_op != BF_ASYNC_READINESS && e->async_op != BF_ASYNC_SCHEMA))
        return BF_ERR_INVALID_ARGUMENT;
    bool gate = e->async_op == BF_ASYNC_READINESS;
    PGresult *r = NULL;
    bf_err err =
        schema_recv(e, gate ? BF_STMT_READINESS : BF_STMT_MIGRATIONS, &r, NULL, block, done);
    if (!*done)
        return BF_OK;
    e->async_op = BF_ASYNC_NONE;
    *gating_out = 0;
    if (err != BF_OK || !gate) {
        PQclear(r);
        return err;
    }
    int first = 0;
    while (first < PQntuples(r) && !bf__isnull(r, first, 0))
        first++;
    *gating_out = bf__gate_rows(r, first, 2, ids, max);
    PQclear(r);
    return BF_OK;
}

bf_err bf_readiness_end(bf_engine *e, bf_gate_entry *ids, int max, int *gating_out, bool *done)
{
    return readiness_finish(e, ids, max, gating_out, false, done);
}

bf_err bf_readiness_read(bf_engine *e, bf_gate_entry *ids, int max, int *gating_out)
{
    if (e == NULL || gating_out == NULL || max < 0 || (max > 0 && ids == NULL))
        return BF_ERR_INVALID_ARGUMENT;
    bf_err err = bf_readiness_begin(e, true);
    bool done;
    return err != BF_OK ? err : readiness_finish(e, ids, max, gating_out, true, &done);
}
