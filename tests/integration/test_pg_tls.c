/*
 * test_pg_tls.c - buzz-backfilld over TLS to PostgreSQL (issue 20 item 5), against the scratch
 * cluster of scripts/pg.sh tls-start: ssl = on, over TCP only TLS with a password
 * (scram-sha-256), a CA and a server certificate for "localhost" made by openssl.
 *
 *   verify-full        a daemon whose database_url (a URL with the password in it) has
 *                      sslmode=verify-full and the cluster's CA migrates, registers, and runs a
 *                      backfill started over its admin API to completion; every one of its
 *                      sessions the server lists uses TLS; readiness is ready.
 *   wrong CA           the same with a CA the test made (openssl) that did not sign the
 *                      server's certificate, and the keyword form (password=...): the daemon
 *                      logs "certificate verify failed", never completes its startup, readiness
 *                      says the database is unreachable and Admin.Get answers UNAVAILABLE.
 *   wrong host name    host=wrong.buzz.invalid (hostaddr still 127.0.0.1, so the same server):
 *                      the daemon logs that the certificate does not match the host name, the
 *                      same refusal.
 *   no secret          check-config of each configuration and every daemon's log hold neither
 *                      the password nor a line of the server's or the CA's private key; the
 *                      password shows as **** in check-config.
 *
 * Guards proved: libpq's verify-full under the daemon (the refusals are the daemon's database
 * errors, typed UNAVAILABLE, with libpq's reason in the log only) and the redaction of
 * database_url in check-config and the log (config_redact.c): with check-config printing the
 * URL's password unredacted the URL-form cases fail (seen, in a copy of the tree: at the
 * "****" assertion of assert_no_secret, the password printed in its place; the keyword-form
 * wrong-CA case still passes).
 *
 * Without openssl or the server binaries (scripts/deps.sh) the tests are skipped, saying so.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt.h"
#include "daemon.h"

#define ID   "c09.items_v1"
#define ROWS 300

static bool available;
static char password[128], port[16], ca[512], certs[512];
static char db[64];
static PGconn *pg; /* to the TLS cluster's test database, over verify-full */
static int passed;

/* ---- the TLS cluster ---------------------------------------------------------------------- */

static void tls_stop(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s/scripts/pg.sh' tls-stop >/dev/null", BUZZ_SOURCE_DIR);
    assert_int_equal(system(cmd), 0);
}

/* A URL to dbname over verify-full with host and CA file as given. */
static void url_of(char *out, size_t cap, const char *host, const char *cafile, const char *dbname)
{
    snprintf(out, cap,
             "postgresql://postgres:%s@%s:%s/%s?hostaddr=127.0.0.1&sslmode=verify-full"
             "&sslrootcert=%s",
             password, host, port, dbname, cafile);
}

/* The same in the keyword form (password=...). */
static void keywords_of(char *out, size_t cap, const char *host, const char *cafile)
{
    snprintf(out, cap,
             "host=%s hostaddr=127.0.0.1 port=%s user=postgres password=%s dbname=%s"
             " sslmode=verify-full sslrootcert=%s",
             host, port, password, db, cafile);
}

static int setup(void **state)
{
    (void)state;
    available = system("command -v openssl >/dev/null 2>&1") == 0;
    if (!available)
        return 0;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s/scripts/pg.sh' tls-start", BUZZ_SOURCE_DIR);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char url[1024] = "";
    if (fgets(url, sizeof url, p) == NULL || fgets(ca, sizeof ca, p) == NULL)
        url[0] = ca[0] = '\0';
    assert_int_equal(pclose(p), 0);
    url[strcspn(url, "\n")] = '\0';
    ca[strcspn(ca, "\n")] = '\0';
    assert_true(ca[0] == '/');
    snprintf(certs, sizeof certs, "%.*s", (int)(strrchr(ca, '/') - ca), ca);
    PQconninfoOption *opts = PQconninfoParse(url, NULL);
    assert_non_null(opts);
    for (PQconninfoOption *o = opts; o->keyword != NULL; o++) {
        if (o->val != NULL && strcmp(o->keyword, "password") == 0)
            snprintf(password, sizeof password, "%s", o->val);
        if (o->val != NULL && strcmp(o->keyword, "port") == 0)
            snprintf(port, sizeof port, "%s", o->val);
    }
    PQconninfoFree(opts);
    assert_true(strlen(password) >= 16 && port[0] != '\0');

    PGconn *admin = PQconnectdb(url);
    assert_int_equal(PQstatus(admin), CONNECTION_OK);
    snprintf(db, sizeof db, "bt_pg_tls_%ld", (long)getpid());
    bt_exec(admin, "SET client_min_messages = warning");
    bt_exec(admin, "DROP DATABASE IF EXISTS %s", db);
    bt_exec(admin, "CREATE DATABASE %s TEMPLATE template0", db);
    PQfinish(admin);
    char dburl[1024];
    url_of(dburl, sizeof dburl, "localhost", ca, db);
    pg = PQconnectdb(dburl);
    assert_int_equal(PQstatus(pg), CONNECTION_OK);
    bt_make_items(pg, "c09_items", ROWS);
    bd_setup("pg_tls");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (!available)
        return 0;
    PQfinish(pg);
    tls_stop(); /* the cluster and its database go together */
    bd_teardown(passed != 3);
    return 0;
}

/* ---- secrets ------------------------------------------------------------------------------ */

/* Does the file at path contain text? */
static bool file_contains(const char *path, const char *text)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return strstr(buf, text) != NULL;
}

