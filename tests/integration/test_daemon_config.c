/*
 * test_daemon_config.c - buzz-backfilld configuration (server/src/configuration/config.c) and its
 * command line: precedence defaults < file < environment < flags, file syntax with quoting and
 * comments, unknown keys and malformed lines reported with file:line, invalid values reported
 * with their origin and never echoed, validation per command, and the redaction of the
 * database password in check-config output (through the real binary as well as the function).
 *
 * What run would fail on, caught by check-config and refused by run alike (through the real
 * binary; each names the key and its origin, never the value):
 * - test_listen_port_range: config_check_listen_entry(): a port outside 1..65535 (99999).
 * - test_listen_host_resolves: config_check_host() (srv_config_check_environment): a host that
 *   does not resolve.
 * - test_ipc_directory_exists: config_check_ipc_path(): an ipc path in a missing directory.
 * - test_ipc_path_not_a_regular_file: config_check_ipc_path(): an ipc path naming a regular
 *   file, which nng would delete and replace by a socket (the file survives run here).
 * - test_database_url_port: config_check_database_url(): a non-numeric port, in URL and
 *   keyword form, and an unparsable conninfo; the password is never printed.
 * - test_audience_control_characters: bft_name_valid() in config_validate().
 * - test_key_file_modes: config_check_file(): trusted keys or revocations writable by group or
 *   others, a TLS key file accessible by group or others.
 * - test_config_file_mode: config_check_file_mode(): a configuration file writable by group or
 *   others (it can set SQL the daemon runs).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <libpq-fe.h>

#include "config.h"

static char tmpdir[64];

static int setup(void **state)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/buzz-config-XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Tests must not depend on the machine's paths (a /run/buzz-backfill left by an installed
 * package, a /tmp/x.sock of someone else): every path given to the real binary is under this
 * test's own directory, written "@T/..." and expanded here. */
static void expand_tmp(char *out, size_t cap, const char *in)
{
    size_t n = 0;
    out[0] = '\0';
    for (const char *p = in; *p != '\0'; p++) {
        const char *add = p[0] == '@' && p[1] == 'T' ? tmpdir : NULL;
        size_t len = add != NULL ? strlen(add) : 1;
        assert_true(n + len < cap);
        memcpy(out + n, add != NULL ? add : p, len);
        n += len;
        p += add != NULL ? 1 : 0;
    }
    out[n] = '\0';
}

/* Write a configuration file ("@T" expanded); returns its path (static buffer). */
static const char *write_conf(const char *name, const char *text)
{
    static char path[128];
    static char expanded[16384];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    expand_tmp(expanded, sizeof expanded, text);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(expanded, f);
    fclose(f);
    /* whatever the umask: a configuration file group or others may write is refused */
    assert_int_equal(chmod(path, 0644), 0);
    return path;
}

/* Load with argv given as a NULL-terminated list. */
static bf_err load(srv_config *cfg, char *diag, size_t cap, char *const envp[], ...)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = "buzz-backfilld";
    va_list ap;
    va_start(ap, envp);
    char *a;
    while ((a = va_arg(ap, char *)) != NULL && argc < 31)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    return srv_config_load(cfg, argc, argv, envp, diag, cap);
}

static const char base_conf[] = "# a comment line\n"
                                "\n"
                                "database_url = 'postgresql://app:pw@db/relay'\n"
                                "listen = 'ipc:///tmp/x.sock'   # trailing comment\n"
                                "ipc_boundary = on\n"
                                "threads = 3\n"
                                "workers = 5\n"
                                "log_level = debug\n"
                                "token_audience = 'from file'\n";

static void test_precedence_file_env_flags(void **state)
{
    const char *path = write_conf("prec.conf", base_conf);
    char *const envp[] = {"BUZZ_BACKFILL_WORKERS=6",
                          "BUZZ_BACKFILL_LOG_LEVEL=error",
                          "BUZZ_BACKFILL_TOKEN_AUDIENCE=",
                          "BUZZ_BACKFILL_UNRELATED=1",
                          "PATH=/bin",
                          NULL};
    srv_config cfg;
    char diag[256];
    bf_err err = load(&cfg, diag, sizeof diag, envp, "--config", (char *)path, "--log-level",
                      "warn", "check-config", NULL);
    assert_int_equal(err, BF_OK);
    assert_int_equal(cfg.command, SRV_CMD_CHECK_CONFIG);
    assert_int_equal(cfg.threads, 3);             /* file */
    assert_int_equal(cfg.workers, 6);             /* environment over file */
    assert_int_equal(cfg.log_level, BF_LOG_WARN); /* flag over environment over file */
    assert_null(cfg.token_audience);              /* an empty environment value unsets */
    assert_int_equal(cfg.lease_ms, 30000);        /* default */
    assert_string_equal(cfg.database_url, "postgresql://app:pw@db/relay");
    assert_int_equal(cfg.n_listen, 1);
    assert_string_equal(cfg.listen[0], "ipc:///tmp/x.sock");
    assert_true(cfg.ipc_boundary);
    /* origins, in table order: database_url is key 0, threads 3, workers 4 */
    char want[160];
    snprintf(want, sizeof want, "file %s:3", path);
    assert_string_equal(cfg.origin[0], want);
    snprintf(want, sizeof want, "file %s:6", path);
    assert_string_equal(cfg.origin[3], want);
    assert_string_equal(cfg.origin[4], "environment BUZZ_BACKFILL_WORKERS");
    assert_string_equal(cfg.origin[srv_config_key_index("log_level")], "flag --log-level");
    srv_config_fini(&cfg);
}

