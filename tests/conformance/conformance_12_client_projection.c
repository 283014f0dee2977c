/*
 * conformance_12_client_projection.c - spec conformance item 12, client projection: "the UI
 * preserves unknown and failure states and sends only supported controls".
 *
 * The dashboard and buzzctl draw only what the pure projection (projection.c, dash_view.c,
 * dash_render.c) makes of RPC results, so these tests feed it results and failures (transport:
 * unavailable, deadline, malformed; server: unauthenticated, permission denied) and assert the
 * rendered text. The control side is the client library's bfc_control() against an in-process
 * REP socket, and the dashboard's key map. The end-to-end run of `buzzctl dash` in a
 * pseudo-terminal against a real daemon is tests/integration/test_dash.c.
 *
 * Each test names the guard it proves; removing that guard makes it fail.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "buzz/backfill/v1/admin.pb-c.h"
#include "buzz/backfill/v1/readiness.pb-c.h"
#include "buzz/backfill/v1/rpc.pb-c.h"
#include "buzz/client.h"
#include "dash_view.h"
#include "projection.h"

#define ST(name) BUZZ__BACKFILL__V1__STATE__##name
#define T0       INT64_C(1767225600000000) /* 2026-01-01T00:00:00Z */

static bfc_dash_model model;
static bfc_dash_frame frame;

/* The frame as one text, lines joined by '\n'. */
static const char *screen(int rows, int cols)
{
    static char text[BFC_DASH_MAX_LINES * (BFC_DASH_LINE + 1)];
    bfc_dash_render(&model, rows, cols, &frame);
    size_t o = 0;
    for (size_t i = 0; i < frame.n; i++)
        o += (size_t)snprintf(text + o, sizeof text - o, "%s\n", frame.line[i]);
    return text;
}

static void want(const char *s, const char *what)
{
    if (strstr(s, what) == NULL)
        fail_msg("\"%s\" not on the screen:\n%s", what, s);
}

static void want_not(const char *s, const char *what)
{
    if (strstr(s, what) != NULL)
        fail_msg("\"%s\" on the screen:\n%s", what, s);
}

/* A failed call as bfc_call() reports it. */
typedef struct failure {
    const char *kind; /* what the screen must name */
    bf_err err;
    bool answered;
    int code;
    const char *transport_detail;
} failure;

static const failure failures[] = {
    {"unavailable", BF_ERR_UNAVAILABLE, false, 0, "connection refused"},
    {"deadline", BF_ERR_TIMEOUT, false, 0, "no answer in time after 3 attempt(s) in 3000 ms"},
    {"unauthenticated", BF_ERR_UNAUTHENTICATED, true,
     BUZZ__BACKFILL__V1__STATUS_CODE__UNAUTHENTICATED, ""},
    {"permission denied", BF_ERR_PERMISSION_DENIED, true,
     BUZZ__BACKFILL__V1__STATUS_CODE__PERMISSION_DENIED, ""},
    {"malformed answer", BF_ERR_IO, false, 0, "response body does not decode"},
    {"deadline", BF_ERR_TIMEOUT, true, BUZZ__BACKFILL__V1__STATUS_CODE__DEADLINE_EXCEEDED, ""},
};

static bfc_status status_of(const failure *f)
{
    bfc_status st;
    memset(&st, 0, sizeof st);
    st.answered = f->answered;
    st.code = f->code;
    st.transport = f->answered ? BF_OK : f->err;
    if (f->answered)
        snprintf(st.message, sizeof st.message, "%s", bfc_code_name(f->code));
    snprintf(st.transport_detail, sizeof st.transport_detail, "%s", f->transport_detail);
    return st;
}

/* A backfill as the server sends it. */
typedef struct fixture {
    Buzz__Backfill__V1__Backfill b;
    Buzz__Backfill__V1__Progress p;
    Buzz__Backfill__V1__Times t;
    Buzz__Backfill__V1__Claim c;
    Buzz__Backfill__V1__Validation v;
} fixture;

static void fixture_init(fixture *f, const char *id, Buzz__Backfill__V1__State state)
{
    memset(f, 0, sizeof *f);
    buzz__backfill__v1__backfill__init(&f->b);
    buzz__backfill__v1__progress__init(&f->p);
    buzz__backfill__v1__times__init(&f->t);
    buzz__backfill__v1__claim__init(&f->c);
    buzz__backfill__v1__validation__init(&f->v);
    f->b.id = (char *)id;
    f->b.has_state = true;
    f->b.state = state;
    f->b.times = &f->t;
    f->t.has_observed_at_us = true;
    f->t.observed_at_us = T0;
}