/* The first base64 line of the private key in certs/name (a secret a log must never hold). */
static void key_line(char *out, size_t cap, const char *name)
{
    char path[640];
    snprintf(path, sizeof path, "%s/%s", certs, name);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[256] = "";
    while (fgets(line, sizeof line, f) != NULL && strncmp(line, "-----", 5) == 0)
        ;
    fclose(f);
    line[strcspn(line, "\n")] = '\0';
    assert_true(strlen(line) > 20);
    snprintf(out, cap, "%s", line);
}

/* check-config of d's configuration: exit 0, the database_url shown redacted, and d's log and
 * that output without the password or a line of either private key. */
static void assert_no_secret(const bd_daemon *d)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "env -i PATH=/usr/bin:/bin timeout 20 '%s' --config '%s' check-config 2>&1",
             BUZZ_BACKFILLD_PATH, d->config);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    static char out[65536];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_non_null(strstr(out, "database_url = "));
    assert_non_null(strstr(out, "****"));
    assert_non_null(strstr(out, "sslmode=verify-full")); /* the rest of the URL is shown */
    char server_key[256], ca_key[256];
    key_line(server_key, sizeof server_key, "server.key");
    key_line(ca_key, sizeof ca_key, "ca.key");
    const char *secrets[] = {password, server_key, ca_key, "PRIVATE KEY"};
    for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++) {
        assert_null(strstr(out, secrets[i]));
        assert_false(file_contains(d->log, secrets[i]));
    }
}

/* ---- verify-full: a backfill to completion ------------------------------------------------ */

static void test_verify_full_runs_a_backfill(void **state)
{
    (void)state;
    if (!available) {
        printf("skipped: openssl is not installed (scripts/deps.sh installs it)\n");
        passed++;
        skip();
    }
    char conninfo[1024];
    url_of(conninfo, sizeof conninfo, "localhost", ca, db);
    bd_migrate(conninfo);
    bd_options o = bd_defaults();
    o.conninfo = conninfo;
    o.definitions = "c09";
    bd_daemon d;
    bd_start(&d, &o);
    bd_wait_log(&d, "registered 2 definitions");
    bfc_client *c = bd_client(d.ipc_url, NULL, 30000, 3);
    assert_int_equal(bd_control(c, "Start", ID, NULL), BD_SC(OK));
    bd_free(bd_wait_state(c, ID, BD_ST(COMPLETED)));
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM c09_items WHERE fixed IS DISTINCT FROM"
                                " val * 2 OR counter IS DISTINCT FROM 1"),
                     0);
    /* every session of the daemon the server lists is a TLS one (pg_hba refuses others too) */
    assert_true(bt_int(pg,
                       "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING"
                       " (pid) WHERE a.application_name LIKE 'buzz-backfill %%' AND s.ssl") > 0);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING"
                                " (pid) WHERE a.application_name LIKE 'buzz-backfill %%'"
                                " AND NOT s.ssl"),
                     0);
    bd_check_resp *r = bd_check(c, 0);
    assert_true(r->ready);
    bd_free(r);
    bfc_close(c);
    bd_stop(&d);
    assert_no_secret(&d);
    passed++;
}

/* ---- refusals: a wrong CA, a wrong host name ---------------------------------------------- */

/* A daemon on conninfo: it logs reason, never completes its startup, the database is not ready
 * and an admin call answers UNAVAILABLE; nothing secret in its log or check-config. */
static void assert_refused(const char *conninfo, const char *reason)
{
    bd_options o = bd_defaults();
    o.conninfo = conninfo;
    o.definitions = "c09";
    bd_daemon d;
    bd_start(&d, &o);
    bd_wait_log(&d, reason);
    assert_true(bd_log_contains(&d, "could not connect to database"));
    assert_false(bd_log_contains(&d, "startup complete"));
    bfc_client *c = bd_client(d.ipc_url, NULL, 20000, -1);
    bd_check_resp *r = bd_check(c, 0);
    assert_false(r->ready);
    const Buzz__Backfill__V1__Component *db_comp = bd_component(r, "database");
    assert_int_not_equal(db_comp->status, BD_CS(READY));
    assert_string_equal(db_comp->reason, "database unreachable");
    bd_free(r);
    Buzz__Backfill__V1__GetRequest get = BUZZ__BACKFILL__V1__GET_REQUEST__INIT;
    get.id = (char *)ID;
    assert_int_equal(bd_call(c, &buzz__backfill__v1__admin__descriptor, "Get", &get.base, NULL),
                     BD_SC(UNAVAILABLE));
    bfc_close(c);
    bd_stop(&d);
    assert_no_secret(&d);
}

static void test_wrong_ca_refused(void **state)
{
    (void)state;
    if (!available) {
        printf("skipped: openssl is not installed (scripts/deps.sh installs it)\n");
        passed++;
        skip();
    }
    char cmd[1024], wrong[512];
    snprintf(wrong, sizeof wrong, "%s/wrong-ca.crt", bd_dir());
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1"
             " -subj '/CN=not the buzz-backfill test CA' -keyout '%s/wrong-ca.key' -out '%s'"
             " >/dev/null 2>&1",
             bd_dir(), wrong);
    assert_int_equal(system(cmd), 0);
    char conninfo[1024];
    keywords_of(conninfo, sizeof conninfo, "localhost", wrong);
    assert_refused(conninfo, "certificate verify failed");
    passed++;
}

static void test_wrong_host_name_refused(void **state)
{
    (void)state;
    if (!available) {
        printf("skipped: openssl is not installed (scripts/deps.sh installs it)\n");
        passed++;
        skip();
    }
    char conninfo[1024];
    url_of(conninfo, sizeof conninfo, "wrong.buzz.invalid", ca, db);
    assert_refused(conninfo, "does not match host name \"wrong.buzz.invalid\"");
    passed++;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verify_full_runs_a_backfill),
        cmocka_unit_test(test_wrong_ca_refused),
        cmocka_unit_test(test_wrong_host_name_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