static void test_config_from_environment_path(void **state)
{
    const char *path = write_conf("envpath.conf", base_conf);
    char var[200];
    snprintf(var, sizeof var, "BUZZ_BACKFILL_CONFIG=%s", path);
    char *const envp[] = {var, NULL};
    srv_config cfg;
    char diag[256];
    assert_int_equal(load(&cfg, diag, sizeof diag, envp, NULL), BF_OK);
    assert_int_equal(cfg.command, SRV_CMD_RUN);
    assert_int_equal(cfg.threads, 3);
    assert_string_equal(cfg.config_file, path);
    srv_config_fini(&cfg);
}

static void test_quoting_and_lists(void **state)
{
    const char *path =
        write_conf("quote.conf", "database_url 'host=db password=''x y'' dbname=relay'\n"
                                 "listen = \"ipc:///tmp/a.sock , tcp://127.0.0.1:7400,,\"\n"
                                 "modules = '/opt/a.so, /opt/b # not a comment.so'\n"
                                 "trusted_keys_file = /etc/keys\n"
                                 "token_audience = relay-prod\n"
                                 "AUTO_MIGRATE = TRUE\n"
                                 "auto_backfill = 1\n"
                                 "ipc_socket_mode = '0660'\n");
    srv_config cfg;
    char diag[256];
    assert_int_equal(load(&cfg, diag, sizeof diag, NULL, "-c", (char *)path, NULL), BF_OK);
    assert_string_equal(cfg.database_url, "host=db password='x y' dbname=relay");
    assert_int_equal(cfg.n_listen, 2);
    assert_string_equal(cfg.listen[0], "ipc:///tmp/a.sock");
    assert_string_equal(cfg.listen[1], "tcp://127.0.0.1:7400");
    assert_int_equal(cfg.n_modules, 2);
    assert_string_equal(cfg.modules[1], "/opt/b # not a comment.so");
    assert_true(cfg.auto_migrate);
    assert_true(cfg.auto_backfill);
    assert_int_equal(cfg.ipc_socket_mode, 0660);
    srv_config_fini(&cfg);
}

static void test_unknown_key_names_file_and_line(void **state)
{
    const char *path = write_conf("unknown.conf", "database_url = 'postgresql://db/relay'\n"
                                                  "# comment\n"
                                                  "listen = ipc:///tmp/x.sock\n"
                                                  "\n"
                                                  "worker_count = 4\n");
    srv_config cfg;
    char diag[256] = "";
    assert_int_equal(load(&cfg, diag, sizeof diag, NULL, "--config", (char *)path, NULL),
                     BF_ERR_INVALID_ARGUMENT);
    char want[200];
    snprintf(want, sizeof want, "%s:5: unknown key \"worker_count\"", path);
    assert_string_equal(diag, want);
}

