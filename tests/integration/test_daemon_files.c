/*
 * test_daemon_files.c - file permissions of a running buzz-backfilld (a real daemon,
 * tests/support/daemon.h): a SIGHUP reload of trusted keys or revocations that group or others
 * may write is refused like an invalid file, and the keys and revocations in force stay as they
 * were; once the mode is fixed, the same reload applies. (Refusals at startup, through the real
 * binary's check-config and run, are in test_daemon_config.c; the seam itself in
 * tests/unit/test_auth.c.)
 *
 * Guard proved: auth_file_private() in server/src/admin/auth.c's loading of both files, on the
 * SIGHUP path (srv_auth_reload); without it the writable keys file retires the key in force
 * and the writable revocations revoke the token. And config.c config_check_file_mode() on the
 * same path: a configuration file group or others may write is refused by the reload.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "daemon.h"

static PGconn *pg;
static bd_daemon d;

static int whoami(const char *token)
{
    bfc_client *c = bd_client(d.tcp_url, token, 5000, 0);
    Buzz__Backfill__V1__WhoAmIRequest req = BUZZ__BACKFILL__V1__WHO_AM_IREQUEST__INIT;
    int code = bd_call(c, &buzz__backfill__v1__admin__descriptor, "WhoAmI", &req.base, NULL);
    bfc_close(c);
    return code;
}

/* Lines of the daemon's log containing text. */
static int count_lines(const char *text)
{
    FILE *f = fopen(d.log, "r");
    if (f == NULL)
        return 0;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f) != NULL)
        n += strstr(line, text) != NULL;
    fclose(f);
    return n;
}

/* SIGHUP, then wait until the daemon logged one more failed reload; it must name why. */
static void reload_refused(const char *why)
{
    const char *failed = "SIGHUP: reload failed, previous keys stay in force";
    int before = count_lines(failed);
    assert_int_equal(kill(d.pid, SIGHUP), 0);
    for (int i = 0; count_lines(failed) == before; i++) {
        if (i > 6000)
            fail_msg("the daemon did not report the refused reload; see %s", d.log);
        bd_sleep_ms(10);
    }
    assert_true(bd_log_contains(&d, why));
}

static void test_reload_refuses_writable_files(void **state)
{
    (void)state;
    bd_options o = bd_defaults();
    o.workers = 0;
    bd_start(&d, &o);
    char keys[200], revoked[200], diag[256] = "";
    snprintf(keys, sizeof keys, "%s/trusted.pub", bd_dir());
    snprintf(revoked, sizeof revoked, "%s/revoked", bd_dir());
    /* the test key's line, to put back later */
    char saved[512] = "";
    FILE *f = fopen(keys, "r");
    assert_non_null(f);
    size_t saved_len = fread(saved, 1, sizeof saved - 1, f);
    fclose(f);
    saved[saved_len] = '\0';
    char t1[BFT_TOKEN_MAX + 1], id1[33];
    bd_token_spec spec = {.caps = BFT_CAP_READ};
    bd_mint(t1, sizeof t1, &spec, id1);
    assert_int_equal(whoami(t1), BD_SC(OK));

    /* a keys file that would retire the key in force, writable by the group: refused */
    bft_secret *other = NULL;
    assert_int_equal(bft_keygen(&other, "k2"), BF_OK);
    assert_int_equal(remove(keys), 0);
    if (bft_public_save(other, keys, diag, sizeof diag) != BF_OK)
        fail_msg("cannot write the keys file: %s", diag);
    bft_secret_free(other);
    assert_int_equal(chmod(keys, 0664), 0);
    reload_refused("is writable by group or others");
    assert_int_equal(whoami(t1), BD_SC(OK));
    /* fixed: the same file applies, and the old key is gone */
    assert_int_equal(chmod(keys, 0644), 0);
    bd_reload(&d);
    assert_int_equal(whoami(t1), BD_SC(UNAUTHENTICATED));

    /* back to the test key; then revocations writable by others that would revoke t2 */
    f = fopen(keys, "w");
    assert_non_null(f);
    fputs(saved, f);
    fclose(f);
    bd_reload(&d);
    char t2[BFT_TOKEN_MAX + 1], id2[33];
    bd_mint(t2, sizeof t2, &spec, id2);
    assert_int_equal(whoami(t2), BD_SC(OK));
    bd_revoke(id2);
    assert_int_equal(chmod(revoked, 0646), 0);
    reload_refused("is writable by group or others");
    assert_int_equal(whoami(t2), BD_SC(OK));
    assert_int_equal(chmod(revoked, 0644), 0);
    bd_reload(&d);
    assert_int_equal(whoami(t2), BD_SC(UNAUTHENTICATED));
    bd_stop(&d);
}

/* A SIGHUP reload of a configuration file that group or others may write is refused
 * (config.c config_check_file_mode on the reload path, startup.c signals_reload_throttle): the
 * throttle settings in force stay; once the mode is fixed the same file applies. Without the
 * check the writable file's settings would be taken. */
static void test_reload_refuses_writable_config(void **state)
{
    (void)state;
    bd_options o = bd_defaults();
    o.workers = 0;
    bd_start(&d, &o);
    const char *refused = "SIGHUP: configuration refused, the previous throttle settings stay";
    const char *applied = "SIGHUP: throttle settings reloaded";
    FILE *f = fopen(d.config, "a");
    assert_non_null(f);
    fputs("throttle_custom_sql = 'SELECT true'\n", f);
    fclose(f);
    assert_int_equal(chmod(d.config, 0666), 0);
    int before = count_lines(refused), applied_before = count_lines(applied);
    assert_int_equal(kill(d.pid, SIGHUP), 0);
    for (int i = 0; count_lines(refused) == before; i++) {
        if (i > 6000 || count_lines(applied) != applied_before)
            fail_msg("the daemon did not refuse the writable configuration; see %s", d.log);
        bd_sleep_ms(10);
    }
    assert_true(bd_log_contains(&d, "the file is writable by group or others"));
    assert_int_equal(chmod(d.config, 0644), 0);
    assert_int_equal(kill(d.pid, SIGHUP), 0);
    for (int i = 0; count_lines(applied) == applied_before; i++) {
        if (i > 6000)
            fail_msg("the daemon did not reload the fixed configuration; see %s", d.log);
        bd_sleep_ms(10);
    }
    bd_stop(&d);
}

static int group_setup(void **state)
{
    (void)state;
    pg = bd_suite_open("files");
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
        cmocka_unit_test(test_reload_refuses_writable_files),
        cmocka_unit_test(test_reload_refuses_writable_config),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