/* A worker holds it: a valid claim with 10 s left. */
static void fixture_claim(fixture *f)
{
    f->b.claim = &f->c;
    f->c.owner = "host:1:w1";
    f->c.has_valid = f->c.valid = true;
    f->c.has_expires_at_us = true;
    f->c.expires_at_us = T0 + 10000000;
}

static void fixture_progress(fixture *f, int64_t covered, int64_t estimate)
{
    f->b.progress = &f->p;
    f->p.has_rows_committed = f->p.has_rows_covered = true;
    f->p.rows_committed = f->p.rows_covered = covered;
    f->p.has_source_estimate = estimate >= 0;
    f->p.source_estimate = estimate;
}

static void apply_one(fixture *f, int64_t now)
{
    Buzz__Backfill__V1__Backfill *rows[] = {&f->b};
    bfc_dash_apply_list(&model, rows, 1, false, BF_OK, NULL, now);
}

static void apply_ready(bool ready, int64_t now)
{
    Buzz__Backfill__V1__CheckResponse r = BUZZ__BACKFILL__V1__CHECK_RESPONSE__INIT;
    r.has_ready = true;
    r.ready = ready;
    bfc_dash_apply_ready(&model, &r, BF_OK, NULL, now);
}

static int setup(void **state)
{
    (void)state;
    bfc_dash_fini(&model); /* the previous test's rows */
    bfc_dash_init(&model, "ipc:///run/buzz/backfilld.sock");
    return 0;
}

/* ---- unknown stays unknown ------------------------------------------------------------- */

/* Before any answer nothing is claimed: readiness is unknown (not "READY", not "NOT READY"),
 * the table is unknown (not "0 backfills"). Guard: render_banner()'s !ready_known branch and
 * render_status()'s !list_known branch in dash_render.c. */
static void test_nothing_known_before_the_first_answer(void **state)
{
    (void)state;
    const char *s = screen(24, 80);
    want(s, "READINESS UNKNOWN (no answer yet)");
    want(s, "backfills: unknown (no answer yet)");
    want_not(s, "\nREADY");
    want_not(s, "NOT READY");
    want_not(s, "0 backfills");
}

/* Each transport and server failure of the first read is shown as unknown with its typed
 * kind; never as ready, not ready, zero backfills or offline. Guard: bfc_fetch_error_from()'s
 * mapping in dash_view.c (answered codes and transport errors), and apply_ready/apply_list
 * leaving ready_known and list_known false on a failure. */
static void test_failures_are_typed_unknowns(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof failures / sizeof failures[0]; i++) {
        bfc_dash_fini(&model);
        bfc_dash_init(&model, "ipc:///x");
        bfc_status st = status_of(&failures[i]);
        bfc_dash_apply_ready(&model, NULL, failures[i].err, &st, T0);
        bfc_dash_apply_list(&model, NULL, 0, false, failures[i].err, &st, T0);
        const char *s = screen(24, 80);
        char w[128];
        snprintf(w, sizeof w, "READINESS UNKNOWN (%s", failures[i].kind);
        want(s, w);
        snprintf(w, sizeof w, "backfills: unknown (%s", failures[i].kind);
        want(s, w);
        want_not(s, "NOT READY");
        want_not(s, "0 backfills");
        want_not(s, "offline");
        bfc_fetch_error fe;
        bfc_fetch_error_from(&fe, failures[i].err, &st);
        assert_true(fe.kind != BFC_FETCH_OK);
        assert_true(strlen(fe.text) < BFC_DASH_ERR);
    }
}

/* An answer without a verdict is no verdict: a Check response lacking `ready` is a malformed
 * answer, not "not ready". Guard: the !resp->has_ready test in bfc_dash_apply_ready(). */
static void test_readiness_without_verdict_is_unknown(void **state)
{
    (void)state;
    Buzz__Backfill__V1__CheckResponse r = BUZZ__BACKFILL__V1__CHECK_RESPONSE__INIT;
    bfc_dash_apply_ready(&model, &r, BF_OK, NULL, T0);
    const char *s = screen(24, 80);
    want(s, "READINESS UNKNOWN (malformed answer");
    want_not(s, "NOT READY");
}