static void test_malformed_lines_name_their_line(void **state)
{
    static const struct {
        const char *text;
        const char *reason;
    } cases[] = {
        {"threads = 3\nlisten = ipc:///a, tcp://b:1\n", ":2: unexpected text after the value"},
        {"threads = 3\n\ndatabase_url = 'unterminated\n", ":3: unterminated quoted value"},
        {"threads =\n", ":1: missing value"},
        {"= 3\n", ":1: expected a key"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = write_conf("bad.conf", cases[i].text);
        srv_config cfg;
        char diag[256] = "";
        assert_int_equal(load(&cfg, diag, sizeof diag, NULL, "-c", (char *)path, NULL),
                         BF_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(diag, path));
        assert_non_null(strstr(diag, cases[i].reason));
    }
}

static void test_invalid_values_name_origin_not_value(void **state)
{
    char *const envp[] = {"BUZZ_BACKFILL_THREADS=lots-of-sekrit", NULL};
    srv_config cfg;
    char diag[256] = "";
    assert_int_equal(load(&cfg, diag, sizeof diag, envp, "--database-url", "postgresql://db/x",
                          "--listen", "ipc:///tmp/x", "--ipc-boundary", "on", NULL),
                     BF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(diag, "environment BUZZ_BACKFILL_THREADS"));
    assert_null(strstr(diag, "sekrit"));

    assert_int_equal(load(&cfg, diag, sizeof diag, NULL, "--database-url", "postgresql://db/x",
                          "--listen", "ipc:///tmp/x", "--ipc-boundary", "maybe", NULL),
                     BF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(diag, "flag --ipc-boundary"));

    assert_int_equal(load(&cfg, diag, sizeof diag, NULL, "--lease-ms", "99", NULL),
                     BF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(diag, "lease_ms must be an integer from 100"));

    assert_int_equal(load(&cfg, diag, sizeof diag, NULL, "--no-such-flag", NULL),
                     BF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(diag, "unknown option --no-such-flag"));

    assert_int_equal(load(&cfg, diag, sizeof diag, NULL, "frobnicate", NULL),
                     BF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(diag, "unknown command"));

    assert_int_equal(load(&cfg, diag, sizeof diag, NULL, "-c", "/nonexistent/x.conf", NULL),
                     BF_ERR_IO);
    assert_non_null(strstr(diag, "/nonexistent/x.conf"));
}

static void test_validation_per_command(void **state)
{
    srv_config cfg;
    char diag[256] = "";
    /* run needs a database, a listener and some authority */
    assert_int_equal(load(&cfg, diag, sizeof diag, NULL, NULL), BF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(diag, "database_url is not set"));
    assert_int_equal(
        load(&cfg, diag, sizeof diag, NULL, "--database-url", "postgresql://db/x", NULL),
        BF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(diag, "listen is not set"));
    assert_int_equal(load(&cfg, diag, sizeof diag, NULL, "--database-url", "postgresql://db/x",
                          "--listen", "ipc:///tmp/x", NULL),
                     BF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(diag, "no request can be authorized"));
    /* tokens are the only authority on tcp */
    assert_int_equal(load(&cfg, diag, sizeof diag, NULL, "--database-url", "postgresql://db/x",
                          "--listen", "tcp://127.0.0.1:1", "--ipc-boundary", "on", NULL),
                     BF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(diag, "need trusted_keys_file"));
    assert_int_equal(load(&cfg, diag, sizeof diag, NULL, "--database-url", "postgresql://db/x",
                          "--listen", "tls+tcp://127.0.0.1:1", "--trusted-keys-file", "/k",
                          "--token-audience", "a", NULL),
                     BF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(diag, "tls_cert_key_file is not set"));
    assert_int_equal(load(&cfg, diag, sizeof diag, NULL, "--database-url", "postgresql://db/x",
                          "--listen", "udp://x", "--ipc-boundary", "on", NULL),
                     BF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(diag, "expected ipc://"));
    /* migrate needs only the database */
    assert_int_equal(
        load(&cfg, diag, sizeof diag, NULL, "migrate", "--database-url", "postgresql://db/x", NULL),
        BF_OK);
    assert_int_equal(cfg.command, SRV_CMD_MIGRATE);
    srv_config_fini(&cfg);
    /* --help needs nothing */
    assert_int_equal(load(&cfg, diag, sizeof diag, NULL, "--help", NULL), BF_OK);
    assert_int_equal(cfg.command, SRV_CMD_HELP);
    srv_config_fini(&cfg);
}

static void test_redact_conninfo(void **state)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"postgresql://app:s3cret@db:5432/relay?sslmode=require",
         "postgresql://app:****@db:5432/relay?sslmode=require"},
        {"postgres://app@db/relay?password=s3cret&sslmode=require",
         "postgres://app@db/relay?password=****&sslmode=require"},
        {"postgresql://db/relay", "postgresql://db/relay"},
        {"postgresql://a:b@c@db/relay", "postgresql://a:****@db/relay"},
        {"host=db password=s3cret dbname=relay", "host=db password=**** dbname=relay"},
        {"host=db password = 's3 cr\\'et' dbname=relay", "host=db password = **** dbname=relay"},
        {"password=s3cret", "password=****"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[256];
        srv_redact_conninfo(cases[i].in, out, sizeof out);
        assert_string_equal(out, cases[i].out);
    }
    char tiny[8];
    srv_redact_conninfo("postgresql://u:s3cret@db/x", tiny, sizeof tiny);
    assert_null(strstr(tiny, "s3cret"));
}

/* Every conninfo option libpq marks as secret (PQconndefaults' dispchar "*": password,
 * sslpassword, and what a newer libpq adds) is redacted in every form the daemon accepts: URL
 * parameter (also with a percent-encoded key), key=value (bare and quoted), a dbname that is
 * itself a URL or conninfo; plus the URL userinfo, also when the password holds '?' or '#'. */
