/*
 * test_desktop.c - buzz-backfill-desktop end to end, as a person sees it: the application runs
 * on a private Xvfb display against a real buzz-backfilld (tests/support/daemon.c) and against
 * a scripted server, and the assertions read what its window shows through its test hook
 * (desk_driver.h). Screenshots of the main states are written to the directory
 * BUZZ_DESKTOP_SHOTS names (docs/desktop/ to renew the documentation's), else to the build
 * tree's tests/desktop-shots/.
 *
 * Conformance 12 for the desktop client; the guards proved:
 * - the confirmation (desk_on_control only asks; desk_on_confirm's Send sends): after Start or
 *   Pause alone the backfill is unchanged in PostgreSQL;
 * - outcomes only from the server's answer (bfc_dash_outcome in desk_sender_send): the shown
 *   transition, request id and refusal reason are the ones the server recorded and answered,
 *   for all five controls against the real daemon (start, pause, retry refused, resume, and
 *   validate, whose shown request id is its audit row's: seen failing with the id made up);
 * - the stale path of the shared model (bfc_dash_apply_list/_ready through dash_fetch.c): with
 *   the daemon stopped the rows stay, marked STALE, readiness and identity unknown;
 * - unknown stays unknown: a Check answer without a verdict, a backfill without progress, an
 *   identity refused: never READY, 0 %, a bar or a rate;
 * - only the five supported controls exist in the window, and only they and reads reach the
 *   server (the scripted server sees every method);
 * - a lost answer is asked again with the same request id (the client library's retry, and
 *   desk_worker_resend behind "Ask again").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>

#include "bt.h"
#include "daemon.h"
#include "desk_driver.h"

#define ITEMS     "dash.items_v1"
#define K_ITEMS   1201
#define PAUSED_ID "c13.paused_v1"
#define K_PAUSED  1311
#define BLOCKED   "c13.blocked_v1"
#define FAILED    "c13.failed_v1"

static char shots[512];

static void shot(dd_app *a, const char *name)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s.png", shots, name);
    dd_shot(a, path);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_true(sb.st_size > 1000);
}

static int group_setup(void **state)
{
    (void)state;
    const char *dir = getenv("BUZZ_DESKTOP_SHOTS");
    if (dir != NULL && dir[0] != '\0')
        snprintf(shots, sizeof shots, "%s", dir);
    else
        snprintf(shots, sizeof shots, "%s", BUZZ_DESKTOP_SHOTS_DEFAULT);
    mkdir(shots, 0755);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    dd_x_stop();
    return 0;
}

/* A small file's text (caller frees). */
static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        fail_msg("cannot read %s", path);
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strdup(buf);
}

static void want_db_state(PGconn *pg, const char *id, const char *state)
{
    char *st = bt_text(pg, "SELECT state FROM buzz_backfill.backfill WHERE id = '%s'", id);
    if (strcmp(st, state) != 0)
        fail_msg("%s is %s in PostgreSQL, want %s", id, st, state);
    free(st);
}

/* Click a control for id, confirm it, and wait for the outcome line that starts with what. */
static void control(dd_app *a, const char *action, const char *id, const char *outcome)
{
    dd_do(a, "select %s", id);
    char name[64];
    snprintf(name, sizeof name, "control.%s", action);
    dd_wait(a, name, "\tsensitive");
    dd_do(a, "click %s", name);
    char q[160];
    snprintf(q, sizeof q, "%s %s?", action, id);
    dd_wait(a, "confirm.text", q);
    dd_do(a, "click confirm.send");
    dd_wait(a, "outcome", outcome);
}

/* The request id an outcome line names ("... (request id <hex>)"). */
static void outcome_request_id(dd_app *a, char *out, size_t cap)
{
    dd_cmd(a, "dump");
    const char *line = dd_field(a, "outcome");
    const char *p = line ? strstr(line, "(request id ") : NULL;
    if (p == NULL)
        fail_msg("no request id in the outcome: %s", line ? line : "(none)");
    snprintf(out, cap, "%.32s", p + strlen("(request id "));
}