/* The gating backfills are named with their states (absent state: not registered). Guard:
 * the gating loop of bfc_dash_apply_ready() and render_banner()'s "gated by". */
static void test_gating_ids_and_states(void **state)
{
    (void)state;
    Buzz__Backfill__V1__GatingBackfill g1 = BUZZ__BACKFILL__V1__GATING_BACKFILL__INIT;
    Buzz__Backfill__V1__GatingBackfill g2 = BUZZ__BACKFILL__V1__GATING_BACKFILL__INIT;
    g1.id = "a.b_v1";
    g1.has_state = true;
    g1.state = ST(VALIDATING);
    g2.id = "c.d_v2";
    Buzz__Backfill__V1__GatingBackfill *gates[] = {&g1, &g2};
    Buzz__Backfill__V1__CheckResponse r = BUZZ__BACKFILL__V1__CHECK_RESPONSE__INIT;
    r.has_ready = true;
    r.n_gating = 2;
    r.gating = gates;
    bfc_dash_apply_ready(&model, &r, BF_OK, NULL, T0);
    want(screen(24, 100), "NOT READY: gated by 2: a.b_v1 (validating), c.d_v2 (not registered)");
}

/* No progress, progress without an estimate, and progress past the planner's estimate give
 * no bar and no percentage (never 0 % or 100 %); only a completed backfill shows done. Guard:
 * the has_fraction conditions in dash_row_update() (dash_view.c). */
static void test_progress_bar_only_when_computable(void **state)
{
    (void)state;
    fixture none, no_est, past, half, done;
    fixture_init(&none, "a.none", ST(RUNNING));
    fixture_init(&no_est, "b.no_estimate", ST(RUNNING));
    fixture_progress(&no_est, 5000, -1);
    fixture_init(&past, "c.past_estimate", ST(RUNNING));
    fixture_progress(&past, 1200, 1000);
    fixture_init(&half, "d.half", ST(RUNNING));
    fixture_progress(&half, 500, 1000);
    fixture_init(&done, "e.done", ST(COMPLETED));
    fixture_progress(&done, 1000, 900);
    Buzz__Backfill__V1__Backfill *rows[] = {&none.b, &no_est.b, &past.b, &half.b, &done.b};
    bfc_dash_apply_list(&model, rows, 5, false, BF_OK, NULL, T0);
    assert_false(model.rows[0].has_fraction);
    assert_false(model.rows[1].has_fraction);
    assert_false(model.rows[2].has_fraction);
    assert_true(model.rows[3].has_fraction);
    assert_true(model.rows[4].has_fraction);
    const char *s = screen(24, 80);
    const char *line = strstr(s, "a.none");
    assert_non_null(line);
    assert_non_null(strstr(line, "unknown"));
    line = strstr(s, "c.past_estimate");
    assert_non_null(line);
    const char *eol = strchr(line, '\n');
    assert_null(memchr(line, '[', (size_t)(eol - line)));
    assert_null(memchr(line, '%', (size_t)(eol - line)));
    want(s, "1,200 rows");
    want(s, "~50%");
    want(s, "[#########] done");
    want_not(s, "100%");
    want_not(s, " 0%");
}

/* The rate is measured over a recent window of running time: an interval with a paused (or
 * blocked) end counts neither its rows nor its time; with fewer than two running samples the
 * rate and the ETA are unknown, not 0. Guard: the `!a->running || !b->running` test in
 * bfc_rate_window() and has_rate in dash_row_update(). */