static void test_redact_conninfo_secrets(void **state)
{
    (void)state;
    PQconninfoOption *opts = PQconndefaults();
    assert_non_null(opts);
    int secrets = 0;
    bool sslpassword = false;
    for (const PQconninfoOption *o = opts; o->keyword != NULL; o++) {
        if (o->dispchar == NULL || o->dispchar[0] != '*')
            continue;
        secrets++;
        sslpassword = sslpassword || strcmp(o->keyword, "sslpassword") == 0;
        char enc[128]; /* the keyword with its first letter percent-encoded */
        snprintf(enc, sizeof enc, "%%%02X%s", (unsigned)(unsigned char)o->keyword[0],
                 o->keyword + 1);
        char forms[8][512];
        snprintf(forms[0], sizeof forms[0],
                 "postgresql://app@db/relay?%s=Zq9Secret&sslmode=require", o->keyword);
        snprintf(forms[1], sizeof forms[1], "postgres://db/relay?sslmode=require&%s=Zq9Secret",
                 enc);
        snprintf(forms[2], sizeof forms[2], "host=db %s=Zq9Secret dbname=relay", o->keyword);
        snprintf(forms[3], sizeof forms[3], "host=db %s = 'Zq9 Sec\\'ret' dbname=relay",
                 o->keyword);
        snprintf(forms[4], sizeof forms[4], "dbname=postgresql://db/relay?%s=Zq9Secret",
                 o->keyword);
        snprintf(forms[5], sizeof forms[5], "host=db dbname='%s=Zq9Secret'", o->keyword);
        snprintf(forms[6], sizeof forms[6], "postgresql://db/relay?%s=Zq9Secret%%23x#y",
                 o->keyword);
        snprintf(forms[7], sizeof forms[7], "%s=Zq9Secret", o->keyword);
        for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
            char out[512];
            srv_redact_conninfo(forms[i], out, sizeof out);
            if (strstr(out, "Zq9") != NULL || strstr(out, "Secret") != NULL ||
                strstr(out, "ret") != NULL)
                fail_msg("%s: not redacted: %s -> %s", o->keyword, forms[i], out);
        }
    }
    PQconninfoFree(opts);
    assert_true(secrets >= 2);
    assert_true(sslpassword);
    static const char *const userinfo[] = {
        "postgresql://app:Zq9?Secret@db/relay",
        "postgresql://app:Zq9#Secret@db/relay",
        "postgresql://app:Zq9%40Secret@db/relay",
        "postgresql://app:Zq9@Secret@db/relay",
    };
    for (size_t i = 0; i < sizeof userinfo / sizeof userinfo[0]; i++) {
        char out[256];
        srv_redact_conninfo(userinfo[i], out, sizeof out);
        if (strstr(out, "Zq9") != NULL || strstr(out, "Secret") != NULL)
            fail_msg("not redacted: %s -> %s", userinfo[i], out);
    }
}

