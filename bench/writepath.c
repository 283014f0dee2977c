/*
 * writepath.c - what the old-writer watchdog (docs/definitions.md "Old writers") costs the
 * relay's own writes: inserts into the demo's events table (its schema and its new write path,
 * examples/demo) with the watch trigger of demo.events.pubkey_hex_v1's postcondition installed
 * against the same inserts without it, when no row violates.
 *
 * Rounds alternate: each round starts a fresh backfill of the same definition under a new ID
 * (start installs its trigger), times the inserts with it on, removes it (bf_watch_off) and
 * times the same inserts with it off (odd rounds time them off first, before the start), so
 * drift in the machine's load and the order touch both alike. Two
 * shapes: single-row INSERTs each in its own transaction (a relay storing events one by one),
 * and 500-row INSERTs (a bulk import), as microseconds per row. The ratio reported is the
 * median over rounds of on / off. Another shape pairs the single-row inserts with a twin
 * table that is never watched, one insert into each in turn inside the "on" window: no drift,
 * no DDL and no phase order between the two sides. Usage: writepath [ROUNDS] [ROWS]
 * (BUZZ_TEST_PG_URL or BUZZ_BENCH_PG_URL names the server; a private database is created and
 * dropped).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "buzz/engine.h"

#define MAX_ROUNDS 64

static const char schema_sql[] =
    "CREATE SCHEMA demo;"
    "CREATE TABLE demo.events (id bigserial PRIMARY KEY,"
    " event_id bytea NOT NULL CHECK (octet_length(event_id) = 32),"
    " pubkey bytea NOT NULL CHECK (octet_length(pubkey) = 32), created_at timestamptz NOT NULL,"
    " kind integer NOT NULL CHECK (kind >= 0), content text NOT NULL,"
    " tags jsonb NOT NULL CHECK (jsonb_typeof(tags) = 'array'), content_len integer,"
    " pubkey_hex text, tag_count integer,"
    " CONSTRAINT events_created_at_event_id_key UNIQUE (created_at, event_id));"
    "CREATE FUNCTION demo.events_derive() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
    " NEW.content_len := octet_length(NEW.content); NEW.pubkey_hex := encode(NEW.pubkey, 'hex');"
    " NEW.tag_count := jsonb_array_length(NEW.tags); RETURN NEW; END $$;"
    "CREATE TRIGGER events_derive BEFORE INSERT OR UPDATE OF content, pubkey, tags ON demo.events"
    " FOR EACH ROW EXECUTE FUNCTION demo.events_derive();"
    "INSERT INTO demo.events (event_id, pubkey, created_at, kind, content, tags)"
    " SELECT sha256(g::text::bytea), sha256((g % 97)::text::bytea),"
    "  now() - g * interval '1 s', 1, 'seed', '[]' FROM generate_series(1, 2000) g;"
    /* the twin: the same table, never watched, for the paired shape */
    "CREATE TABLE demo.events_twin (LIKE demo.events INCLUDING ALL);"
    "CREATE TRIGGER events_derive BEFORE INSERT OR UPDATE OF content, pubkey, tags"
    " ON demo.events_twin FOR EACH ROW EXECUTE FUNCTION demo.events_derive();"
    "INSERT INTO demo.events_twin SELECT * FROM demo.events;"
    "ANALYZE demo.events; ANALYZE demo.events_twin";

/* one event into table: distinct ids from a sequence of the run, a pubkey of 97 authors */
#define INSERT_EVENT(table)                                                                        \
    "INSERT INTO " table " (event_id, pubkey, created_at, kind, content, tags)"                    \
    " VALUES (sha256($1::text::bytea), sha256(($1::text::bigint % 97)::text::bytea),"              \
    " clock_timestamp(), 1, 'hello from the relay', '[[\"p\", \"x\"]]')"
static const char insert_one[] = INSERT_EVENT("demo.events");
static const char insert_twin[] = INSERT_EVENT("demo.events_twin");
static const char insert_many[] =
    "INSERT INTO demo.events (event_id, pubkey, created_at, kind, content, tags)"
    " SELECT sha256(g::text::bytea), sha256((g % 97)::text::bytea), clock_timestamp(), 1,"
    " 'hello from the relay', '[[\"p\", \"x\"]]' FROM generate_series($1::bigint,"
    " $1::bigint + 499) g";

static long long next_id = 10000000;

/* One single-row INSERT (autocommit) of sql; its microseconds. */
static double insert_timed(PGconn *c, const char *sql)
{
    char id[24];
    snprintf(id, sizeof id, "%lld", next_id++);
    const char *p[] = {id};
    double t0 = bench_now();
    PGresult *r = PQexecParams(c, sql, 1, NULL, p, NULL, NULL, 0);
    double us = (bench_now() - t0) * 1e6;
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        bench_die("insert: %s", PQerrorMessage(c));
    PQclear(r);
    return us;
}

/* microseconds per row of rows single-row INSERTs (autocommit) */
static double time_single(PGconn *c, int rows)
{
    double us = 0;
    for (int i = 0; i < rows; i++)
        us += insert_timed(c, insert_one);
    return us / rows;
}