static void test_rate_excludes_paused_time(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f, "demo.items_v1", ST(RUNNING));
    fixture_progress(&f, 0, 100000);
    fixture_claim(&f);
    apply_one(&f, T0);
    assert_false(model.rows[0].has_rate);
    want(screen(24, 80), "unknown");
    /* 1 s later paused at 100; resumed 100 s later; 1 s after that at 200 */
    const struct {
        Buzz__Backfill__V1__State s;
        int64_t covered, at_s;
    } steps[] = {{ST(PAUSED), 100, 1}, {ST(RUNNING), 100, 101}, {ST(RUNNING), 200, 102}};
    for (size_t i = 0; i < 3; i++) {
        f.b.state = steps[i].s;
        f.p.rows_covered = steps[i].covered;
        f.t.observed_at_us = T0 + steps[i].at_s * 1000000;
        apply_one(&f, f.t.observed_at_us);
    }
    /* only the last interval counts: 100 rows in 1 s (since start: 200 rows in 102 s) */
    assert_true(model.rows[0].has_rate);
    assert_true(model.rows[0].rate > 99.0 && model.rows[0].rate < 101.0);
    const char *s = screen(24, 80);
    want(s, "100/s");
    /* 99,800 rows left at 100/s: an estimate, marked ~ */
    want(s, "~16m38s");
    /* the pure function on its own */
    bfc_rate_sample smp[] = {
        {T0, 0, true}, {T0 + 1000000, 1000, false}, {T0 + 9000000, 1000, true}};
    double r = -1;
    assert_false(bfc_rate_window(&r, smp, 3, BFC_DASH_RATE_WINDOW));
    assert_true(r < 0); /* not written */
}

/* Long IDs that differ only near their end stay told apart on narrow terminals: at 60
 * columns the columns right of the ID go first and then the prefix they all share is named
 * once in the header; at 40 the middle is elided and the tails stay. Guard:
 * render_plan_ids()/render_id() in dash_render.c (with one fixed layout every ID was cut to
 * its first characters: "relay.even"). */
static void test_long_ids_stay_apart(void **state)
{
    (void)state;
    fixture a, b, c;
    fixture_init(&a, "relay.events.content_length_backfill_v1", ST(PAUSED));
    fixture_init(&b, "relay.events.content_length_backfill_v2", ST(PAUSED));
    fixture_init(&c, "relay.events.pubkey_hex_normalise_v1", ST(PAUSED));
    Buzz__Backfill__V1__Backfill *rows[] = {&a.b, &b.b, &c.b};
    bfc_dash_apply_list(&model, rows, 3, false, BF_OK, NULL, T0);
    const char *s = screen(24, 100); /* wide enough: whole IDs, no header prefix */
    want(s, "> relay.events.content_length_backfill_v1 ");
    want_not(s, "ID (");
    s = screen(24, 60);
    want(s, "ID (relay.events....)");
    want(s, "> content_length_backfill_v1 ");
    want(s, "  content_length_backfill_v2 ");
    want(s, "  pubkey_hex_normalise_v1 ");
    want(s, "paused");
    s = screen(24, 40);
    want(s, "> conten..ackfill_v1 ");
    want(s, "  conten..ackfill_v2 ");
    want(s, "  pubkey..rmalise_v1 ");
}

/* A running backfill that no worker holds (no claim, or an expired one) and that waits for no
 * retry is "waiting for a worker": under its row, in its RATE cell, never a rate of 0/s even
 * after two reads without progress; with a valid claim it is not. Guard: project_waiting() in
 * projection.c and the waiting branch of dash_row_update(). */
static void test_waiting_for_a_worker(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f, "demo.items_v1", ST(RUNNING));
    fixture_progress(&f, 50, 1000);
    apply_one(&f, T0);
    f.t.observed_at_us = T0 + 2000000;
    apply_one(&f, f.t.observed_at_us);
    const char *s = screen(24, 80);
    want(s, "    waiting for a worker | retry - | error -");
    want_not(s, "0/s");
    assert_false(model.rows[0].has_rate);
    assert_true(model.rows[0].v.waiting_worker);
    /* an expired claim: still nobody works on it */
    fixture_claim(&f);
    f.c.valid = false;
    apply_one(&f, f.t.observed_at_us + 1000000);
    want(screen(24, 80), "waiting for a worker (claim expired)");
    /* a live holder: its claim, not waiting */
    f.c.valid = true;
    f.c.expires_at_us = T0 + 60000000;
    apply_one(&f, f.t.observed_at_us + 2000000);
    s = screen(24, 80);
    want(s, "claim host:1:w1");
    want_not(s, "waiting for a worker");
}

/* A failed refresh keeps the last data on screen, marked STALE with its age and the typed
 * error; readiness likewise. Guard: the failure branches of bfc_dash_apply_list() and
 * bfc_dash_apply_ready() (keep rows, set *_stale), and render_status()'s STALE line. */