/* Run the real binary; returns its exit status and its stdout in out. */
static int run_daemon(char *out, size_t cap, const char *args)
{
    char cmd[2048], expanded[1536];
    expand_tmp(expanded, sizeof expanded, args);
    /* bounded: a run that is wrongly not refused would serve until killed */
    snprintf(cmd, sizeof cmd, "env -i PATH=/usr/bin:/bin timeout 20 '%s' %s 2>&1",
             BUZZ_BACKFILLD_PATH, expanded);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void test_check_config_binary_redacts(void **state)
{
    const char *path =
        write_conf("check.conf", "database_url = 'postgresql://app:Hunter2xyz@db:5432/relay'\n"
                                 "listen = 'ipc://@T/check.sock'\n"
                                 "ipc_boundary = on\n");
    char args[256], out[8192];
    snprintf(args, sizeof args, "check-config --config '%s' --workers 7", path);
    assert_int_equal(run_daemon(out, sizeof out, args), 0);
    assert_null(strstr(out, "Hunter2xyz"));
    assert_non_null(strstr(out, "database_url = 'postgresql://app:****@db:5432/relay'"));
    assert_non_null(strstr(out, "workers = 7  # flag --workers"));
    assert_non_null(strstr(out, "threads = 4  # default"));

    /* the keyword form, from the environment */
    snprintf(args, sizeof args,
             "BUZZ_BACKFILL_DATABASE_URL='host=db password=Hunter2xyz' '%s' check-config "
             "--listen ipc://@T/c.sock --ipc-boundary on",
             BUZZ_BACKFILLD_PATH);
    char cmd[1024], expanded[512];
    expand_tmp(expanded, sizeof expanded, args);
    snprintf(cmd, sizeof cmd, "env -i %s 2>&1", expanded);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    assert_int_equal(pclose(p), 0);
    assert_null(strstr(out, "Hunter2xyz"));
    assert_non_null(strstr(out, "password=****"));

    /* invalid configuration: exit 1, reason on stderr, no secret */
    path = write_conf("invalid.conf", "database_url = 'postgresql://app:Hunter2xyz@db/relay'\n"
                                      "listen = 'ipc://@T/check.sock'\n"
                                      "ipc_boundary = on\n"
                                      "threads = many\n");
    snprintf(args, sizeof args, "check-config -c '%s'", path);
    assert_int_equal(run_daemon(out, sizeof out, args), 1);
    assert_null(strstr(out, "Hunter2xyz"));
    assert_non_null(strstr(out, ":4: threads must be an integer"));
}

/* A file of the given mode in tmpdir; returns its path (static buffer). */
static const char *write_file_mode(const char *name, const char *text, mode_t mode)
{
    const char *path = write_conf(name, text);
    assert_int_equal(chmod(path, mode), 0);
    return path;
}

/* The sample, with its system paths moved under "@T" (missing there: this machine may well have
 * /run/buzz-backfill or /etc/buzz from an installed package); returns the copy's path. */
static const char *sample_copy(void)
{
    static const char *const prefixes[] = {"/run/buzz-backfill", "/etc/buzz", "/usr/lib/buzz"};
    static char text[16384], moved[16384 + 512];
    FILE *f = fopen(BUZZ_SOURCE_DIR "/examples/buzz-backfilld.conf", "r");
    assert_non_null(f);
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';
    size_t n = 0;
    for (const char *p = text; *p != '\0';) {
        bool system_path = false;
        for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
            system_path |= strncmp(p, prefixes[i], strlen(prefixes[i])) == 0;
        assert_true(n + 3 < sizeof moved);
        if (system_path) {
            memcpy(moved + n, "@T", 2);
            n += 2;
        }
        moved[n++] = *p++;
    }
    moved[n] = '\0';
    assert_non_null(strstr(moved, "ipc://@T/run/buzz-backfill/"));
    return write_conf("sample.conf", moved);
}

/* The sample names a production host's paths: check-config says which is missing there, and
 * accepts the sample once they exist (given by flags, which override the file). */
static void test_sample_configuration_is_valid(void **state)
{
    static char out[8192];
    char args[1024];
    char sample[160];
    snprintf(sample, sizeof sample, "%s", sample_copy());
    snprintf(args, sizeof args, "check-config -c '%s'", sample);
    assert_int_equal(run_daemon(out, sizeof out, args), 1);
    assert_non_null(strstr(out, "listen entry 1: the directory of the ipc path does not exist"));
    char keys[160], revoked[160], tls[160];
    snprintf(keys, sizeof keys, "%s", write_file_mode("sample.pub", "", 0644));
    snprintf(revoked, sizeof revoked, "%s", write_file_mode("sample.revoked", "", 0644));
    snprintf(tls, sizeof tls, "%s", write_file_mode("sample.pem", "", 0600));
    snprintf(args, sizeof args,
             "check-config -c '%s' --listen 'ipc://%s/admin.sock, tls+tcp://0.0.0.0:7401' "
             "--trusted-keys-file '%s' --revoked-tokens-file '%s' --tls-cert-key-file '%s'",
             sample, tmpdir, keys, revoked, tls);
    if (run_daemon(out, sizeof out, args) != 0)
        fail_msg("check-config of the sample: %s", out);
    assert_non_null(strstr(out, "auto_backfill = on"));
}

static void test_help_documents_every_key(void **state)
{
    static const char *const keys[] = {
        "database_url",
        "listen",
        "tls_cert_key_file",
        "threads",
        "workers",
        "modules",
        "definitions_dir",
        "auto_migrate",
        "auto_backfill",
        "token_audience",
        "trusted_keys_file",
        "revoked_tokens_file",
        "ipc_boundary",
        "clock_skew_s",
        "lease_ms",
        "statement_timeout_ms",
        "lock_timeout_ms",
        "step_ms",
        "step_batches",
        "request_retention_s",
        "ipc_socket_mode",
        "max_connections",
        "max_connections_per_peer",
        "http_listen",
        "log_level",
        "log_format",
        "batch_target_ms",
        "batch_min",
        "batch_max",
        "max_rows_per_second",
        "throttle_replica_lag_bytes",
        "throttle_lock_waiters",
        "throttle_xact_age_s",
        "throttle_xid_age_pct",
        "throttle_custom_sql",
        "throttle_check_ms",
        "throttle_wait_ms",
        "throttle_latency_target_ms",
        "throttle_latency_sql",
        "throttle_rate_min",
        "throttle_rate_max",
        "throttle_rate_increase",
        "throttle_rate_decrease_pct",
        "daemon_max_rows_per_second",
        "watch_writers",
        "watch_block",
        "watch_grace_s",
        "preflight_watch_s",
    };
    assert_int_equal(sizeof keys / sizeof keys[0], SRV_CONFIG_KEYS);
    static char out[32768];
    assert_int_equal(run_daemon(out, sizeof out, "--help"), 0);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char flag[64], env[64];
        snprintf(flag, sizeof flag, "--");
        for (const char *p = keys[i]; *p; p++)
            snprintf(flag + strlen(flag), sizeof flag - strlen(flag), "%c", *p == '_' ? '-' : *p);
        snprintf(env, sizeof env, "BUZZ_BACKFILL_");
        for (const char *p = keys[i]; *p; p++)
            snprintf(env + strlen(env), sizeof env - strlen(env), "%c", *p - (*p >= 'a' ? 32 : 0));
        assert_non_null(strstr(out, keys[i]));
        assert_non_null(strstr(out, flag));
        assert_non_null(strstr(out, env));
    }
    assert_non_null(strstr(out, "check-config"));
    assert_non_null(strstr(out, "migrate"));
    assert_non_null(strstr(out, "SIGHUP"));
}

