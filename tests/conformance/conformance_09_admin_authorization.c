/*
 * conformance_09_admin_authorization.c - spec conformance test 9, "Admin authorization",
 * through a real buzz-backfilld process over tcp:// with capability tokens and over its ipc://
 * boundary listener.
 *
 * Every refused credential (no token, a forged signature, an unknown key, a tampered token,
 * expired, not yet valid, wrong audience, revoked, a token holding only community roles or only
 * the deployment-operator role and no capability, a read-only token trying controls, a token
 * without validate trying Validate, a token without read trying reads, one without readiness
 * trying Readiness.Check) is tried on every method it must not reach. Each attempt must:
 *   - answer UNAUTHENTICATED (token problems) or PERMISSION_DENIED (missing capability);
 *   - carry no protected state: no response body, and no stable ID in message or detail;
 *   - mutate nothing: the backfill rows, the request table and the target table are byte for
 *     byte what they were before the attempt;
 *   - for controls and Validate: leave exactly one audit row under its request ID naming the
 *     action, the stable ID, the authority source (actor and "token kid=k1" when the token
 *     verified, "unauthenticated tcp addr=127.0.0.1" and no actor when it did not), no
 *     lifecycle states, and a bounded outcome with the reason and never the token; reads are
 *     not audited. (Identical unauthenticated rejections from one peer are coalesced only
 *     beyond SRV_REJECT_BURST per window; this suite makes at most four of each, so every one
 *     keeps its own row. test_dispatch_audit and test_hostile_requests cover the coalescing.)
 * A good token then controls the same rows (so the refusals above are not an artefact), and the
 * ipc boundary authorizes token-less requests audited as "ipc uid=<uid>" with no invented
 * actor, while a bad token on the ipc listener is refused, not downgraded to boundary authority.
 *
 * Guard proved: the authentication and capability checks in server/src/admin/dispatch.c
 * dispatch_run() (srv_auth_authenticate, srv_auth_authorize) before any handler is invoked,
 * and dispatch_audit() of every refused audited method. Removing the authorize check lets the
 * role-only and read-only tokens start and pause backfills; removing the rejection audit leaves
 * the audit assertions without their rows.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt.h"
#include "daemon.h"

#define PENDING "c09.items_v1"
#define RUNNING "c09.running_v1"
#define DENIED  BD_SC(PERMISSION_DENIED)
#define UNAUTH  BD_SC(UNAUTHENTICATED)
#define OK      BD_SC(OK)

static bd_daemon d;
static PGconn *pg;
static bool failed_once = true;

typedef struct cred {
    const char *name;
    bool has_token;
    char token[BFT_TOKEN_MAX + 1];
    const char *actor;  /* the audited actor; NULL when the token does not verify */
    const char *reason; /* expected in the audited outcome */
    int control;        /* expected code of Start/Pause/Resume/Retry */
    int validate;       /* of Validate */
    int read;           /* of Get/List/Audit/WhoAmI */
    int check;          /* of Readiness.Check */
} cred;

/* ---- setup ------------------------------------------------------------------------------- */

static int setup(void **state)
{
    pg = bd_suite_open("c09");
    bt_make_items(pg, "c09_items", 200);
    bd_migrate(NULL);
    return 0;
}

static int teardown(void **state)
{
    bd_suite_close(&d, pg, failed_once);
    return 0;
}

/* ---- calls ------------------------------------------------------------------------------- */

static bool is_control(const char *m)
{
    return strcmp(m, "Start") == 0 || strcmp(m, "Pause") == 0 || strcmp(m, "Resume") == 0 ||
           strcmp(m, "Retry") == 0;
}