/*
 * A real daemon with four backfills: dash.items_v1 (pending; its batches wait on a barrier),
 * c13.paused_v1 (running, held on a barrier), c13.blocked_v1 (blocked: its prerequisite is
 * unmet), c13.failed_v1 (failed: its validation rejects), the last three required in automatic
 * mode, so readiness is gated by them.
 */
static void test_desktop_real_daemon(void **state)
{
    (void)state;
    PGconn *pg = bd_suite_open("desktop");
    bt_install_barrier(pg);
    /* enough batches that it is never done before it is held again, even under load */
    bt_make_items(pg, "dash_items", 60000);
    bt_exec(pg, "ANALYZE dash_items");
    bt_make_items(pg, "c13_p", 100);
    bt_make_items(pg, "c13_b", 100);
    bt_make_items(pg, "c13_f", 100);
    bt_exec(pg, "CREATE TABLE c13_ctl (prereq_ok boolean NOT NULL, break_validation boolean"
                " NOT NULL); INSERT INTO c13_ctl VALUES (false, true)");
    /* a self-signed certificate for localhost: the daemon's tls+tcp:// listener and the CA
     * the window is given */
    char tls_cmd[2048], cert[300], bundle[300];
    snprintf(cert, sizeof cert, "%s/tls-cert.pem", bd_dir());
    snprintf(bundle, sizeof bundle, "%s/tls-bundle.pem", bd_dir());
    snprintf(tls_cmd, sizeof tls_cmd,
             "cd %s && openssl req -x509 -newkey rsa:2048 -nodes -keyout tls-key.pem -out %s"
             " -days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1"
             " >/dev/null 2>&1 && cat %s tls-key.pem > %s && chmod 600 %s",
             bd_dir(), cert, cert, bundle, bundle);
    assert_int_equal(system(tls_cmd), 0);
    PGconn *holder = bd_connect(NULL);
    bt_lock(holder, K_ITEMS);
    bt_lock(holder, K_PAUSED);
    bd_options o = bd_defaults();
    o.definitions = "dash,c13rec";
    o.auto_migrate = true;
    o.auto_backfill = true;
    o.workers = 4;
    o.tls_cert_key_file = bundle;
    bd_daemon d;
    bd_start(&d, &o);
    bd_wait_registered(pg, 4);

    dd_x_start();
    char config[300], token_file[300];
    snprintf(config, sizeof config, "%s/config", bd_dir());
    snprintf(token_file, sizeof token_file, "%s/operator.token", bd_dir());
    FILE *f = fopen(token_file, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", bd_token(BFT_CAP_ALL));
    fclose(f);

    /* tcp without a token: the server refuses, and the window says so as such */
    dd_app a;
    const char *args[] = {"--url", d.tcp_url, "--interval", "500ms", NULL};
    dd_start(&a, config, args);
    dd_wait(&a, "readiness", "READINESS UNKNOWN (unauthenticated");
    dd_wait(&a, "whoami", "identity unknown (unauthenticated");
    dd_wait(&a, "status", "backfills: unknown (unauthenticated");
    dd_refute(&a, "NOT READY");
    dd_refute(&a, "0 backfills");

    /* the connection dialog: tls+tcp:// with the CA and the name to verify, the token file,
     * then Connect; from here on every call goes over TLS; the token is not saved */
    dd_do(&a, "set conn.url %s", d.tls_url);
    dd_do(&a, "set conn.tls-ca %s", cert);
    dd_do(&a, "set conn.tls-server-name localhost");
    dd_do(&a, "set conn.token-file %s", token_file);
    dd_do(&a, "click conn.connect");
    dd_wait(&a, "whoami", "signed in as operator@test (token kid=k1)");
    char settings[400];
    snprintf(settings, sizeof settings, "%s/buzz-backfill/desktop.conf", config);
    char *saved = read_file(settings);
    assert_non_null(strstr(saved, token_file));
    assert_non_null(strstr(saved, d.tls_url));
    assert_non_null(strstr(saved, cert));
    assert_null(strstr(saved, "bbt1."));
    free(saved);

    dd_wait(&a, "readiness", "NOT READY: gated by 3");
    dd_wait(&a, "row." BLOCKED ".state", "blocked");
    dd_wait(&a, "row." FAILED ".state", "failed");
    dd_wait(&a, "row." ITEMS ".state", "pending");
    dd_wait(&a, "status", "4 backfills");
    /* a pending backfill has no progress to draw: no bar, no rate, no ETA */
    dd_refute(&a, "row." ITEMS ".bar");
    assert_string_equal(dd_field(&a, "row." ITEMS ".rate"), "-");
    assert_string_equal(dd_field(&a, "row." BLOCKED ".gates"), "gates");
    assert_string_equal(dd_field(&a, "row." ITEMS ".gates"), "-");

    /* exactly the five supported controls, each asking before anything is sent */
    dd_cmd(&a, "dump");
    size_t controls = 0;
    for (const char *p = a.dump; (p = strstr(p, "\ncontrol.")) != NULL; p++)
        controls++;
    assert_int_equal(controls, 5);
    static const char *const names[] = {"start", "pause", "resume", "retry", "validate"};
    for (size_t i = 0; i < 5; i++) {
        char n[32];
        snprintf(n, sizeof n, "control.%s", names[i]);
        assert_non_null(dd_field(&a, n));
    }
    dd_do(&a, "select " ITEMS);
    dd_wait(&a, "control.start", "\tsensitive");
    dd_do(&a, "click control.start");
    dd_wait(&a, "confirm.text", "start " ITEMS "?");
    for (int i = 0; i < 3; i++) { /* three refreshes later: still pending */
        dd_cmd(&a, "dump");
        want_db_state(pg, ITEMS, "pending");
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
    }
    dd_do(&a, "click confirm.cancel");
    dd_wait(&a, "outcome", "start " ITEMS ": cancelled, nothing sent");
    want_db_state(pg, ITEMS, "pending");

    /* start: the shown transition and request id are the server's (its audit row) */
    control(&a, "start", ITEMS, "start " ITEMS ": pending -> running (request id ");
    char rid[40];
    outcome_request_id(&a, rid, sizeof rid);
    char *audit = bt_text(pg,
                          "SELECT prior_state || ' -> ' || result_state || ' ' || request_id ||"
                          " ' ' || coalesce(actor, '') FROM buzz_backfill.audit WHERE"
                          " backfill_id = '%s' AND action = 'start'",
                          ITEMS);
    char want[160];
    snprintf(want, sizeof want, "pending -> running %s operator@test", rid);
    assert_string_equal(audit, want);
    free(audit);
    want_db_state(pg, ITEMS, "running");

    /* running with progress: let some batches through, then hold them again */
    bt_unlock(holder, K_ITEMS);
    bfc_client *c = bd_client(d.ipc_url, NULL, 0, 0);
    for (int i = 0;; i++) {
        bd_get_resp *g = bd_get(c, ITEMS);
        long long covered = g->backfill->progress ? g->backfill->progress->rows_covered : 0;
        bd_free(g);
        if (covered >= 2000)
            break;
        assert_true(i < 6000);
        bd_sleep_ms(5);
    }
    bt_lock(holder, K_ITEMS); /* returns once the batch in flight committed: no more progress */
    bd_get_resp *held = bd_get(c, ITEMS);
    long long covered = held->backfill->progress->rows_covered;
    bd_free(held);
    char rows[64];
    snprintf(rows, sizeof rows, "%lld,%03lld rows", covered / 1000, covered % 1000);
    dd_wait(&a, "detail.progress", rows); /* the detail and the list of the same refresh */
    const char *bar = dd_field(&a, "row." ITEMS ".bar");
    if (bar == NULL || bar[0] != '~' || strncmp(bar, "~0%", 3) == 0)
        fail_msg("the row shows no progress bar past 0 for %s:\n%s", rows, a.dump);
    dd_wait(&a, "detail.audit.0", "start    by operator@test: pending -> running");
    shot(&a, "running");

    /* pause, answered; then retry on the paused one: refused with the server's reason */
    control(&a, "pause", PAUSED_ID, "pause " PAUSED_ID ": running -> paused (request id ");
    want_db_state(pg, PAUSED_ID, "paused");
    dd_wait(&a, "row." PAUSED_ID ".state", "paused");
    shot(&a, "paused");
    control(&a, "retry", PAUSED_ID, "retry " PAUSED_ID " refused, now paused: ");
    assert_int_equal(bd_control(c, "Retry", PAUSED_ID, NULL), BD_SC(FAILED_PRECONDITION));
    const char *reason = bfc_last_status(c)->message;
    assert_true(reason[0] != '\0');
    dd_cmd(&a, "dump");
    assert_non_null(strstr(dd_field(&a, "outcome"), reason));
    want_db_state(pg, PAUSED_ID, "paused");
    /* resume, answered, then pause again (the rest of the test shows it paused) */
    control(&a, "resume", PAUSED_ID, "resume " PAUSED_ID ": paused -> running (request id ");
    want_db_state(pg, PAUSED_ID, "running");
    control(&a, "pause", PAUSED_ID, "pause " PAUSED_ID ": running -> paused (request id ");
    want_db_state(pg, PAUSED_ID, "paused");

    /* blocked and failed with their diagnostics */
    dd_do(&a, "select " BLOCKED);
    dd_wait(&a, "detail.error", "prerequisite");
    dd_wait(&a, "detail.state", "blocked (gates readiness)");
    shot(&a, "blocked");
    dd_do(&a, "select " FAILED);
    dd_wait(&a, "detail.error", "validation");
    dd_wait(&a, "detail.validation", "failure");
    shot(&a, "failed");
    /* an explicit validation of the failed one: the outcome shown is the server's (its audit
     * row has the same request id) */
    control(&a, "validate", FAILED, "validate " FAILED);
    for (int i = 0;; i++) { /* past "sent, waiting for the answer": the answer names its id */
        dd_cmd(&a, "dump");
        const char *v = dd_field(&a, "outcome");
        if (v != NULL && strncmp(v, "validate " FAILED, strlen("validate " FAILED)) == 0 &&
            strstr(v, "(request id ") != NULL)
            break;
        if (i == DD_DEADLINE_S * 10)
            fail_msg("no answer to the validation shown: %s", v ? v : "(none)");
        struct timespec ts = {0, 100 * 1000000L}; /* a bounded poll of the window */
        nanosleep(&ts, NULL);
    }
    outcome_request_id(&a, rid, sizeof rid);
    assert_int_equal(bt_int(pg,
                            "SELECT count(*) FROM buzz_backfill.audit WHERE backfill_id = '%s'"
                            " AND action = 'validate' AND request_id = '%s'"
                            " AND actor = 'operator@test'",
                            FAILED, rid),
                     1);

    /* only the controls clicked reached the server: its audit holds them and nothing else */
    long long other = bt_int(pg, "SELECT count(*) FROM buzz_backfill.audit WHERE actor ="
                                 " 'operator@test' AND action NOT IN ('start', 'pause', 'retry',"
                                 " 'resume', 'validate')");
    assert_int_equal(other, 0);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM buzz_backfill.audit WHERE actor ="
                                " 'operator@test'"),
                     6); /* start, pause, retry, resume, pause, validate */

    /* the daemon goes: the last data stays, marked STALE; nothing claims ready or gone */
    bfc_close(c);
    bt_unlock(holder, K_ITEMS);
    bt_unlock(holder, K_PAUSED);
    dd_do(&a, "select " PAUSED_ID);
    dd_wait(&a, "detail.state", "paused");
    bd_stop(&d);
    dd_wait(&a, "status", "STALE ");
    dd_wait(&a, "status", "refresh failed: ");
    dd_wait(&a, "readiness", "READINESS UNKNOWN (was not ready ");
    dd_wait(&a, "whoami", "identity unknown (was operator@test");
    dd_wait(&a, "detail.title", "STALE ");
    assert_string_equal(dd_field(&a, "row." PAUSED_ID ".state"), "paused");
    dd_refute(&a, "0 backfills");
    dd_refute(&a, "offline");
    shot(&a, "stale");
    dd_stop(&a);
    PQfinish(holder);
    bd_suite_close(NULL, pg, false);
}