static void test_failed_refresh_keeps_data_marked_stale(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f, "demo.items_v1", ST(RUNNING));
    fixture_progress(&f, 10, 100);
    apply_one(&f, T0);
    apply_ready(true, T0);
    want(screen(24, 80), "1 backfill");
    for (size_t i = 0; i < sizeof failures / sizeof failures[0]; i++) {
        bfc_status st = status_of(&failures[i]);
        bfc_dash_apply_ready(&model, NULL, failures[i].err, &st, T0 + 12000000);
        bfc_dash_apply_list(&model, NULL, 0, false, failures[i].err, &st, T0 + 12000000);
        const char *s = screen(24, 80);
        char w[128];
        snprintf(w, sizeof w, "STALE 12s: last data shown; refresh failed: %s", failures[i].kind);
        want(s, w);
        /* a verdict that could not be renewed is no verdict: unknown, with the old one's age */
        snprintf(w, sizeof w, "READINESS UNKNOWN (was ready 12s ago; %s", failures[i].kind);
        want(s, w);
        want_not(s, "\nREADY");
        want(s, "demo.items_v1");
        want(s, "running");
        assert_int_equal(model.n_rows, 1);
    }
    /* the next good read is current again */
    apply_one(&f, T0 + 13000000);
    apply_ready(true, T0 + 13000000);
    want_not(screen(24, 80), "STALE");
}

/* Claim validity the server did not state is unknown, not expired; a backfill with no claim
 * says none. Guard: the has_valid branch in bfc_project() (projection.c). */
static void test_claim_validity_unknown(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f, "demo.items_v1", ST(RUNNING));
    f.b.claim = &f.c;
    f.c.owner = "host:1:w0";
    bfc_view v;
    bfc_project(&f.b, &v);
    assert_string_equal(v.claim, "host:1:w0 (validity unknown)");
    f.c.has_valid = true;
    f.c.valid = true;
    f.c.has_expires_at_us = true;
    f.c.expires_at_us = T0 + 29000000;
    bfc_project(&f.b, &v);
    assert_string_equal(v.claim, "host:1:w0 (29s left)");
    f.b.claim = NULL;
    bfc_project(&f.b, &v);
    assert_string_equal(v.claim, "none");
}

/* Throttling is observed state: a throttled row shows its signal, value and how long (in the
 * table instead of retry and error, and in the detail), an unthrottled one "-", and a batch
 * size the server did not report is "-", never the declared size or 0. Guard: the throttle
 * branch of bfc_project() and the throttled line of render_table(). */
static void test_throttle_is_shown_only_when_known(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f, "demo.items_v1", ST(RUNNING));
    bfc_view v;
    bfc_project(&f.b, &v);
    assert_string_equal(v.throttle, "-");
    assert_string_equal(v.batch, "-");
    Buzz__Backfill__V1__Definition d = BUZZ__BACKFILL__V1__DEFINITION__INIT;
    d.has_batch_size = true;
    d.batch_size = 1000;
    f.b.definition = &d;
    f.b.has_batch_size_current = true;
    f.b.batch_size_current = 250;
    Buzz__Backfill__V1__Throttle th = BUZZ__BACKFILL__V1__THROTTLE__INIT;
    th.signal = "replica_lag";
    th.value = "301234 bytes (limit 262144)";
    th.has_since_us = true;
    th.since_us = T0 - 12000000;
    f.b.throttle = &th;
    bfc_project(&f.b, &v);
    assert_string_equal(v.batch, "250 of 1000");
    assert_string_equal(v.throttle, "replica_lag: 301234 bytes (limit 262144), 12s");
    apply_one(&f, T0);
    want(screen(24, 80), "throttled replica_lag: 301234 bytes");
    th.has_since_us = false; /* since unknown stays unknown */
    bfc_project(&f.b, &v);
    assert_string_equal(v.throttle, "replica_lag: 301234 bytes (limit 262144), unknown");
}

/* A collapse is observed state too (issue 16): a row whose live claim holder's last step was
 * much slower than its recent median shows what it saw and for how long (in the table, before
 * the throttle, and in the detail), one that is not slow "-", and an unknown start stays
 * unknown. Guard: the slow branch of bfc_project() and the slow line of render_table(). */