static int call(bfc_client *c, const char *method, const char *id, ProtobufCMessage **out)
{
    const ProtobufCServiceDescriptor *admin = &buzz__backfill__v1__admin__descriptor;
    if (is_control(method))
        return bd_control(c, method, id, (bd_control_resp **)out);
    if (strcmp(method, "Validate") == 0)
        return bd_validate(c, id, (bd_validate_resp **)out);
    if (strcmp(method, "Get") == 0) {
        Buzz__Backfill__V1__GetRequest r = BUZZ__BACKFILL__V1__GET_REQUEST__INIT;
        r.id = (char *)id;
        return bd_call(c, admin, method, &r.base, out);
    }
    if (strcmp(method, "List") == 0) {
        Buzz__Backfill__V1__ListRequest r = BUZZ__BACKFILL__V1__LIST_REQUEST__INIT;
        return bd_call(c, admin, method, &r.base, out);
    }
    if (strcmp(method, "Audit") == 0) {
        Buzz__Backfill__V1__AuditRequest r = BUZZ__BACKFILL__V1__AUDIT_REQUEST__INIT;
        r.id = (char *)id;
        return bd_call(c, admin, method, &r.base, out);
    }
    if (strcmp(method, "WhoAmI") == 0) {
        Buzz__Backfill__V1__WhoAmIRequest r = BUZZ__BACKFILL__V1__WHO_AM_IREQUEST__INIT;
        return bd_call(c, admin, method, &r.base, out);
    }
    Buzz__Backfill__V1__CheckRequest r = BUZZ__BACKFILL__V1__CHECK_REQUEST__INIT;
    return bd_call(c, &buzz__backfill__v1__readiness__descriptor, "Check", &r.base, out);
}

/* Everything an unauthorized call could change. */
static char *snapshot(void)
{
    char *s = bt_text(pg, "SELECT coalesce((SELECT string_agg(row_to_json(b)::text, E'\\n'"
                          " ORDER BY b.id) FROM buzz_backfill.backfill b), '')"
                          " || (SELECT count(*) FROM buzz_backfill.request)::text"
                          " || (SELECT string_agg(coalesce(fixed, -1)::text || ':' || counter,"
                          " ',' ORDER BY id) FROM c09_items)");
    assert_non_null(s);
    return s;
}

static long long audit_rows(void)
{
    return bt_int(pg, "SELECT count(*) FROM buzz_backfill.audit");
}

/* The one audit row of a refused control attempt. */
static void assert_rejection_audited(const cred *cr, const char *method, const char *id,
                                     const char *request_id, const char *authority)
{
    assert_int_equal(
        bt_int(pg, "SELECT count(*) FROM buzz_backfill.audit WHERE request_id = '%s'", request_id),
        1);
    char action[16];
    snprintf(action, sizeof action, "%s", method);
    action[0] = (char)(action[0] - 'A' + 'a');
    char *row = bt_text(pg,
                        "SELECT action || '|' || coalesce(backfill_id, '-') || '|' ||"
                        " coalesce(actor, '-') || '|' || authority || '|' ||"
                        " coalesce(prior_state, '-') || '|' || coalesce(result_state, '-')"
                        " FROM buzz_backfill.audit WHERE request_id = '%s'",
                        request_id);
    char want[512];
    snprintf(want, sizeof want, "%s|%s|%s|%s|-|-", action, id, cr->actor ? cr->actor : "-",
             authority);
    if (strcmp(row, want) != 0)
        fail_msg("%s %s: audit row \"%s\", want \"%s\"", cr->name, method, row, want);
    free(row);
    char *outcome =
        bt_text(pg, "SELECT outcome FROM buzz_backfill.audit WHERE request_id = '%s'", request_id);
    assert_true(strlen(outcome) > 0 && strlen(outcome) < BF_DIAG_MAX);
    if (strstr(outcome, cr->reason) == NULL)
        fail_msg("%s %s: audit outcome \"%s\" lacks \"%s\"", cr->name, method, outcome, cr->reason);
    if (cr->has_token) /* no part of the token: its signature is its last 86 characters */
        assert_null(strstr(outcome, cr->token + strlen(cr->token) - 40));
    free(outcome);
}