/* The relay's single-row inserts, paired: rows inserts into the watched table and rows into its
 * never-watched twin, alternating one by one (and which goes first), each in its own
 * transaction, so that both see the same moment of the machine, the same WAL position and no
 * DDL between them. The medians and the means of each side's per-insert times, in
 * microseconds. */
static void time_paired(PGconn *c, int rows, double *on_us, double *off_us, double *on_mean,
                        double *off_mean)
{
    double *on = malloc(sizeof *on * (size_t)rows), *off = malloc(sizeof *off * (size_t)rows);
    if (on == NULL || off == NULL)
        bench_die("out of memory");
    for (int i = 0; i < rows; i++) {
        if (i % 2 == 0) {
            on[i] = insert_timed(c, insert_one);
            off[i] = insert_timed(c, insert_twin);
        } else {
            off[i] = insert_timed(c, insert_twin);
            on[i] = insert_timed(c, insert_one);
        }
    }
    *on_mean = *off_mean = 0;
    for (int i = 0; i < rows; i++) {
        *on_mean += on[i] / rows;
        *off_mean += off[i] / rows;
    }
    *on_us = bench_median_doubles(on, rows);
    *off_us = bench_median_doubles(off, rows);
    free(on);
    free(off);
}

/* microseconds per row of rows rows inserted 500 at a time */
static double time_bulk(PGconn *c, int rows)
{
    double t0 = bench_now();
    for (int i = 0; i < rows; i += 500) {
        char id[24];
        snprintf(id, sizeof id, "%lld", next_id);
        next_id += 500;
        const char *p[] = {id};
        PGresult *r = PQexecParams(c, insert_many, 1, NULL, p, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            bench_die("bulk insert: %s", PQerrorMessage(c));
        PQclear(r);
    }
    return (bench_now() - t0) * 1e6 / ((rows + 499) / 500 * 500);
}

/* the lower quartile: on a shared machine the quiet rounds tell the cost, the loaded ones the
 * neighbours (call after bench_median_doubles(), which sorts) */
static double quartile(const double *sorted, int n)
{
    return sorted[n / 4];
}

/* microseconds per row of rows single-row INSERT statements run inside the server (one
 * plpgsql loop, one transaction): the executor's and the trigger's cost without the client's
 * round trips and commits */
static double time_server(PGconn *c, int rows)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "DO $$ BEGIN FOR g IN %lld..%lld LOOP"
             " INSERT INTO demo.events (event_id, pubkey, created_at, kind, content, tags)"
             " VALUES (sha256(g::text::bytea), sha256((g %% 97)::text::bytea), clock_timestamp(),"
             " 1, 'hello from the relay', '[]'); END LOOP; END $$",
             next_id, next_id + rows - 1);
    next_id += rows;
    double t0 = bench_now();
    bench_exec(c, sql);
    return (bench_now() - t0) * 1e6 / rows;
}