static void test_slow_is_shown_only_when_known(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f, "demo.items_v1", ST(RUNNING));
    bfc_view v;
    bfc_project(&f.b, &v);
    assert_string_equal(v.slow, "-");
    Buzz__Backfill__V1__Slow sl = BUZZ__BACKFILL__V1__SLOW__INIT;
    sl.value = "batch 3.2 s, median 40 ms";
    sl.has_since_us = true;
    sl.since_us = T0 - 12000000;
    f.b.slow = &sl;
    bfc_project(&f.b, &v);
    assert_string_equal(v.slow, "batch 3.2 s, median 40 ms, 12s");
    apply_one(&f, T0);
    want(screen(24, 80), "slow: batch 3.2 s, median 40 ms");
    sl.has_since_us = false; /* since unknown stays unknown */
    bfc_project(&f.b, &v);
    assert_string_equal(v.slow, "batch 3.2 s, median 40 ms, unknown");
    sl.value = NULL; /* a message without the value says nothing */
    bfc_project(&f.b, &v);
    assert_string_equal(v.slow, "-");
}

/* A blocked backfill's last error names its class and, first, the violated constraint (so a
 * cut 80-column line still says what to fix); no error is "-", never "ok". Guard: the error
 * branch of bfc_project() (projection.c) and the error cell of render_table(). */
static void test_last_error_names_its_constraint(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f, "demo.items_v1", ST(BLOCKED));
    Buzz__Backfill__V1__Diagnostic d = BUZZ__BACKFILL__V1__DIAGNOSTIC__INIT;
    d.error_class = "data_invariant";
    d.detail = "ERROR sqlstate=23514: check violation constraint=items_val_positive "
               "table=public.items";
    f.b.error = &d;
    apply_one(&f, T0);
    const char *s = screen(24, 80);
    want(s, "error data_invariant [constraint=items_val_positive]");
    f.b.error = NULL;
    f.b.state = ST(RUNNING);
    apply_one(&f, T0);
    want(screen(24, 80), "error -");
}

/* The detail view renders every typed validation outcome with its time, "never" when there
 * was none, and an outcome value it does not know as unknown (not success). Guard:
 * bfc_outcome_name() and the validation branch of bfc_project(), and the validation line of
 * render_detail(). */
static void test_validation_outcomes_are_typed(void **state)
{
    (void)state;
    static const struct {
        bool has;
        int outcome;
        const char *shown;
    } cases[] = {
        {true, BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__SUCCESS,
         "validation  success, 5.0s ago at "
         "2025-12-31T23:59:55Z"},
        {true, BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__FAILURE, "validation  failure, 5.0s ago"},
        {true, BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__CURRENT_STATE,
         "validation  current-state, 5.0s ago"},
        {true, 9, "validation  unknown, 5.0s ago"},
        {false, 0, "validation  never at never"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fixture f;
        fixture_init(&f, "demo.items_v1", ST(COMPLETED));
        if (cases[i].has) {
            f.b.last_validation = &f.v;
            f.v.has_outcome = true;
            f.v.outcome = cases[i].outcome;
            f.v.has_at_us = true;
            f.v.at_us = T0 - 5000000;
        }
        apply_one(&f, T0);
        model.show_detail = true;
        Buzz__Backfill__V1__GetResponse g = BUZZ__BACKFILL__V1__GET_RESPONSE__INIT;
        g.backfill = &f.b;
        Buzz__Backfill__V1__AuditResponse a = BUZZ__BACKFILL__V1__AUDIT_RESPONSE__INIT;
        bfc_dash_apply_detail(&model, &g, BF_OK, NULL, &a, BF_OK, T0);
        want(screen(24, 80), cases[i].shown);
        model.show_detail = false;
    }
}

/* A failed detail read keeps the last detail marked STALE; a failed audit read says the audit
 * is unknown instead of showing an empty trail. Guard: the failure branch of
 * bfc_dash_apply_detail() and audit_ok in render_detail(). */
static void test_detail_failures_stay_visible(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f, "demo.items_v1", ST(PAUSED));
    apply_one(&f, T0);
    model.show_detail = true;
    Buzz__Backfill__V1__GetResponse g = BUZZ__BACKFILL__V1__GET_RESPONSE__INIT;
    g.backfill = &f.b;
    bfc_status st = status_of(&failures[0]);
    bfc_dash_apply_detail(&model, &g, BF_OK, NULL, NULL, BF_ERR_UNAVAILABLE, T0);
    const char *s = screen(24, 80);
    want(s, "audit: unknown (read failed)");
    want_not(s, "(none)");
    bfc_dash_apply_detail(&model, NULL, BF_ERR_UNAVAILABLE, &st, NULL, BF_ERR_UNAVAILABLE,
                          T0 + 3000000);
    s = screen(24, 80);
    want(s, "STALE 3.0s: unavailable");
    want(s, "state       paused");
}