/* One refused attempt through url. */
static void attempt(const cred *cr, const char *url, const char *authority, const char *method,
                    const char *id, int expect)
{
    bfc_client *c = bd_client(url, cr->has_token ? cr->token : NULL, 20000, -1);
    char *before = snapshot();
    long long audits = audit_rows();
    ProtobufCMessage *out = NULL;
    int code = call(c, method, id, &out);
    const bfc_status *st = bfc_last_status(c);
    if (code != expect)
        fail_msg("%s %s %s: code %d (%s: %s), want %d", cr->name, method, id, code, st->message,
                 st->detail, expect);
    /* no protected state travels */
    assert_null(out);
    assert_false(st->has_body);
    assert_null(strstr(st->message, "c09."));
    assert_null(strstr(st->detail, "c09."));
    /* nothing changed */
    char *after = snapshot();
    if (strcmp(before, after) != 0)
        fail_msg("%s %s %s mutated state:\n%s\n---\n%s", cr->name, method, id, before, after);
    free(before);
    free(after);
    if (is_control(method) || strcmp(method, "Validate") == 0) {
        assert_int_equal(audit_rows(), audits + 1);
        assert_rejection_audited(cr, method, id, bd_request_id(c), authority);
    } else {
        assert_int_equal(audit_rows(), audits); /* reads are not audited */
    }
    bfc_close(c);
}

static void attempt_all(const cred *cr)
{
    const char *authority = cr->actor ? "token kid=" BD_KID : "unauthenticated tcp addr=127.0.0.1";
    static const char *const controls[] = {"Start", "Pause", "Resume", "Retry"};
    static const char *const reads[] = {"Get", "List", "Audit", "WhoAmI"};
    for (size_t i = 0; i < 4; i++) {
        if (cr->control != OK) {
            attempt(cr, d.tcp_url, authority, controls[i], PENDING, cr->control);
            attempt(cr, d.tcp_url, authority, controls[i], RUNNING, cr->control);
        }
        if (cr->read != OK)
            attempt(cr, d.tcp_url, authority, reads[i], PENDING, cr->read);
    }
    if (cr->validate != OK) {
        attempt(cr, d.tcp_url, authority, "Validate", RUNNING, cr->validate);
        attempt(cr, d.tcp_url, authority, "Validate", PENDING, cr->validate);
    }
    if (cr->check != OK)
        attempt(cr, d.tcp_url, authority, "Check", "", cr->check);
}

/* ---- cases ------------------------------------------------------------------------------- */

static void mint(cred *cr, const bd_token_spec *spec, char *id_hex)
{
    cr->has_token = true;
    bd_mint(cr->token, sizeof cr->token, spec, id_hex);
}