/* ---- a scripted server ------------------------------------------------------------------- */

#define FAKE_ID   "fake.items_v1"
#define FAKE_SEEN 4096

typedef struct fake_server {
    nng_socket sock;
    char url[200];
    pthread_t thread;
    pthread_mutex_t mu;
    char methods[FAKE_SEEN][48];
    char rids[FAKE_SEEN][33];
    size_t n;
    int pause_drop;  /* Pause attempts left to leave unanswered */
    int resume_drop; /* Resume attempts left to leave unanswered */
    volatile bool stop;
} fake_server;

static void fake_send(fake_server *s, const Buzz__Backfill__V1__RequestEnvelope *env, int code,
                      const ProtobufCMessage *body)
{
    Buzz__Backfill__V1__Status st = BUZZ__BACKFILL__V1__STATUS__INIT;
    st.code = code;
    Buzz__Backfill__V1__ResponseEnvelope resp = BUZZ__BACKFILL__V1__RESPONSE_ENVELOPE__INIT;
    resp.status = &st;
    uint8_t packed[4096];
    if (body != NULL) {
        assert_true(protobuf_c_message_get_packed_size(body) < sizeof packed);
        resp.has_body = true;
        resp.body.len = protobuf_c_message_pack(body, packed);
        resp.body.data = packed;
    }
    resp.has_request_id = env->has_request_id;
    resp.request_id = env->request_id;
    nng_msg *m = NULL;
    if (nng_msg_alloc(&m, buzz__backfill__v1__response_envelope__get_packed_size(&resp)) != 0)
        return;
    buzz__backfill__v1__response_envelope__pack(&resp, nng_msg_body(m));
    if (nng_sendmsg(s->sock, m, 0) != 0)
        nng_msg_free(m);
}