/* ---- what run would fail on ------------------------------------------------------------- */

/* check-config and run of one configuration file, both refused (exit 1) with reason and the
 * origin of the value ("file <path>:<line>") in their output, and never printing secret. */
static void refused_by_both(const char *conf_text, const char *reason, const char *secret)
{
    const char *path = write_conf("refused.conf", conf_text);
    char args[1024], origin[200];
    static char out[8192];
    snprintf(origin, sizeof origin, "file %s:", path);
    const char *commands[] = {"check-config", "run"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "%s -c '%s'", commands[i], path);
        int rc = run_daemon(out, sizeof out, args);
        if (rc != 1 || strstr(out, reason) == NULL)
            fail_msg("%s: exit %d (want 1 and \"%s\"): %s", commands[i], rc, reason, out);
        if (strstr(out, origin) == NULL)
            fail_msg("%s: the reason does not name the origin %s: %s", commands[i], origin, out);
        if (secret != NULL && strstr(out, secret) != NULL)
            fail_msg("%s printed a secret: %s", commands[i], out);
    }
}

/* A configuration with a secret in its database URL, the ipc boundary and line appended. */
static const char *conf_with(const char *line)
{
    static char text[1024];
    snprintf(text, sizeof text,
             "database_url = 'postgresql://app:Hunter2xyz@127.0.0.1:1/relay'\n"
             "ipc_boundary = on\n"
             "token_audience = aud\n"
             "%s\n",
             line);
    return text;
}

static void test_listen_port_range(void **state)
{
    (void)state;
    refused_by_both(conf_with("listen = 'ipc://@T/x.sock, tcp://127.0.0.1:99999'\n"
                              "trusted_keys_file = @T/nonexistent"),
                    "listen entry 2: port must be a number from 1 to 65535", "Hunter2xyz");
    refused_by_both(conf_with("listen = 'ipc://@T/x.sock, tcp://127.0.0.1:7x'\n"
                              "trusted_keys_file = @T/nonexistent"),
                    "listen entry 2: port must be a number from 1 to 65535", NULL);
    refused_by_both(conf_with("listen = 'tcp://127.0.0.1'\ntrusted_keys_file = @T/nonexistent"),
                    "listen entry 1: expected host:port", NULL);
}

/* log_format is text or json, from the file, the environment or a flag; anything else is
 * refused by check-config and run, naming the key and where the value came from. */
static void test_log_format(void **state)
{
    (void)state;
    srv_config cfg;
    char diag[256] = "";
    char *const envp[] = {"BUZZ_BACKFILL_LOG_FORMAT=json", NULL};
    assert_int_equal(load(&cfg, diag, sizeof diag, envp, "check-config", "--listen", "ipc:///tmp/x",
                          "--ipc-boundary", "on", "--database-url", "postgresql://db/x", NULL),
                     BF_OK);
    assert_int_equal(cfg.log_format, SRV_LOG_JSON);
    assert_string_equal(cfg.origin[srv_config_key_index("log_format")],
                        "environment BUZZ_BACKFILL_LOG_FORMAT");
    srv_config_fini(&cfg);
    assert_int_equal(load(&cfg, diag, sizeof diag, envp, "check-config", "--listen", "ipc:///tmp/x",
                          "--ipc-boundary", "on", "--database-url", "postgresql://db/x",
                          "--log-format", "text", NULL),
                     BF_OK);
    assert_int_equal(cfg.log_format, SRV_LOG_TEXT);
    srv_config_fini(&cfg);
    assert_int_equal(load(&cfg, diag, sizeof diag, NULL, "check-config", "--listen", "ipc:///tmp/x",
                          "--ipc-boundary", "on", "--database-url", "postgresql://db/x", NULL),
                     BF_OK);
    assert_int_equal(cfg.log_format, SRV_LOG_TEXT); /* the default */
    srv_config_fini(&cfg);
    assert_int_equal(load(&cfg, diag, sizeof diag, NULL, "--log-format", "xml", NULL),
                     BF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(diag, "flag --log-format: log_format must be text or json"));
    refused_by_both(conf_with("listen = 'ipc://@T/x.sock'\nlog_format = yaml"),
                    "log_format must be text or json", "Hunter2xyz");
}

/* The lease must outlast a step's CALL and a lock wait (config.c config_validate with
 * bf_config_check): a shorter one would be taken over while its owner still works. */