static void test_refused_credentials(void **state)
{
    int64_t now = (int64_t)time(NULL);
    bft_secret *forger = NULL, *stranger = NULL;
    assert_int_equal(bft_keygen(&forger, BD_KID), BF_OK); /* same kid, not the trusted key */
    assert_int_equal(bft_keygen(&stranger, "k9"), BF_OK);
    static cred creds[14];
    int n = 0;
#define UNAUTH_CRED(nm, why)                                                                       \
    (creds[n] = (cred){.name = nm,                                                                 \
                       .reason = why,                                                              \
                       .control = UNAUTH,                                                          \
                       .validate = UNAUTH,                                                         \
                       .read = UNAUTH,                                                             \
                       .check = UNAUTH},                                                           \
     &creds[n++])
    UNAUTH_CRED("no token", "missing token");
    mint(UNAUTH_CRED("forged signature", "bad signature"),
         &(bd_token_spec){.caps = BFT_CAP_ALL, .key = forger}, NULL);
    mint(UNAUTH_CRED("unknown key", "unknown key"),
         &(bd_token_spec){.caps = BFT_CAP_ALL, .key = stranger}, NULL);
    cred *tampered = UNAUTH_CRED("tampered", "");
    mint(tampered, &(bd_token_spec){.caps = BFT_CAP_ALL}, NULL);
    char *dot = strrchr(tampered->token, '.');
    dot[1] = dot[1] == 'A' ? 'B' : 'A'; /* one signature character */
    mint(UNAUTH_CRED("expired", "expired"),
         &(bd_token_spec){.caps = BFT_CAP_ALL, .not_before = now - 7200, .expires_at = now - 3600},
         NULL);
    mint(UNAUTH_CRED("not yet valid", "not yet valid"),
         &(bd_token_spec){.caps = BFT_CAP_ALL, .not_before = now + 3600, .expires_at = now + 7200},
         NULL);
    mint(UNAUTH_CRED("wrong audience", "wrong audience"),
         &(bd_token_spec){.caps = BFT_CAP_ALL, .audience = "another-deployment"}, NULL);
    char revoked_id[BFT_TOKEN_ID_HEX];
    mint(UNAUTH_CRED("revoked", "revoked"), &(bd_token_spec){.caps = BFT_CAP_ALL}, revoked_id);
#undef UNAUTH_CRED
#define DENIED_CRED(nm, who, c, v, r, k)                                                           \
    (creds[n] = (cred){.name = nm,                                                                 \
                       .actor = who,                                                               \
                       .reason = "missing capability",                                             \
                       .control = c,                                                               \
                       .validate = v,                                                              \
                       .read = r,                                                                  \
                       .check = k},                                                                \
     &creds[n++])
    mint(DENIED_CRED("community roles only", "community@test", DENIED, DENIED, DENIED, DENIED),
         &(bd_token_spec){.actor = "community@test",
                          .roles =
                              BFT_ROLE_COMMUNITY_OWNER | BFT_ROLE_CHANNEL_ADMIN | BFT_ROLE_MEMBER},
         NULL);
    mint(DENIED_CRED("operator role only", "role@test", DENIED, DENIED, DENIED, DENIED),
         &(bd_token_spec){.actor = "role@test", .roles = BFT_ROLE_ALL}, NULL);
    mint(DENIED_CRED("read only", "reader@test", DENIED, DENIED, OK, DENIED),
         &(bd_token_spec){
             .actor = "reader@test", .caps = BFT_CAP_READ, .roles = BFT_ROLE_DEPLOYMENT_OPERATOR},
         NULL);
    mint(DENIED_CRED("no validate", "controller@test", OK, DENIED, DENIED, OK),
         &(bd_token_spec){.actor = "controller@test", .caps = BFT_CAP_CONTROL | BFT_CAP_READINESS},
         NULL);
    mint(DENIED_CRED("no readiness", "noready@test", OK, OK, OK, DENIED),
         &(bd_token_spec){.actor = "noready@test",
                          .caps = BFT_CAP_READ | BFT_CAP_CONTROL | BFT_CAP_VALIDATE},
         NULL);
#undef DENIED_CRED
    bft_secret_free(forger);
    bft_secret_free(stranger);

    bd_revoke(revoked_id);
    bd_options o = bd_defaults();
    o.definitions = "c09";
    o.workers = 0; /* serve only: rows move only when an authorized control moves them */
    bd_start(&d, &o);
    bd_wait_registered(pg, 2);
    bfc_client *ipc = bd_client(d.ipc_url, NULL, 0, 0);
    assert_int_equal(bd_control(ipc, "Start", RUNNING, NULL), OK);
    bfc_close(ipc);

    for (int i = 0; i < n; i++)
        attempt_all(&creds[i]);
    /* the tokens appear nowhere in the audit */
    for (int i = 0; i < n; i++)
        if (creds[i].has_token)
            assert_int_equal(bt_int(pg,
                                    "SELECT count(*) FROM buzz_backfill.audit WHERE"
                                    " strpos(coalesce(actor, '') || authority || outcome,"
                                    " '%s') > 0",
                                    strrchr(creds[i].token, '.') + 1),
                             0);

    /* a read-only token reads (protected state for the capability that allows it) */
    bfc_client *reader = bd_client(d.tcp_url, creds[10].token, 0, 0);
    bd_get_resp *g = bd_get(reader, PENDING);
    assert_int_equal(g->backfill->state, BD_ST(PENDING));
    bd_free(g);
    bfc_close(reader);
}

