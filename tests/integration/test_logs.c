/*
 * test_logs.c - the structured logs of a real buzz-backfilld (log_format = json) over a full
 * run through the admin API: a start whose first batch fails with a class 22 error quoting a
 * row value (blocked), a retry, a pause while a batch waits on a barrier (that batch is fenced
 * out and rolled back), a resume to completion, and requests refused for a read-only and an
 * expired token. Then every line of the daemon's log must be one JSON object (parsed with
 * json-c, UTF-8 validated) with time, level and event; none may contain a token, the database
 * password or the source rows' marker value; the known event sequence must appear; and the
 * batch.committed records must add up to the row's batches_committed, rows_covered and
 * rows_committed in PostgreSQL, including the batch that committed in the step the pause cut
 * short.
 *
 * Guards proved: the JSON line writer (server/src/log.c; the text format fails the parse);
 * engine_message_may_quote_data() in engine/src/engine.c (without it the 22P02 message puts
 * the marker in the log); the redacted DSN (the password is in database_url); every engine
 * event emission named below (removing one fails its code's assertion); exactly-once
 * batch.committed records (a duplicated or missing one breaks the sums; without
 * worker_report_partial() in engine/src/worker.c the paused step's committed batch is missing).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "bt.h"
#include "daemon.h"

#define ID       "logs.items_v1"
#define ROWS     300
#define BARRIER  1901
#define MARKER   "ROWVALUE_marker_7d1e"
#define PASSWORD "Pw_logs_secret_4711"

static PGconn *pg;
static bd_daemon d;
static long daemon_pid; /* d.pid is cleared by bd_stop */

typedef struct log_summary {
    int lines;
    int events[BF_EV_COUNT];
    long batches, rows, touched; /* sums over batch.committed */
    char reasons[8][16];         /* reasons of batch.rolled_back, in order */
    int nreasons;
} log_summary;

static bf_event event_of(const char *code)
{
    for (int e = 0; e < BF_EV_COUNT; e++)
        if (strcmp(bf_event_code((bf_event)e), code) == 0)
            return (bf_event)e;
    fail_msg("unknown event code %s", code);
    return BF_EV_NONE;
}

static const char *str_field(json_object *o, const char *key, const char *line)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
        fail_msg("line without a string %s: %s", key, line);
    return json_object_get_string(v);
}

static long int_field(json_object *o, const char *key, const char *line)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
        fail_msg("line without an integer %s: %s", key, line);
    return (long)json_object_get_int64(v);
}

/* Read the whole log: every line parses, has the base fields and carries no secret. */
static void read_log(log_summary *s, const char *const *secrets, size_t nsecrets)
{
    memset(s, 0, sizeof *s);
    FILE *f = fopen(d.log, "r");
    assert_non_null(f);
    static char line[32768];
    while (fgets(line, sizeof line, f) != NULL) {
        size_t n = strlen(line);
        assert_true(n > 0 && line[n - 1] == '\n'); /* whole lines, bounded */
        line[--n] = '\0';
        s->lines++;
        for (size_t i = 0; i < nsecrets; i++)
            if (strstr(line, secrets[i]) != NULL)
                fail_msg("the log holds a secret (%zu): %s", i, line);
        json_tokener *tok = json_tokener_new();
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
        json_object *o = json_tokener_parse_ex(tok, line, (int)n);
        bool ok = o != NULL && json_tokener_get_error(tok) == json_tokener_success &&
                  json_object_is_type(o, json_type_object);
        json_tokener_free(tok);
        if (!ok)
            fail_msg("not a JSON object line: %s", line);
        const char *when = str_field(o, "time", line);
        assert_int_equal(strlen(when), strlen("2026-01-01T00:00:00.000Z"));
        assert_true(when[10] == 'T' && when[23] == 'Z');
        const char *level = str_field(o, "level", line);
        assert_true(strcmp(level, "debug") == 0 || strcmp(level, "info") == 0 ||
                    strcmp(level, "warn") == 0 || strcmp(level, "error") == 0);
        (void)str_field(o, "msg", line);
        assert_int_equal(int_field(o, "pid", line), daemon_pid);
        bf_event ev = event_of(str_field(o, "event", line));
        s->events[ev]++;
        if (ev == BF_EV_BATCH_COMMITTED) {
            assert_string_equal(str_field(o, "id", line), ID);
            assert_int_equal(int_field(o, "batch_size", line), 50);
            (void)int_field(o, "generation", line);
            (void)str_field(o, "checkpoint", line);
            s->batches += int_field(o, "batches", line);
            s->rows += int_field(o, "rows", line);
            s->touched += int_field(o, "touched", line);
            json_object *dur = NULL;
            assert_true(json_object_object_get_ex(o, "duration_ms", &dur));
        }
        if (ev == BF_EV_BATCH_ROLLED_BACK && s->nreasons < 8)
            snprintf(s->reasons[s->nreasons++], sizeof s->reasons[0], "%s",
                     str_field(o, "reason", line));
        json_object_put(o);
    }
    fclose(f);
}