static void test_lease_outlasts_timeouts(void **state)
{
    (void)state;
    refused_by_both(conf_with("listen = 'ipc://@T/x.sock'\nlease_ms = 5000\n"
                              "statement_timeout_ms = 5000"),
                    "lease_ms (5000) must be longer than step_ms + statement_timeout_ms (5200)",
                    "Hunter2xyz");
    refused_by_both(conf_with("listen = 'ipc://@T/x.sock'\nlease_ms = 5000\n"
                              "statement_timeout_ms = 1000\nlock_timeout_ms = 6000"),
                    "and lock_timeout_ms (6000)", NULL);
}

static void test_listen_host_resolves(void **state)
{
    (void)state;
    char keys[160];
    snprintf(keys, sizeof keys, "%s", write_file_mode("host.pub", "", 0644));
    char line[400];
    snprintf(line, sizeof line,
             "listen = 'tcp://no-such-host.invalid:7400'\ntrusted_keys_file = '%s'", keys);
    refused_by_both(conf_with(line), "listen entry 1: the host does not resolve", "Hunter2xyz");
}

static void test_ipc_directory_exists(void **state)
{
    (void)state;
    char line[300];
    snprintf(line, sizeof line, "listen = 'ipc://%s/no-such-dir/admin.sock'", tmpdir);
    refused_by_both(conf_with(line), "listen entry 1: the directory of the ipc path does not exist",
                    "Hunter2xyz");
}

/* nng replaces whatever the ipc path names with its socket and deletes it at stop. */
static void test_ipc_path_not_a_regular_file(void **state)
{
    (void)state;
    const char *victim = write_file_mode("precious.txt", "keep me\n", 0644);
    char path[160], line[300];
    snprintf(path, sizeof path, "%s", victim);
    snprintf(line, sizeof line, "listen = 'ipc://%s'", path);
    refused_by_both(conf_with(line), "listen entry 1: the ipc path exists and is not a socket",
                    NULL);
    /* a directory and a symbolic link are refused alike */
    char link[160];
    snprintf(link, sizeof link, "%s/link.sock", tmpdir);
    assert_int_equal(symlink(path, link), 0);
    snprintf(line, sizeof line, "listen = 'ipc://%s'", link);
    refused_by_both(conf_with(line), "the ipc path exists and is not a socket", NULL);
    snprintf(line, sizeof line, "listen = 'ipc://%s'", tmpdir);
    refused_by_both(conf_with(line), "the ipc path exists and is not a socket", NULL);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char text[32] = "";
    assert_non_null(fgets(text, sizeof text, f));
    fclose(f);
    assert_string_equal(text, "keep me\n");
}

static void test_database_url_port(void **state)
{
    (void)state;
    static const char *const urls[] = {
        "postgresql://app:Hunter2xyz@db:54x2/relay",
        "postgresql://app:Hunter2xyz@db:5432,db2:abc/relay",
        "postgresql://app@db/relay?password=Hunter2xyz&port=five",
        "host=db password=Hunter2xyz port=5432x",
        "host=db port=99999 password=Hunter2xyz",
    };
    for (size_t i = 0; i < sizeof urls / sizeof urls[0]; i++) {
        char text[600];
        snprintf(text, sizeof text,
                 "database_url = '%s'\nlisten = 'ipc://@T/x.sock'\nipc_boundary = on\n", urls[i]);
        refused_by_both(text, "database_url: each port must be a number from 1 to 65535",
                        "Hunter2xyz");
    }
    refused_by_both("database_url = \"host='Hunter2xyz\"\nlisten = 'ipc://@T/x.sock'\n"
                    "ipc_boundary = on\n",
                    "database_url is not a valid libpq URL or conninfo", "Hunter2xyz");
    /* several hosts with their ports are fine */
    const char *path = write_conf("ports.conf", "database_url = 'postgresql://db:5432,db2:5433/x'\n"
                                                "listen = 'ipc://@T/x.sock'\n"
                                                "ipc_boundary = on\n");
    char args[300];
    static char out[8192];
    snprintf(args, sizeof args, "check-config -c '%s'", path);
    if (run_daemon(out, sizeof out, args) != 0)
        fail_msg("a list of ports was refused: %s", out);
}

static void test_audience_control_characters(void **state)
{
    (void)state;
    static const char *const values[] = {"relay\tprod", "relay\x7f"};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        char line[200];
        snprintf(line, sizeof line, "listen = 'ipc://@T/x.sock'\ntoken_audience = \"%s\"",
                 values[i]);
        refused_by_both(conf_with(line),
                        "token_audience must be 1 to 127 bytes without control characters", NULL);
    }
    /* from the environment, with a newline in it */
    const char *path = write_conf("aud.conf", "database_url = 'postgresql://db/x'\n"
                                              "listen = 'ipc://@T/x.sock'\n"
                                              "ipc_boundary = on\n");
    char cmd[700];
    static char out[8192];
    snprintf(cmd, sizeof cmd,
             "env -i PATH=/usr/bin:/bin BUZZ_BACKFILL_TOKEN_AUDIENCE=\"$(printf 'a\\nb')\" "
             "'%s' check-config -c '%s' 2>&1",
             BUZZ_BACKFILLD_PATH, path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 1);
    assert_non_null(strstr(out, "environment BUZZ_BACKFILL_TOKEN_AUDIENCE: token_audience must"));
}