/* What the scripted server answers: a running backfill without progress, a readiness answer
 * without a verdict, an identity refused, and the two controls. */
static void fake_answer(fake_server *s, const Buzz__Backfill__V1__RequestEnvelope *env,
                        const char *method)
{
    static Buzz__Backfill__V1__State state = BUZZ__BACKFILL__V1__STATE__RUNNING;
    Buzz__Backfill__V1__Times t = BUZZ__BACKFILL__V1__TIMES__INIT;
    t.has_observed_at_us = true;
    t.observed_at_us = (int64_t)time(NULL) * 1000000;
    Buzz__Backfill__V1__Claim cl = BUZZ__BACKFILL__V1__CLAIM__INIT;
    cl.owner = "fake:1:w0";
    Buzz__Backfill__V1__Backfill b = BUZZ__BACKFILL__V1__BACKFILL__INIT;
    b.id = FAKE_ID;
    b.has_state = true;
    b.state = state;
    b.times = &t;
    b.claim = &cl;
    if (strcmp(method, "buzz.backfill.v1.Readiness.Check") == 0) {
        Buzz__Backfill__V1__CheckResponse r = BUZZ__BACKFILL__V1__CHECK_RESPONSE__INIT;
        fake_send(s, env, BD_SC(OK), &r.base); /* no verdict */
    } else if (strcmp(method, "buzz.backfill.v1.Admin.List") == 0) {
        Buzz__Backfill__V1__Backfill *rows[] = {&b};
        Buzz__Backfill__V1__ListResponse r = BUZZ__BACKFILL__V1__LIST_RESPONSE__INIT;
        r.n_backfills = 1;
        r.backfills = rows;
        fake_send(s, env, BD_SC(OK), &r.base);
    } else if (strcmp(method, "buzz.backfill.v1.Admin.Get") == 0) {
        Buzz__Backfill__V1__GetResponse r = BUZZ__BACKFILL__V1__GET_RESPONSE__INIT;
        r.backfill = &b;
        fake_send(s, env, BD_SC(OK), &r.base);
    } else if (strcmp(method, "buzz.backfill.v1.Admin.Audit") == 0) {
        Buzz__Backfill__V1__AuditResponse r = BUZZ__BACKFILL__V1__AUDIT_RESPONSE__INIT;
        fake_send(s, env, BD_SC(OK), &r.base);
    } else if (strcmp(method, "buzz.backfill.v1.Admin.Pause") == 0 ||
               strcmp(method, "buzz.backfill.v1.Admin.Resume") == 0) {
        bool pause = strstr(method, "Pause") != NULL;
        int *drop = pause ? &s->pause_drop : &s->resume_drop;
        pthread_mutex_lock(&s->mu);
        bool lose = *drop > 0;
        if (lose)
            (*drop)--;
        pthread_mutex_unlock(&s->mu);
        if (lose)
            return; /* the answer is lost: nothing is sent back */
        Buzz__Backfill__V1__ControlResponse r = BUZZ__BACKFILL__V1__CONTROL_RESPONSE__INIT;
        r.has_prior_state = r.has_resulting_state = true;
        r.prior_state = state;
        state = pause ? BUZZ__BACKFILL__V1__STATE__PAUSED : BUZZ__BACKFILL__V1__STATE__RUNNING;
        r.resulting_state = state;
        fake_send(s, env, BD_SC(OK), &r.base);
    } else {
        fake_send(s, env, BD_SC(UNAUTHENTICATED), NULL); /* WhoAmI, and anything else */
    }
}