static void test_authorized_token_controls(void **state)
{
    bfc_client *op = bd_client(d.tcp_url, bd_token(BFT_CAP_ALL), 0, 0);
    bd_control_resp *cr = NULL;
    assert_int_equal(bd_control(op, "Start", PENDING, &cr), OK);
    assert_int_equal(cr->outcome, BUZZ__BACKFILL__V1__CONTROL_OUTCOME__ACCEPTED);
    assert_int_equal(cr->resulting_state, BD_ST(RUNNING));
    bd_free(cr);
    char *row = bt_text(pg,
                        "SELECT coalesce(actor, '-') || '|' || authority || '|' || prior_state"
                        " || '|' || result_state || '|' || generation FROM buzz_backfill.audit"
                        " WHERE request_id = '%s'",
                        bd_request_id(op));
    assert_string_equal(row, "operator@test|token kid=" BD_KID "|pending|running|1");
    free(row);
    bfc_close(op);
}

static void test_ipc_boundary(void **state)
{
    char uid_authority[64];
    snprintf(uid_authority, sizeof uid_authority, "ipc uid=%ld", (long)getuid());
    bfc_client *ipc = bd_client(d.ipc_url, NULL, 0, 0);
    Buzz__Backfill__V1__WhoAmIRequest wreq = BUZZ__BACKFILL__V1__WHO_AM_IREQUEST__INIT;
    Buzz__Backfill__V1__WhoAmIResponse *who = NULL;
    assert_int_equal(bd_call(ipc, &buzz__backfill__v1__admin__descriptor, "WhoAmI", &wreq.base,
                             (ProtobufCMessage **)&who),
                     OK);
    assert_null(who->actor); /* no invented actor */
    assert_string_equal(who->authority, uid_authority);
    bd_free(who);

    assert_int_equal(bd_control(ipc, "Pause", RUNNING, NULL), OK);
    char *row = bt_text(pg,
                        "SELECT coalesce(actor, '-') || '|' || authority || '|' || prior_state"
                        " || '|' || result_state FROM buzz_backfill.audit WHERE request_id = '%s'",
                        bd_request_id(ipc));
    char want[128];
    snprintf(want, sizeof want, "-|%s|running|paused", uid_authority);
    assert_string_equal(row, want);
    free(row);
    assert_int_equal(bd_control(ipc, "Resume", RUNNING, NULL), OK);
    bfc_close(ipc);

    /* a bad token on the ipc listener is refused, never downgraded to boundary authority */
    bft_secret *forger = NULL;
    assert_int_equal(bft_keygen(&forger, BD_KID), BF_OK);
    cred forged = {.name = "forged on ipc", .reason = "bad signature"};
    mint(&forged, &(bd_token_spec){.caps = BFT_CAP_ALL, .key = forger}, NULL);
    bft_secret_free(forger);
    char unauth[96];
    snprintf(unauth, sizeof unauth, "unauthenticated ipc uid=%ld", (long)getuid());
    attempt(&forged, d.ipc_url, unauth, "Pause", RUNNING, UNAUTH);
    attempt(&forged, d.ipc_url, unauth, "Get", RUNNING, UNAUTH);
    bd_stop(&d);
    failed_once = false;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused_credentials),
        cmocka_unit_test(test_authorized_token_controls),
        cmocka_unit_test(test_ipc_boundary),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