/* ---- only supported controls ----------------------------------------------------------- */

/* The client library names exactly five actions and refuses every other one before anything
 * is sent: an unsupported action sends no request at all (the REP socket receives nothing),
 * a supported one sends its method. Guard: the bfc_action_name() check at the top of
 * bfc_control() (client.c), and bfc_action_parse() accepting only the five names. */
static void test_client_sends_only_supported_controls(void **state)
{
    (void)state;
    static const char *const names[] = {"start", "pause", "resume", "retry", "validate"};
    for (int a = 1; a <= BFC_ACTION_COUNT; a++) {
        assert_string_equal(bfc_action_name(a), names[a - 1]);
        bfc_action got;
        assert_int_equal(bfc_action_parse(&got, names[a - 1]), BF_OK);
        assert_int_equal((int)got, a);
    }
    static const char *const refused[] = {"reset", "rewind", "cancel", "delete",  "complete",
                                          "Start", "force",  "",       "release", "bound"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        bfc_action got = BFC_ACTION_START;
        assert_int_equal(bfc_action_parse(&got, refused[i]), BF_ERR_INVALID_ARGUMENT);
        assert_int_equal((int)got, BFC_ACTION_START); /* untouched */
    }
    assert_null(bfc_action_name(0));
    assert_null(bfc_action_name(BFC_ACTION_COUNT + 1));
    assert_null(bfc_action_name(-1));

    char url[128];
    snprintf(url, sizeof url, "ipc:///tmp/buzz-c12-%d.sock", (int)getpid());
    nng_socket rep;
    assert_int_equal(nng_rep0_open(&rep), 0);
    assert_int_equal(nng_listen(rep, url, NULL, 0), 0);
    assert_int_equal(nng_socket_set_ms(rep, NNG_OPT_RECVTIMEO, 300), 0);
    bfc_options o = {.timeout_ms = 2000, .retries = -1};
    bfc_client *c = NULL;
    assert_int_equal(bfc_open(&c, url, &o, NULL, 0), BF_OK);
    static const int bad[] = {0, BFC_ACTION_COUNT + 1, -1, 99, 1000};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bfc_status st;
        ProtobufCMessage *out = NULL;
        assert_int_equal(bfc_control(c, bad[i], "demo.items_v1", &out, &st),
                         BF_ERR_INVALID_ARGUMENT);
        assert_null(out);
        assert_int_equal(st.attempts, 0);
        nng_msg *m = NULL;
        if (nng_recvmsg(rep, &m, 0) == 0) {
            nng_msg_free(m);
            fail_msg("action %d was sent", bad[i]);
        }
    }
    /* and a supported one goes out as its method */
    bfc_status st;
    (void)bfc_control(c, BFC_ACTION_PAUSE, "demo.items_v1", NULL, &st); /* nobody answers */
    nng_msg *m = NULL;
    assert_int_equal(nng_recvmsg(rep, &m, 0), 0);
    Buzz__Backfill__V1__RequestEnvelope *env =
        buzz__backfill__v1__request_envelope__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
    nng_msg_free(m);
    assert_non_null(env);
    assert_string_equal(env->method, "buzz.backfill.v1.Admin.Pause");
    buzz__backfill__v1__request_envelope__free_unpacked(env, NULL);
    bfc_close(c);
    nng_close(rep);
}

/* The dashboard's key map has exactly five action keys, one per supported action; an action
 * key only asks; only 'y' sends, anything else cancels with nothing sent. Guard: dash_keymap
 * in dash_view.c and the confirm_action branch of bfc_dash_key(). */