static void *fake_main(void *arg)
{
    fake_server *s = arg;
    while (!s->stop) {
        nng_msg *m = NULL;
        if (nng_recvmsg(s->sock, &m, 0) != 0)
            continue; /* the receive timeout: look at stop */
        Buzz__Backfill__V1__RequestEnvelope *env =
            buzz__backfill__v1__request_envelope__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
        nng_msg_free(m);
        if (env == NULL)
            continue;
        const char *method = env->method ? env->method : "";
        pthread_mutex_lock(&s->mu);
        if (s->n < FAKE_SEEN) {
            snprintf(s->methods[s->n], sizeof s->methods[0], "%s", method);
            for (size_t i = 0; env->has_request_id && i < env->request_id.len && i < 16; i++)
                snprintf(s->rids[s->n] + 2 * i, 3, "%02x", env->request_id.data[i]);
            s->n++;
        }
        pthread_mutex_unlock(&s->mu);
        fake_answer(s, env, method);
        buzz__backfill__v1__request_envelope__free_unpacked(env, NULL);
    }
    return NULL;
}

/* The request ids of the attempts of method (their count). */
static size_t fake_attempts(fake_server *s, const char *method, char rids[][33], size_t cap)
{
    size_t k = 0;
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->n && k < cap; i++)
        if (strcmp(s->methods[i], method) == 0)
            memcpy(rids[k++], s->rids[i], 33);
    pthread_mutex_unlock(&s->mu);
    return k;
}