static void test_key_file_modes(void **state)
{
    (void)state;
    static const struct {
        const char *key;
        mode_t mode;
        const char *reason;
    } cases[] = {
        {"trusted_keys_file", 0664, "trusted_keys_file: the file is writable by group or others"},
        {"trusted_keys_file", 0646, "trusted_keys_file: the file is writable by group or others"},
        {"revoked_tokens_file", 0620,
         "revoked_tokens_file: the file is writable by group or others"},
        {"revoked_tokens_file", 0602,
         "revoked_tokens_file: the file is writable by group or others"},
        {"tls_cert_key_file", 0640, "tls_cert_key_file: the file is accessible by group or others"},
        {"tls_cert_key_file", 0604, "tls_cert_key_file: the file is accessible by group or others"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char keys[160], revoked[160], tls[160], text[1200];
        snprintf(keys, sizeof keys, "%s", write_file_mode("m.pub", "", 0644));
        snprintf(revoked, sizeof revoked, "%s", write_file_mode("m.revoked", "", 0600));
        snprintf(tls, sizeof tls, "%s", write_file_mode("m.pem", "", 0600));
        const char *victim = strcmp(cases[i].key, "trusted_keys_file") == 0     ? keys
                             : strcmp(cases[i].key, "revoked_tokens_file") == 0 ? revoked
                                                                                : tls;
        assert_int_equal(chmod(victim, cases[i].mode), 0);
        snprintf(text, sizeof text,
                 "database_url = 'postgresql://db/x'\n"
                 "listen = 'ipc://%s/m.sock, tls+tcp://127.0.0.1:7401'\n"
                 "token_audience = aud\n"
                 "trusted_keys_file = '%s'\nrevoked_tokens_file = '%s'\ntls_cert_key_file = '%s'\n",
                 tmpdir, keys, revoked, tls);
        refused_by_both(text, cases[i].reason, NULL);
    }
}

/* config_check_file_mode(): a configuration file group or others may write is refused by
 * check-config and run (and by a SIGHUP reload: test_daemon_files.c), naming the file; the same
 * file with go-w is accepted. */
static void test_config_file_mode(void **state)
{
    (void)state;
    static const mode_t modes[] = {0664, 0646, 0620, 0602, 0666};
    char text[400], args[300];
    static char out[8192];
    snprintf(text, sizeof text,
             "database_url = 'postgresql://db/x'\nlisten = 'ipc://%s/c.sock'\n"
             "ipc_boundary = on\ntoken_audience = aud\n",
             tmpdir);
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        const char *path = write_file_mode("mode.conf", text, modes[i]);
        const char *commands[] = {"check-config", "run"};
        for (size_t c = 0; c < 2; c++) {
            snprintf(args, sizeof args, "%s -c '%s'", commands[c], path);
            int rc = run_daemon(out, sizeof out, args);
            if (rc != 1 || strstr(out, "the file is writable by group or others") == NULL ||
                strstr(out, path) == NULL)
                fail_msg("%s of a %04o configuration file: exit %d: %s", commands[c],
                         (unsigned)modes[i], rc, out);
        }
    }
    const char *path = write_file_mode("mode.conf", text, 0640);
    snprintf(args, sizeof args, "check-config -c '%s'", path);
    if (run_daemon(out, sizeof out, args) != 0)
        fail_msg("check-config of a 0640 configuration file: %s", out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_precedence_file_env_flags),
        cmocka_unit_test(test_config_from_environment_path),
        cmocka_unit_test(test_quoting_and_lists),
        cmocka_unit_test(test_unknown_key_names_file_and_line),
        cmocka_unit_test(test_malformed_lines_name_their_line),
        cmocka_unit_test(test_invalid_values_name_origin_not_value),
        cmocka_unit_test(test_validation_per_command),
        cmocka_unit_test(test_redact_conninfo),
        cmocka_unit_test(test_redact_conninfo_secrets),
        cmocka_unit_test(test_check_config_binary_redacts),
        cmocka_unit_test(test_sample_configuration_is_valid),
        cmocka_unit_test(test_help_documents_every_key),
        cmocka_unit_test(test_listen_port_range),
        cmocka_unit_test(test_listen_host_resolves),
        cmocka_unit_test(test_log_format),
        cmocka_unit_test(test_lease_outlasts_timeouts),
        cmocka_unit_test(test_ipc_directory_exists),
        cmocka_unit_test(test_ipc_path_not_a_regular_file),
        cmocka_unit_test(test_database_url_port),
        cmocka_unit_test(test_audience_control_characters),
        cmocka_unit_test(test_key_file_modes),
        cmocka_unit_test(test_config_file_mode),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