static void test_dash_keys_are_the_five_actions_with_confirmation(void **state)
{
    (void)state;
    int seen[BFC_ACTION_COUNT + 1] = {0}, mapped = 0;
    for (int key = -1; key < 0x1000; key++) {
        int a = bfc_dash_key_action(key);
        if (a == 0)
            continue;
        assert_true(a >= 1 && a <= BFC_ACTION_COUNT);
        seen[a]++;
        mapped++;
    }
    assert_int_equal(mapped, BFC_ACTION_COUNT);
    for (int a = 1; a <= BFC_ACTION_COUNT; a++)
        assert_int_equal(seen[a], 1);

    fixture f;
    fixture_init(&f, "demo.items_v1", ST(RUNNING));
    apply_one(&f, T0);
    for (int key = -1; key < 0x1000; key++) {
        int a = bfc_dash_key_action(key);
        if (a == 0)
            continue;
        assert_int_equal(bfc_dash_key(&model, key), BFC_DASH_NONE); /* asks */
        assert_int_equal(model.confirm_action, a);
        char prompt[64];
        snprintf(prompt, sizeof prompt, "%s demo.items_v1? y/n", bfc_action_name(a));
        want(screen(24, 80), prompt);
        assert_int_equal(bfc_dash_key(&model, 'n'), BFC_DASH_NONE); /* cancels */
        assert_int_equal(model.confirm_action, 0);
        want(screen(24, 80), "cancelled, nothing sent");
        bfc_dash_key(&model, key);
        assert_int_equal(bfc_dash_key(&model, 'y'), BFC_DASH_SEND);
        bfc_dash_action_done(&model, "ok");
        assert_int_equal(model.confirm_action, 0);
    }
}

/* At 80x24 (and after a resize to 40x12 or 132x50) every line fits the width, the frame the
 * height, and the key line stays on the last line. Guard: render_cell() truncation in
 * render_line() and the footer placement of bfc_dash_render(). */
static void test_frame_fits_the_terminal(void **state)
{
    (void)state;
    static fixture fs[40];
    Buzz__Backfill__V1__Backfill *rows[40];
    static char ids[40][64];
    for (int i = 0; i < 40; i++) {
        snprintf(ids[i], sizeof ids[i], "demo.a_very_long_backfill_identifier_number_%02d_v1", i);
        fixture_init(&fs[i], ids[i], ST(RUNNING));
        fixture_progress(&fs[i], 1000 * i, 100000);
        fs[i].b.claim = &fs[i].c;
        fs[i].c.owner = "a-rather-long-host-name.example.org:12345:w0";
        rows[i] = &fs[i].b;
    }
    bfc_dash_apply_list(&model, rows, 40, false, BF_OK, NULL, T0);
    static const int sizes[][2] = {{24, 80}, {12, 40}, {50, 132}, {3, 20}};
    for (size_t k = 0; k < 4; k++) {
        bfc_dash_render(&model, sizes[k][0], sizes[k][1], &frame);
        assert_true((int)frame.n <= sizes[k][0]);
        for (size_t i = 0; i < frame.n; i++) {
            size_t chars = 0;
            for (const unsigned char *p = (const unsigned char *)frame.line[i]; *p; p++)
                chars += (*p & 0xc0) != 0x80;
            if ((int)chars > sizes[k][1])
                fail_msg("%dx%d: line %zu has %zu columns: %s", sizes[k][0], sizes[k][1], i, chars,
                         frame.line[i]);
        }
        if (sizes[k][0] >= 6)
            assert_non_null(strstr(frame.line[frame.n - 1], "Enter"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_nothing_known_before_the_first_answer, setup),
        cmocka_unit_test_setup(test_failures_are_typed_unknowns, setup),
        cmocka_unit_test_setup(test_readiness_without_verdict_is_unknown, setup),
        cmocka_unit_test_setup(test_gating_ids_and_states, setup),
        cmocka_unit_test_setup(test_progress_bar_only_when_computable, setup),
        cmocka_unit_test_setup(test_rate_excludes_paused_time, setup),
        cmocka_unit_test_setup(test_long_ids_stay_apart, setup),
        cmocka_unit_test_setup(test_waiting_for_a_worker, setup),
        cmocka_unit_test_setup(test_failed_refresh_keeps_data_marked_stale, setup),
        cmocka_unit_test_setup(test_claim_validity_unknown, setup),
        cmocka_unit_test_setup(test_last_error_names_its_constraint, setup),
        cmocka_unit_test_setup(test_throttle_is_shown_only_when_known, setup),
        cmocka_unit_test_setup(test_slow_is_shown_only_when_known, setup),
        cmocka_unit_test_setup(test_validation_outcomes_are_typed, setup),
        cmocka_unit_test_setup(test_detail_failures_stay_visible, setup),
        cmocka_unit_test_setup(test_client_sends_only_supported_controls, setup),
        cmocka_unit_test_setup(test_dash_keys_are_the_five_actions_with_confirmation, setup),
        cmocka_unit_test_setup(test_frame_fits_the_terminal, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