static void test_desktop_scripted_server(void **state)
{
    (void)state;
    static fake_server s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.mu, NULL);
    char dir[] = "/tmp/buzz-desktop-XXXXXX";
    assert_non_null(mkdtemp(dir));
    snprintf(s.url, sizeof s.url, "ipc://%s/fake.sock", dir);
    assert_int_equal(nng_rep0_open(&s.sock), 0);
    assert_int_equal(nng_listen(s.sock, s.url, NULL, 0), 0);
    assert_int_equal(nng_socket_set_ms(s.sock, NNG_OPT_RECVTIMEO, 100), 0);
    s.pause_drop = 1;  /* the first attempt's answer is lost; the client's retry gets it */
    s.resume_drop = 3; /* every attempt of the first call is lost: outcome unknown */
    assert_int_equal(pthread_create(&s.thread, NULL, fake_main, &s), 0);

    dd_x_start();
    char config[300];
    snprintf(config, sizeof config, "%s/config", dir);
    dd_app a;
    const char *args[] = {"--url", s.url, "--interval", "500ms", NULL};
    dd_start(&a, config, args);

    /* unknown stays unknown: no verdict is no verdict, no progress draws no bar and no rate,
     * a refused identity is unknown */
    dd_wait(&a, "readiness", "READINESS UNKNOWN (malformed answer: no verdict)");
    dd_wait(&a, "row." FAKE_ID ".state", "running");
    dd_wait(&a, "whoami", "identity unknown (unauthenticated");
    dd_refute(&a, "\tREADY");
    dd_refute(&a, "NOT READY");
    dd_refute(&a, "row." FAKE_ID ".bar");
    assert_string_equal(dd_field(&a, "row." FAKE_ID ".progress"), "unknown");
    assert_string_equal(dd_field(&a, "row." FAKE_ID ".rate"), "unknown");
    assert_string_equal(dd_field(&a, "row." FAKE_ID ".eta"), "unknown");
    dd_refute(&a, "0/s");
    dd_refute(&a, "0%");
    shot(&a, "unknown");

    /* a lost answer: the client library asks again with the same request id */
    control(&a, "pause", FAKE_ID, "pause " FAKE_ID ": running -> paused (request id ");
    char rids[16][33], shown[40];
    size_t n = fake_attempts(&s, "buzz.backfill.v1.Admin.Pause", rids, 16);
    assert_true(n >= 2); /* the lost one and its retry (a slow machine may need another) */
    for (size_t i = 1; i < n; i++)
        assert_string_equal(rids[i], rids[0]);
    outcome_request_id(&a, shown, sizeof shown);
    assert_string_equal(shown, rids[0]);

    /* every answer lost: the outcome is unknown (never "paused" or "running"), and Ask again
     * resends with the same request id; the answer then is shown */
    control(&a, "resume", FAKE_ID, "resume " FAKE_ID ": deadline");
    dd_wait(&a, "outcome", "(outcome unknown");
    dd_refute(&a, "-> running");
    dd_wait(&a, "outcome.ask-again", "\tsensitive");
    dd_do(&a, "click outcome.ask-again");
    dd_wait(&a, "outcome", "resume " FAKE_ID ": paused -> running (request id ");
    n = fake_attempts(&s, "buzz.backfill.v1.Admin.Resume", rids, 16);
    assert_true(n >= 4);
    for (size_t i = 1; i < n; i++)
        assert_string_equal(rids[i], rids[0]);
    outcome_request_id(&a, shown, sizeof shown);
    assert_string_equal(shown, rids[0]);
    dd_refute(&a, "outcome.ask-again");

    /* only reads and the two controls clicked reached the server */
    static const char *const allowed[] = {
        "buzz.backfill.v1.Readiness.Check", "buzz.backfill.v1.Admin.List",
        "buzz.backfill.v1.Admin.Get",       "buzz.backfill.v1.Admin.Audit",
        "buzz.backfill.v1.Admin.WhoAmI",    "buzz.backfill.v1.Admin.Pause",
        "buzz.backfill.v1.Admin.Resume"};
    pthread_mutex_lock(&s.mu);
    for (size_t i = 0; i < s.n; i++) {
        bool ok = false;
        for (size_t k = 0; k < sizeof allowed / sizeof allowed[0]; k++)
            ok = ok || strcmp(s.methods[i], allowed[k]) == 0;
        if (!ok)
            fail_msg("the desktop client sent %s", s.methods[i]);
    }
    pthread_mutex_unlock(&s.mu);

    dd_stop(&a);
    s.stop = true;
    pthread_join(s.thread, NULL);
    nng_close(s.sock);
    char rm[400];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    assert_int_equal(system(rm), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_desktop_scripted_server),
        cmocka_unit_test(test_desktop_real_daemon),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