int main(int argc, char **argv)
{
    bench_set_name("writepath");
    int rounds = argc > 1 ? atoi(argv[1]) : 7;
    int rows = argc > 2 ? atoi(argv[2]) : 2000;
    if (rounds < 1 || rounds > MAX_ROUNDS || rows < 500)
        bench_die("usage: writepath [ROUNDS 1..%d] [ROWS >= 500]", MAX_ROUNDS);
    const char *url = getenv("BUZZ_BENCH_PG_URL");
    if (url == NULL)
        url = getenv("BUZZ_TEST_PG_URL");
    if (url == NULL)
        bench_die("set BUZZ_BENCH_PG_URL (or BUZZ_TEST_PG_URL)");
    bench_db d;
    bench_db_create(&d, url, "writepath");
    bench_exec(d.db, schema_sql);

    static bf_definition defs[MAX_ROUNDS];
    static char ids[MAX_ROUNDS][BF_ID_MAX + 1];
    bf_registry *reg = NULL;
    if (bf_registry_new(&reg) != BF_OK)
        bench_die("registry");
    for (int i = 0; i < rounds; i++) {
        snprintf(ids[i], sizeof ids[i], "demo.events.pubkey_hex_w%d", i);
        defs[i] = (bf_definition){
            .id = ids[i],
            .table = "demo.events",
            .key = {{"created_at", BF_KEY_TIMESTAMPTZ}, {"event_id", BF_KEY_BYTEA}},
            .nkey = 2,
            .batch_size = 1000,
            .needs_repair = "t.pubkey_hex IS NULL",
            .update_set = "pubkey_hex = encode(t.pubkey, 'hex')",
            .postcondition = "t.pubkey_hex = encode(t.pubkey, 'hex')",
            .watch_writers = BF_WATCH_ON,
        };
        char diag[BF_DIAG_MAX];
        if (bf_registry_add(reg, &defs[i], diag, sizeof diag) != BF_OK)
            bench_die("definition: %s", diag);
    }
    bf_config cfg = {.conninfo = d.conninfo, .owner = "writepath"};
    bf_engine *e = NULL;
    if (bf_engine_open(&e, &cfg, reg) != BF_OK || bf_migrate(e) != BF_OK ||
        bf_register_all(e) != BF_OK)
        bench_die("engine: %s", e ? bf_engine_diag(e) : "open");
    PGconn *relay = bench_connect(d.conninfo);
    bench_exec(relay, "SET application_name = 'relay-2.0'");
    (void)time_single(relay, rows / 4); /* warm the caches and the plans */
    (void)time_bulk(relay, rows);

    double paired_on[MAX_ROUNDS], paired_off[MAX_ROUNDS], paired_ratio[MAX_ROUNDS];
    (void)insert_timed(relay, insert_twin);
    double single_ratio[MAX_ROUNDS], bulk_ratio[MAX_ROUNDS];
    double single_on[MAX_ROUNDS], single_off[MAX_ROUNDS], bulk_on[MAX_ROUNDS], bulk_off[MAX_ROUNDS],
        server_on[MAX_ROUNDS], server_off[MAX_ROUNDS], server_ratio[MAX_ROUNDS];
    for (int i = 0; i < rounds; i++) {
        /* the order alternates too: odd rounds time the inserts without the trigger first,
         * so that what follows a start (its commit, the relay's plans invalidated by the DDL)
         * or a phase's own after-effects fall on each side alike */
        bool off_first = i % 2 == 1;
        if (off_first) {
            single_off[i] = time_single(relay, rows);
            bulk_off[i] = time_bulk(relay, rows * 5);
            server_off[i] = time_server(relay, rows * 5);
        }
        bf_action_result res;
        if (bf_action_apply(e, BF_ACTION_START, ids[i], NULL, &res) != BF_OK)
            bench_die("start %s: %s", ids[i], bf_engine_diag(e));
        single_on[i] = time_single(relay, rows);
        bulk_on[i] = time_bulk(relay, rows * 5);
        server_on[i] = time_server(relay, rows * 5);
        double mean_on = 0, mean_off = 0;
        time_paired(relay, rows, &paired_on[i], &paired_off[i], &mean_on, &mean_off);
        paired_ratio[i] = paired_on[i] / paired_off[i];
        bool removed = false;
        if (bf_watch_off(e, ids[i], NULL, &removed) != BF_OK || !removed)
            bench_die("watch off %s: %s", ids[i], bf_engine_diag(e));
        if (!off_first) {
            single_off[i] = time_single(relay, rows);
            bulk_off[i] = time_bulk(relay, rows * 5);
            server_off[i] = time_server(relay, rows * 5);
        }
        server_ratio[i] = server_on[i] / server_off[i];
        single_ratio[i] = single_on[i] / single_off[i];
        bulk_ratio[i] = bulk_on[i] / bulk_off[i];
        printf("round %d: single %.1f us/row on, %.1f off (x%.3f); bulk %.2f on, %.2f off"
               " (x%.3f); in-server %.2f on, %.2f off (x%.3f); paired %.1f on, %.1f off"
               " (x%.3f; means %.1f, %.1f, x%.3f)\n",
               i + 1, single_on[i], single_off[i], single_ratio[i], bulk_on[i], bulk_off[i],
               bulk_ratio[i], server_on[i], server_off[i], server_ratio[i], paired_on[i],
               paired_off[i], paired_ratio[i], mean_on, mean_off, mean_on / mean_off);
    }
    long long counted = bench_int(d.db, "SELECT coalesce(sum(rows), 0) FROM"
                                        " buzz_backfill.old_writer");
    char load[64];
    bench_loadavg(load, sizeof load);
    printf("writepath: %d rounds, %d single-row inserts and %d bulk rows per phase, load %s\n",
           rounds, rows, rows * 5, load);
    struct {
        const char *name;
        double *on, *off, *ratio;
    } shapes[] = {{"single-row inserts, autocommit", single_on, single_off, single_ratio},
                  {"500-row inserts", bulk_on, bulk_off, bulk_ratio},
                  {"single-row inserts in-server", server_on, server_off, server_ratio},
                  {"single-row inserts paired with the twin table (median insert)", paired_on,
                   paired_off, paired_ratio}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        double mr = bench_median_doubles(shapes[k].ratio, rounds);
        double mon = bench_median_doubles(shapes[k].on, rounds),
               qon = quartile(shapes[k].on, rounds);
        double moff = bench_median_doubles(shapes[k].off, rounds),
               qoff = quartile(shapes[k].off, rounds);
        printf("writepath: %s: median %.2f us/row on, %.2f off, median ratio x%.3f;"
               " lower quartile %.2f on, %.2f off, x%.3f\n",
               shapes[k].name, mon, moff, mr, qon, qoff, qon / qoff);
    }
    printf("writepath: rows the watch counted (none violated): %lld\n", counted);
    PQfinish(relay);
    bf_engine_close(e);
    bf_registry_free(reg);
    bench_db_drop(&d);
    return counted == 0 ? 0 : 1;
}