static void test_json_logs_of_a_full_run(void **state)
{
    (void)state;
    bt_make_items(pg, "public.logs_items", ROWS);
    bt_exec(pg, "ALTER TABLE public.logs_items ADD COLUMN note text NOT NULL DEFAULT '%s'", MARKER);
    bt_exec(pg, "CREATE TABLE public.logs_ctl (brk boolean NOT NULL);"
                " INSERT INTO public.logs_ctl VALUES (true)");
    bt_install_barrier(pg);

    char conninfo[1200];
    snprintf(conninfo, sizeof conninfo, "%s password=%s", bt_db_conninfo(), PASSWORD);
    bd_options o = bd_defaults();
    o.conninfo = conninfo;
    o.definitions = "logs";
    o.auto_migrate = true;
    o.workers = 1;
    o.step_batches = 2; /* several batch.committed records to add up */
    o.extra = "log_format = json";
    bd_start(&d, &o);
    daemon_pid = (long)d.pid;
    bd_wait_registered(pg, 1);

    bfc_client *ipc = bd_client(d.ipc_url, NULL, 0, 0);
    /* start: the first batch casts the marker to integer (22P02) and the backfill blocks */
    assert_int_equal(bd_control(ipc, "Start", ID, NULL), BD_SC(OK));
    bd_free(bd_wait_state(ipc, ID, BD_ST(BLOCKED)));

    /* retry: the step's first batch commits, its second waits on the barrier; pause it in
     * flight: that batch's fence fails and the CALL fails, and the batch committed before it
     * must still be reported (worker_report_partial) for the sums below to hold */
    bt_exec(pg, "UPDATE public.logs_ctl SET brk = false");
    PGconn *holder = bd_connect(NULL);
    bt_lock(holder, BARRIER);
    assert_int_equal(bd_control(ipc, "Retry", ID, NULL), BD_SC(OK));
    bt_wait_waiters(pg, BARRIER, 1);
    assert_int_equal(bd_control(ipc, "Pause", ID, NULL), BD_SC(OK));
    bt_unlock(holder, BARRIER);
    PQfinish(holder);
    bd_wait_log(&d, "\"event\":\"batch.fenced_out\"");
    assert_int_equal(bd_control(ipc, "Resume", ID, NULL), BD_SC(OK));
    bd_free(bd_wait_state(ipc, ID, BD_ST(COMPLETED)));

    /* refused: a read-only token may not pause, an expired token is not accepted */
    const char *reader = bd_token(BFT_CAP_READ);
    static char expired[BFT_TOKEN_MAX + 1];
    bd_token_spec spec = {.caps = BFT_CAP_ALL, .expires_at = (int64_t)time(NULL) - 3600};
    bd_mint(expired, sizeof expired, &spec, NULL);
    bfc_client *rc = bd_client(d.tcp_url, reader, 0, 0);
    assert_int_equal(bd_control(rc, "Pause", ID, NULL), BD_SC(PERMISSION_DENIED));
    bfc_close(rc);
    bfc_client *ec = bd_client(d.tcp_url, expired, 0, 0);
    assert_int_equal(bd_control(ec, "Pause", ID, NULL), BD_SC(UNAUTHENTICATED));
    bfc_close(ec);
    bfc_close(ipc);
    bd_stop(&d);

    /* the token strings may be long: their signatures are what must never appear */
    const char *reader_sig = strrchr(reader, '.') ? strrchr(reader, '.') + 1 : reader;
    const char *expired_sig = strrchr(expired, '.') ? strrchr(expired, '.') + 1 : expired;
    const char *const secrets[] = {reader, expired, reader_sig, expired_sig, PASSWORD, MARKER};
    log_summary s;
    read_log(&s, secrets, sizeof secrets / sizeof secrets[0]);
    assert_true(s.lines > 10);

    assert_int_equal(s.events[BF_EV_SERVER_LISTENING], 2); /* ipc and tcp */
    assert_int_equal(s.events[BF_EV_SERVER_STARTED], 1);
    assert_int_equal(s.events[BF_EV_SCHEMA_MIGRATED], BF_SCHEMA_VERSION);
    assert_true(s.events[BF_EV_CLAIM_ACQUIRED] >= 3); /* start, retry, resume */
    assert_int_equal(s.events[BF_EV_BACKFILL_BLOCKED], 1);
    assert_int_equal(s.events[BF_EV_BATCH_FENCED_OUT], 1);
    assert_true(s.events[BF_EV_BATCH_COMMITTED] >= ROWS / 50 / 2);
    assert_int_equal(s.events[BF_EV_BACKFILL_VALIDATING], 1);
    assert_int_equal(s.events[BF_EV_VALIDATION_PASSED], 1);
    assert_int_equal(s.events[BF_EV_ACTION_APPLIED], 4); /* start, retry, pause, resume */
    assert_int_equal(s.events[BF_EV_SERVER_STOPPING], 1);
    assert_int_equal(s.events[BF_EV_SERVER_STOPPED], 1);
    /* the 22P02 batch (reason: its SQLSTATE class) and the paused one (the fence) */
    assert_int_equal(s.nreasons, 2);
    assert_string_equal(s.reasons[0], "22");
    assert_string_equal(s.reasons[1], "fence");

    /* the records reconcile with what PostgreSQL counted */
    PGresult *r = PQexec(pg, "SELECT batches_committed, rows_covered, rows_committed FROM"
                             " buzz_backfill.backfill WHERE id = '" ID "'");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(r), 1);
    assert_int_equal(s.batches, atol(PQgetvalue(r, 0, 0)));
    assert_int_equal(s.rows, atol(PQgetvalue(r, 0, 1)));
    assert_int_equal(s.touched, atol(PQgetvalue(r, 0, 2)));
    assert_int_equal(s.rows, ROWS);
    PQclear(r);
}

static int group_setup(void **state)
{
    (void)state;
    pg = bd_suite_open("logs");
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    bd_suite_close(d.pid > 0 ? &d : NULL, pg, false);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_logs_of_a_full_run),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
