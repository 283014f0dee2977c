/*
 * config.c - buzz-backfilld configuration: the key table, the key = value file parser
 * (postgresql.conf style), BUZZ_BACKFILL_<KEY> environment overrides, getopt_long flags,
 * validation per command, --help, and the redacted effective configuration of check-config.
 *
 * Design notes: values are collected as text per key with their origin, in precedence order
 * (defaults, file, environment, flags), and converted to typed fields once at the end, so an
 * invalid value is reported once, naming where it came from. An empty value means "not set"
 * (an environment variable set to "" unsets a file value). Values are never echoed in errors:
 * any of them may be a secret.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <libpq-fe.h>

#include "buzz/token.h"
#include "config.h"

#define CONFIG_ENV_PREFIX "BUZZ_BACKFILL_"
#define CONFIG_LINE_MAX   65536
#define CONFIG_OPT_BASE   1000

typedef enum key_type {
    KT_STRING,
    KT_LIST,
    KT_INT,
    KT_BOOL,
    KT_LEVEL,
    KT_MODE,
    KT_FORMAT
} key_type;

typedef struct key_def {
    const char *name;
    key_type type;
    const char *def; /* default as text; NULL = not set */
    int min, max;    /* KT_INT */
    const char *metavar;
    const char *help;
    size_t off;       /* field in srv_config */
    size_t count_off; /* KT_LIST: the size_t count field */
} key_def;

#define F(field)   offsetof(srv_config, field)
#define NOCOUNT    0
#define SECRET_KEY "database_url"

static const key_def config_keys[] = {
    {"database_url", KT_STRING, NULL, 0, 0, "URL",
     "PostgreSQL connection: a libpq URL or key=value conninfo (required). The password is "
     "never printed.",
     F(database_url), NOCOUNT},
    {"listen", KT_LIST, NULL, 0, 0, "URL,...",
     "Admin listeners: comma-separated ipc:///path, tcp://host:port and tls+tcp://host:port "
     "(required for run).",
     F(listen), F(n_listen)},
    {"tls_cert_key_file", KT_STRING, NULL, 0, 0, "FILE",
     "PEM file with the certificate chain and private key for tls+tcp:// listeners.",
     F(tls_cert_key_file), NOCOUNT},
    {"threads", KT_INT, "4", 1, 256, "N", "Transport threads: requests served concurrently.",
     F(threads), NOCOUNT},
    {"workers", KT_INT, "2", 0, 256, "N",
     "Worker threads: backfills advanced concurrently by this process (0: serve only).", F(workers),
     NOCOUNT},
    {"modules", KT_LIST, NULL, 0, 0, "PATH,...",
     "Definitions modules (shared objects exporting buzz_backfill_module), comma-separated.",
     F(modules), F(n_modules)},
    {"definitions_dir", KT_STRING, NULL, 0, 0, "DIR",
     "Directory of definition files (*.def, one definition each), loaded at startup; not "
     "writable by group or others.",
     F(definitions_dir), NOCOUNT},
    {"auto_migrate", KT_BOOL, "off", 0, 0, "on|off",
     "Apply the engine's schema migrations at startup; off: only check that they are applied.",
     F(auto_migrate), NOCOUNT},
    {"auto_backfill", KT_BOOL, "off", 0, 0, "on|off",
     "Automatic mode: start pending required backfills at startup and gate readiness until "
     "they complete; off: manual mode, no gate.",
     F(auto_backfill), NOCOUNT},
    {"token_audience", KT_STRING, NULL, 0, 0, "NAME",
     "Audience capability tokens must name (required with trusted_keys_file).", F(token_audience),
     NOCOUNT},
    {"trusted_keys_file", KT_STRING, NULL, 0, 0, "FILE",
     "Trusted token keys, one \"<key id> <base64url Ed25519 public key>\" per line; reloaded "
     "on SIGHUP.",
     F(trusted_keys_file), NOCOUNT},
    {"revoked_tokens_file", KT_STRING, NULL, 0, 0, "FILE",
     "Revoked token IDs, one lower-case hex ID per line; reloaded on SIGHUP.",
     F(revoked_tokens_file), NOCOUNT},
    {"ipc_boundary", KT_BOOL, "off", 0, 0, "on|off",
     "Requests without a token on ipc:// listeners get boundary authority (all capabilities), "
     "audited with the peer uid. Protect the socket with file permissions.",
     F(ipc_boundary), NOCOUNT},
    {"clock_skew_s", KT_INT, "30", 1, 3600, "SECONDS",
     "Tolerated clock skew on token not-before and expiry.", F(clock_skew_s), NOCOUNT},
    {"lease_ms", KT_INT, "30000", 100, 3600000, "MS",
     "Claim lease: a crashed worker's backfill can be taken over after this long.", F(lease_ms),
     NOCOUNT},
    {"statement_timeout_ms", KT_INT, "10000", 1, 3600000, "MS",
     "statement_timeout of each batch and validation statement.", F(statement_timeout_ms), NOCOUNT},
    {"lock_timeout_ms", KT_INT, "2000", 1, 3600000, "MS",
     "lock_timeout of each batch and validation statement.", F(lock_timeout_ms), NOCOUNT},
    {"step_ms", KT_INT, "200", 1, 60000, "MS",
     "A worker step (one CALL of a declarative definition's batch loop inside PostgreSQL) "
     "starts no batch after this long.",
     F(step_ms), NOCOUNT},
    {"step_batches", KT_INT, "1000", 1, 1000000, "N",
     "Batches one worker step may commit (1: one round trip per batch).", F(step_batches), NOCOUNT},
    {"request_retention_s", KT_INT, "86400", 60, 31536000, "SECONDS",
     "How long finished admin request records are kept for idempotent replay.",
     F(request_retention_s), NOCOUNT},
    {"ipc_socket_mode", KT_MODE, "0600", 0, 0, "0600|0660",
     "File mode of ipc:// sockets: 0600 (the daemon's user only) or 0660 (its group too).",
     F(ipc_socket_mode), NOCOUNT},
    {"max_connections", KT_INT, "128", 1, 10000, "N",
     "Connections each listener holds at once; further ones are closed as they arrive.",
     F(max_connections), NOCOUNT},
    {"max_connections_per_peer", KT_INT, "32", 1, 10000, "N",
     "Connections one peer (remote IP address; on ipc:// the user id) holds at once, over all "
     "listeners.",
     F(max_connections_per_peer), NOCOUNT},
    {"http_listen", KT_STRING, NULL, 0, 0, "URL",
     "HTTP listener of GET /metrics (Prometheus), /livez and /readyz: http://host:port, no "
     "token, so bind it to loopback or a monitoring network (off when unset).",
     F(http_listen), NOCOUNT},
    {"log_level", KT_LEVEL, "info", 0, 0, "LEVEL", "debug, info, warn or error (to stderr).",
     F(log_level), NOCOUNT},
    {"log_format", KT_FORMAT, "text", 0, 0, "text|json",
     "Log lines: text, or json (one JSON object per line: time, level, event, pid, msg and the "
     "event's fields).",
     F(log_format), NOCOUNT},
    /* throttling (docs/throttling.md); each but the last may be set per definition with
     * "definition.<stable id>.<key> = value" lines of the file; SIGHUP reloads them */
    {"batch_target_ms", KT_INT, "100", 0, 60000, "MS",
     "Adaptive batch size: aim at batches of this duration, within batch_min..batch_max and "
     "never above a definition's batch_size (0: always batch_size).",
     F(throttle.batch_target_ms), NOCOUNT},
    {"batch_min", KT_INT, "0", 0, 1000000, "N",
     "Smallest adaptive batch (0: a hundredth of batch_size, at least 1).", F(throttle.batch_min),
     NOCOUNT},
    {"batch_max", KT_INT, "0", 0, 1000000, "N",
     "Largest adaptive batch (0: the definition's batch_size).", F(throttle.batch_max), NOCOUNT},
    {"max_rows_per_second", KT_INT, "0", 0, 100000000, "N",
     "Keys per second this process passes for each definition (0: no ceiling).",
     F(throttle.max_rows_per_second), NOCOUNT},
    {"throttle_replica_lag_bytes", KT_INT, "0", 0, 2147483647, "BYTES",
     "Wait while the slowest streaming replica replays this far behind (0: off).",
     F(throttle.replica_lag_bytes), NOCOUNT},
    {"throttle_lock_waiters", KT_INT, "0", 0, 10000, "N",
     "Wait (and halve the batch size) while this many sessions wait on the target table or on "
     "a batch's locks (0: off).",
     F(throttle.lock_waiters), NOCOUNT},
    {"throttle_xact_age_s", KT_INT, "0", 0, 604800, "SECONDS",
     "Wait while another transaction has been open this long (0: off).", F(throttle.xact_age_s),
     NOCOUNT},
    {"throttle_xid_age_pct", KT_INT, "0", 0, 100, "PERCENT",
     "Wait while the database's oldest unfrozen transaction ID has used this share of the "
     "wraparound horizon (0: off).",
     F(throttle.xid_age_pct), NOCOUNT},
    {"throttle_custom_sql", KT_STRING, NULL, 0, 0, "SQL",
     "A query returning true (wait) or a number of milliseconds to wait; an error waits too.",
     F(throttle.custom_sql), NOCOUNT},
    {"throttle_check_ms", KT_INT, "1000", 1, 3600000, "MS",
     "Health signals are checked between worker steps at most this often.", F(throttle.check_ms),
     NOCOUNT},
    {"throttle_wait_ms", KT_INT, "1000", 1, 3600000, "MS",
     "How long a tripped signal waits before it is checked again.", F(throttle.wait_ms), NOCOUNT},
    {"daemon_max_rows_per_second", KT_INT, "0", 0, 100000000, "N",
     "Keys per second this process passes over all definitions (0: no ceiling).",
     F(daemon_max_rows_per_second), NOCOUNT},
};

/* A key that may also be set per definition: one of the throttle settings. */
static bool config_key_per_definition(const key_def *d)
{
    return d->off >= offsetof(srv_config, throttle) &&
           d->off < offsetof(srv_config, throttle) + sizeof(srv_throttle_values);
}

#define NKEYS ((int)(sizeof config_keys / sizeof config_keys[0]))
_Static_assert(sizeof config_keys / sizeof config_keys[0] == SRV_CONFIG_KEYS,
               "SRV_CONFIG_KEYS matches the key table");

/* Text values per key while loading. */
typedef struct config_raw_override {
    char *id;
    int k;
    char *val;
    char origin[SRV_CONFIG_ORIGIN_MAX];
} config_raw_override;

typedef struct config_raw {
    char *val[SRV_CONFIG_KEYS];
    char origin[SRV_CONFIG_KEYS][SRV_CONFIG_ORIGIN_MAX];
    config_raw_override *ov; /* "definition.<id>.<key>" lines, in file order */
    size_t n_ov;
} config_raw;

static bf_err config_fail(char *diag, size_t cap, bf_err err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static bf_err config_fail(char *diag, size_t cap, bf_err err, const char *fmt, ...)
{
    if (diag != NULL && cap > 0) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(diag, cap, fmt, ap);
        va_end(ap);
        if (n >= (int)cap && cap > 4)
            memcpy(diag + cap - 4, "...", 4);
    }
    return err;
}

static int config_key_index(const char *name)
{
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(config_keys[i].name, name) == 0)
            return i;
    return -1;
}

int srv_config_key_index(const char *name)
{
    return config_key_index(name);
}

static bf_err config_raw_set(config_raw *raw, int k, const char *value, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static bf_err config_raw_set(config_raw *raw, int k, const char *value, const char *fmt, ...)
{
    char *copy = strdup(value);
    if (copy == NULL)
        return BF_ERR_NOMEM;
    free(raw->val[k]);
    raw->val[k] = copy;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw->origin[k], sizeof raw->origin[k], fmt, ap);
    va_end(ap);
    return BF_OK;
}

static void config_raw_free(config_raw *raw)
{
    for (int i = 0; i < NKEYS; i++)
        free(raw->val[i]);
    for (size_t i = 0; i < raw->n_ov; i++) {
        free(raw->ov[i].id);
        free(raw->ov[i].val);
    }
    free(raw->ov);
}

/* "definition.<stable id>.<key>" (key already lower case): record it for config_overrides().
 * A static reason on a malformed one, NULL when recorded (or out of memory: *nomem). */
static const char *config_raw_override_add(config_raw *raw, const char *key, const char *value,
                                           const char *path, long lineno, bool *nomem)
{
    const char *rest = key + strlen("definition.");
    const char *dot = strrchr(rest, '.');
    if (dot == NULL || dot == rest)
        return "expected definition.<stable id>.<key>";
    char id[BF_ID_MAX + 1];
    size_t id_len = (size_t)(dot - rest);
    if (id_len > BF_ID_MAX)
        return "definition.<stable id>.<key>: the stable id is too long";
    memcpy(id, rest, id_len);
    id[id_len] = '\0';
    if (!bf_id_valid(id))
        return "definition.<stable id>.<key>: not a valid stable id";
    int k = config_key_index(dot + 1);
    if (k < 0 || !config_key_per_definition(&config_keys[k]))
        return "definition.<stable id>.<key>: only the throttle settings (batch_target_ms, "
               "batch_min, batch_max, max_rows_per_second, throttle_*) may be set per "
               "definition";
    config_raw_override *v = realloc(raw->ov, (raw->n_ov + 1) * sizeof *v);
    if (v == NULL) {
        *nomem = true;
        return NULL;
    }
    raw->ov = v;
    config_raw_override *o = &raw->ov[raw->n_ov];
    o->id = strdup(id);
    o->val = strdup(value);
    o->k = k;
    snprintf(o->origin, sizeof o->origin, "file %s:%ld", path, lineno);
    if (o->id == NULL || o->val == NULL) {
        free(o->id);
        free(o->val);
        *nomem = true;
        return NULL;
    }
    raw->n_ov++;
    return NULL;
}

/* ---- the file ------------------------------------------------------------------------------ */

/* Parse one quoted value starting at *p (on the quote) into out; advances *p past it. */
static bool config_quoted(const char **p, char *out)
{
    char q = **p;
    const char *s = *p + 1;
    size_t n = 0;
    for (;;) {
        if (*s == '\0')
            return false; /* unterminated */
        if (*s == q && s[1] == q) {
            out[n++] = q;
            s += 2;
        } else if (*s == q) {
            s++;
            break;
        } else if (*s == '\\' && s[1] != '\0') {
            out[n++] = s[1];
            s += 2;
        } else {
            out[n++] = *s++;
        }
    }
    out[n] = '\0';
    *p = s;
    return true;
}

/* One line: blank, comment, or key [=] value [# comment]. *key is "" for nothing. Buffers have
 * the line's length + 1. Returns a static reason on a syntax error, NULL when fine. */
static const char *config_parse_line(const char *line, char *key, char *value)
{
    const char *p = line;
    key[0] = value[0] = '\0';
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '\0' || *p == '#')
        return NULL;
    size_t n = 0;
    if (!isalpha((unsigned char)*p) && *p != '_')
        return "expected a key";
    while (isalnum((unsigned char)*p) || *p == '_' || *p == '.' || *p == '-')
        key[n++] = (char)tolower((unsigned char)*p++);
    key[n] = '\0';
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == '=')
        p++;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == '\'' || *p == '"') {
        if (!config_quoted(&p, value))
            return "unterminated quoted value";
    } else {
        n = 0;
        while (*p != '\0' && !isspace((unsigned char)*p) && *p != '#')
            value[n++] = *p++;
        value[n] = '\0';
        if (n == 0)
            return "missing value (write '' for an empty one)";
    }
    while (isspace((unsigned char)*p))
        p++;
    if (*p != '\0' && *p != '#')
        return "unexpected text after the value (quote values that contain spaces)";
    return NULL;
}

/* The configuration file, as opened: a regular file that group and others cannot write. It
 * sets SQL the daemon runs (throttle_custom_sql), the database and the listeners, so a file
 * anyone can write hands the daemon to anyone (like the key files, config_check_file). Checked
 * on the open descriptor, for every command and every SIGHUP reload. */
static bf_err config_check_file_mode(FILE *f, const char *path, char *diag, size_t cap)
{
    struct stat st;
    if (fstat(fileno(f), &st) != 0)
        return config_fail(diag, cap, BF_ERR_IO, "cannot access configuration file %s: %s", path,
                           strerror(errno));
    if (!S_ISREG(st.st_mode))
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "configuration file %s: not a regular file", path);
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "configuration file %s: the file is writable by group or others "
                           "(chmod go-w)",
                           path);
    return BF_OK;
}

static bf_err config_read_file(config_raw *raw, const char *path, char *diag, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return config_fail(diag, cap, BF_ERR_IO, "cannot open configuration file %s: %s", path,
                           strerror(errno));
    bf_err mode_err = config_check_file_mode(f, path, diag, cap);
    if (mode_err != BF_OK) {
        fclose(f);
        return mode_err;
    }
    char *line = NULL, *key = NULL, *value = NULL;
    size_t line_cap = 0;
    ssize_t len;
    long lineno = 0;
    bf_err err = BF_OK;
    while (err == BF_OK && (len = getline(&line, &line_cap, f)) >= 0) {
        lineno++;
        if (len > CONFIG_LINE_MAX) {
            err = config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT, "%s:%ld: line too long", path,
                              lineno);
            break;
        }
        free(key);
        free(value);
        key = malloc((size_t)len + 1);
        value = malloc((size_t)len + 1);
        if (key == NULL || value == NULL) {
            err = BF_ERR_NOMEM;
            break;
        }
        const char *why = config_parse_line(line, key, value);
        if (why != NULL) {
            err = config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT, "%s:%ld: %s", path, lineno, why);
            break;
        }
        if (key[0] == '\0')
            continue;
        if (strncmp(key, "definition.", 11) == 0) {
            bool nomem = false;
            why = config_raw_override_add(raw, key, value, path, lineno, &nomem);
            if (nomem)
                err = BF_ERR_NOMEM;
            else if (why != NULL)
                err = config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT, "%s:%ld: %s", path, lineno,
                                  why);
            continue;
        }
        int k = config_key_index(key);
        if (k < 0) {
            err = config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT, "%s:%ld: unknown key \"%.64s\"",
                              path, lineno, key);
            break;
        }
        err = config_raw_set(raw, k, value, "file %s:%ld", path, lineno);
    }
    if (err == BF_OK && ferror(f))
        err = config_fail(diag, cap, BF_ERR_IO, "cannot read configuration file %s", path);
    free(line);
    free(key);
    free(value);
    fclose(f);
    return err;
}

/* ---- environment --------------------------------------------------------------------------- */

static const char *config_env(char *const envp[], const char *name)
{
    if (envp == NULL)
        return NULL;
    size_t n = strlen(name);
    for (size_t i = 0; envp[i] != NULL; i++)
        if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=')
            return envp[i] + n + 1;
    return NULL;
}

static void config_env_name(const char *key, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "%s", CONFIG_ENV_PREFIX);
    for (const char *p = key; *p != '\0' && n + 1 < cap; p++)
        out[n++] = (char)toupper((unsigned char)*p);
    out[n < cap ? n : cap - 1] = '\0';
}

static void config_flag_name(const char *key, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = key; *p != '\0' && n + 1 < cap; p++)
        out[n++] = *p == '_' ? '-' : *p;
    out[n] = '\0';
}

/* ---- typed values -------------------------------------------------------------------------- */

static bool config_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"on", "true", "yes", "1"};
    static const char *const no[] = {"off", "false", "no", "0"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

static bool config_parse_level(const char *s, bf_log_level *out)
{
    if (strcasecmp(s, "debug") == 0)
        *out = BF_LOG_DEBUG;
    else if (strcasecmp(s, "info") == 0)
        *out = BF_LOG_INFO;
    else if (strcasecmp(s, "warn") == 0 || strcasecmp(s, "warning") == 0)
        *out = BF_LOG_WARN;
    else if (strcasecmp(s, "error") == 0)
        *out = BF_LOG_ERROR;
    else
        return false;
    return true;
}

const char *srv_log_level_name(bf_log_level level)
{
    switch (level) {
    case BF_LOG_DEBUG:
        return "debug";
    case BF_LOG_INFO:
        return "info";
    case BF_LOG_WARN:
        return "warn";
    case BF_LOG_ERROR:
        return "error";
    }
    return "info";
}

/* Split a comma list into trimmed, non-empty entries. */
static bf_err config_split(const char *s, char ***out, size_t *count)
{
    size_t cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    char **items = calloc(cap, sizeof *items);
    if (items == NULL)
        return BF_ERR_NOMEM;
    size_t n = 0;
    const char *p = s;
    while (*p != '\0') {
        const char *end = strchr(p, ',');
        if (end == NULL)
            end = p + strlen(p);
        const char *a = p, *b = end;
        while (a < b && isspace((unsigned char)*a))
            a++;
        while (b > a && isspace((unsigned char)b[-1]))
            b--;
        if (b > a) {
            items[n] = strndup(a, (size_t)(b - a));
            if (items[n++] == NULL) {
                for (size_t i = 0; i < n; i++)
                    free(items[i]);
                free(items);
                return BF_ERR_NOMEM;
            }
        }
        p = *end ? end + 1 : end;
    }
    *out = items;
    *count = n;
    return BF_OK;
}

static bf_err config_int(const key_def *d, const char *v, const char *origin, int *out, char *diag,
                         size_t cap)
{
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (v[0] == '\0' || *end != '\0' || errno != 0 || n < d->min || n > d->max)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: %s must be an integer from %d to %d", origin, d->name, d->min,
                           d->max);
    *out = (int)n;
    return BF_OK;
}

/* Each definition's throttle settings: the daemon's, with its own lines on top. */
static bf_err config_overrides(srv_config *cfg, const config_raw *raw, char *diag, size_t cap)
{
    for (size_t i = 0; i < raw->n_ov; i++) {
        const config_raw_override *o = &raw->ov[i];
        srv_throttle_override *t = NULL;
        for (size_t j = 0; j < cfg->n_overrides && t == NULL; j++)
            if (strcmp(cfg->overrides[j].id, o->id) == 0)
                t = &cfg->overrides[j];
        if (t == NULL) {
            srv_throttle_override *v = realloc(cfg->overrides, (cfg->n_overrides + 1) * sizeof *v);
            if (v == NULL)
                return BF_ERR_NOMEM;
            cfg->overrides = v;
            t = &cfg->overrides[cfg->n_overrides++];
            memset(t, 0, sizeof *t);
            t->v = cfg->throttle;
            t->v.custom_sql = NULL;
            snprintf(t->origin, sizeof t->origin, "%s", o->origin);
            if ((t->id = strdup(o->id)) == NULL ||
                (cfg->throttle.custom_sql != NULL &&
                 (t->v.custom_sql = strdup(cfg->throttle.custom_sql)) == NULL))
                return BF_ERR_NOMEM;
        }
        const key_def *d = &config_keys[o->k];
        void *field = (char *)&t->v + (d->off - offsetof(srv_config, throttle));
        if (d->type == KT_STRING) {
            char *copy = o->val[0] ? strdup(o->val) : NULL;
            if (o->val[0] && copy == NULL)
                return BF_ERR_NOMEM;
            free(*(char **)field);
            *(char **)field = copy;
        } else {
            bf_err err = config_int(d, o->val, o->origin, (int *)field, diag, cap);
            if (err != BF_OK)
                return err;
        }
    }
    return BF_OK;
}

static bf_err config_convert(srv_config *cfg, const config_raw *raw, char *diag, size_t cap)
{
    for (int k = 0; k < NKEYS; k++) {
        const key_def *d = &config_keys[k];
        const char *v = raw->val[k] ? raw->val[k] : "";
        if (v[0] == '\0' && d->def != NULL)
            v = d->def; /* empty means not set: the default applies */
        void *field = (char *)cfg + d->off;
        snprintf(cfg->origin[k], sizeof cfg->origin[k], "%s", raw->origin[k]);
        switch (d->type) {
        case KT_STRING:
            if (v[0] != '\0' && (*(char **)field = strdup(v)) == NULL)
                return BF_ERR_NOMEM;
            break;
        case KT_LIST:
            if (config_split(v, (char ***)field, (size_t *)((char *)cfg + d->count_off)) != BF_OK)
                return BF_ERR_NOMEM;
            break;
        case KT_INT: {
            bf_err err = config_int(d, v, raw->origin[k], (int *)field, diag, cap);
            if (err != BF_OK)
                return err;
            break;
        }
        case KT_BOOL:
            if (!config_parse_bool(v, (bool *)field))
                return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT, "%s: %s must be on or off",
                                   raw->origin[k], d->name);
            break;
        case KT_MODE: /* octal; only the modes the transport accepts */
            if (strcmp(v, "0600") == 0 || strcmp(v, "600") == 0)
                *(int *)field = 0600;
            else if (strcmp(v, "0660") == 0 || strcmp(v, "660") == 0)
                *(int *)field = 0660;
            else
                return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                                   "%s: %s must be 0600 or 0660", raw->origin[k], d->name);
            break;
        case KT_LEVEL:
            if (!config_parse_level(v, (bf_log_level *)field))
                return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                                   "%s: %s must be debug, info, warn or error", raw->origin[k],
                                   d->name);
            break;
        case KT_FORMAT:
            if (!srv_log_format_parse(v, (srv_log_format *)field))
                return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                                   "%s: %s must be text or json", raw->origin[k], d->name);
            break;
        }
    }
    return BF_OK;
}

/* ---- validation ---------------------------------------------------------------------------- */

static bool config_has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0 && s[strlen(prefix)] != '\0';
}

/* Where the effective value of key came from ("file x.conf:3", "flag --listen", "default"). */
static const char *config_origin(const srv_config *cfg, const char *key)
{
    int k = config_key_index(key);
    return k >= 0 && cfg->origin[k][0] != '\0' ? cfg->origin[k] : "default";
}

/* A decimal port 1..65535 spanning exactly [s, s + len). */
static bool config_port_valid(const char *s, size_t len)
{
    if (len == 0 || len > 5)
        return false;
    long port = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return false;
        port = port * 10 + (s[i] - '0');
    }
    return port >= 1 && port <= 65535;
}

/* The host and port of a tcp:// or tls+tcp:// listener ("host:port", "[v6]:port", ":port" or
 * "*:port" for every address). host gets "" for every address. false when malformed. */
static bool config_host_port(const char *rest, char *host, size_t host_cap, const char **port,
                             size_t *port_len)
{
    const char *colon;
    size_t host_len;
    const char *h = rest;
    if (rest[0] == '[') {
        const char *close = strchr(rest, ']');
        if (close == NULL || close[1] != ':')
            return false;
        h = rest + 1;
        host_len = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(rest, ':');
        if (colon == NULL || memchr(rest, ':', (size_t)(colon - rest)) != NULL)
            return false; /* no port, or an IPv6 address without brackets */
        host_len = (size_t)(colon - rest);
    }
    if (host_len >= host_cap)
        return false;
    if (host_len == 1 && h[0] == '*')
        host_len = 0;
    memcpy(host, h, host_len);
    host[host_len] = '\0';
    *port = colon + 1;
    *port_len = strlen(colon + 1);
    return true;
}

/* Every port the conninfo names (libpq takes a comma-separated list) is a number 1..65535, or
 * empty (the default). The conninfo must parse; libpq's error text is not kept (it can quote
 * the value). */
static bf_err config_check_database_url(const srv_config *cfg, char *diag, size_t cap)
{
    const char *origin = config_origin(cfg, "database_url");
    char *why = NULL;
    PQconninfoOption *opts = PQconninfoParse(cfg->database_url, &why);
    PQfreemem(why);
    if (opts == NULL)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: database_url is not a valid libpq URL or conninfo", origin);
    bool ok = true;
    for (const PQconninfoOption *o = opts; ok && o->keyword != NULL; o++) {
        if (strcmp(o->keyword, "port") != 0 || o->val == NULL)
            continue;
        for (const char *p = o->val; ok;) {
            size_t len = strcspn(p, ",");
            ok = len == 0 || config_port_valid(p, len);
            if (p[len] == '\0')
                break;
            p += len + 1;
        }
    }
    PQconninfoFree(opts);
    if (!ok)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: database_url: each port must be a number from 1 to 65535", origin);
    return BF_OK;
}

/* One listen entry's form: ipc:// with a path that fits a socket address, tcp:// and
 * tls+tcp:// with a host and a port 1..65535. */
static bf_err config_check_listen_entry(const srv_config *cfg, size_t i, char *diag, size_t cap)
{
    const char *origin = config_origin(cfg, "listen");
    const char *u = cfg->listen[i];
    if (strncmp(u, "ipc://", 6) == 0) {
        struct sockaddr_un sun;
        if (strlen(u + 6) >= sizeof sun.sun_path)
            return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                               "%s: listen entry %zu: the ipc path is longer than %zu bytes",
                               origin, i + 1, sizeof sun.sun_path - 1);
        return BF_OK;
    }
    const char *rest = u + (strncmp(u, "tcp://", 6) == 0 ? 6 : 10);
    char host[256];
    const char *port = NULL;
    size_t port_len = 0;
    if (!config_host_port(rest, host, sizeof host, &port, &port_len))
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: listen entry %zu: expected host:port", origin, i + 1);
    if (!config_port_valid(port, port_len))
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: listen entry %zu: port must be a number from 1 to 65535", origin,
                           i + 1);
    return BF_OK;
}

/* http_listen: http://host:port with a port 1..65535 (no path: the endpoints are fixed). */
static bf_err config_check_http_listen(const srv_config *cfg, char *diag, size_t cap)
{
    const char *origin = config_origin(cfg, "http_listen");
    const char *u = cfg->http_listen;
    if (!config_has_prefix(u, "http://"))
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: http_listen: expected http://host:port", origin);
    char host[256];
    const char *port = NULL;
    size_t port_len = 0;
    if (!config_host_port(u + 7, host, sizeof host, &port, &port_len))
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: http_listen: expected http://host:port", origin);
    if (!config_port_valid(port, port_len))
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: http_listen: port must be a number from 1 to 65535", origin);
    return BF_OK;
}

static bf_err config_validate(const srv_config *cfg, char *diag, size_t cap)
{
    bf_err bad = BF_ERR_INVALID_ARGUMENT;
    if (cfg->command == SRV_CMD_HELP || cfg->command == SRV_CMD_VERSION)
        return BF_OK;
    if (cfg->database_url == NULL)
        return config_fail(diag, cap, bad,
                           "database_url is not set (configuration file, "
                           "BUZZ_BACKFILL_DATABASE_URL or --database-url)");
    bf_err err = config_check_database_url(cfg, diag, cap);
    if (err != BF_OK || cfg->command == SRV_CMD_MIGRATE || cfg->command == SRV_CMD_PREFLIGHT)
        return err;
    if (cfg->n_listen == 0)
        return config_fail(diag, cap, bad,
                           "listen is not set: give at least one ipc://, tcp:// or tls+tcp:// URL");
    if (cfg->n_listen > SRV_CONFIG_LISTEN_MAX)
        return config_fail(diag, cap, bad, "listen has %zu entries; at most %d are supported",
                           cfg->n_listen, SRV_CONFIG_LISTEN_MAX);
    bool network = false;
    for (size_t i = 0; i < cfg->n_listen; i++) {
        const char *u = cfg->listen[i];
        if (config_has_prefix(u, "tls+tcp://")) {
            network = true;
            if (cfg->tls_cert_key_file == NULL)
                return config_fail(
                    diag, cap, bad,
                    "listen entry %zu is tls+tcp:// but tls_cert_key_file is not set", i + 1);
        } else if (config_has_prefix(u, "tcp://")) {
            network = true;
        } else if (!config_has_prefix(u, "ipc://")) {
            return config_fail(diag, cap, bad,
                               "listen entry %zu: expected ipc://, tcp:// or tls+tcp://", i + 1);
        }
        if ((err = config_check_listen_entry(cfg, i, diag, cap)) != BF_OK)
            return err;
    }
    if (cfg->http_listen != NULL && (err = config_check_http_listen(cfg, diag, cap)) != BF_OK)
        return err;
    if (network && cfg->trusted_keys_file == NULL)
        return config_fail(diag, cap, bad,
                           "tcp:// and tls+tcp:// listeners need trusted_keys_file: only tokens "
                           "authorize requests there");
    if (cfg->trusted_keys_file == NULL && !cfg->ipc_boundary)
        return config_fail(diag, cap, bad,
                           "no request can be authorized: set trusted_keys_file or "
                           "ipc_boundary = on");
    if (cfg->trusted_keys_file != NULL && cfg->token_audience == NULL)
        return config_fail(diag, cap, bad, "token_audience is required with trusted_keys_file");
    if (cfg->token_audience != NULL && !bft_name_valid(cfg->token_audience))
        return config_fail(diag, cap, bad,
                           "%s: token_audience must be 1 to %d bytes without control characters",
                           config_origin(cfg, "token_audience"), BFT_NAME_MAX - 1);
    /* a lease that a working owner can outlast would be taken over (and its attempt counted)
     * while the owner still works within its timeouts */
    bf_config lease = {.lease_ms = cfg->lease_ms,
                       .statement_timeout_ms = cfg->statement_timeout_ms,
                       .lock_timeout_ms = cfg->lock_timeout_ms,
                       .step_ms = cfg->step_ms};
    char why[192];
    if (bf_config_check(&lease, why, sizeof why) != BF_OK)
        return config_fail(diag, cap, bad, "%s: %s", config_origin(cfg, "lease_ms"), why);
    /* the throttle settings as the workers will take them (batch_min <= batch_max ...) */
    bf_throttle *probe = NULL;
    if (bf_throttle_new(&probe) != BF_OK)
        return BF_ERR_NOMEM;
    err = srv_config_throttle(cfg, probe, why, sizeof why);
    bf_throttle_free(probe);
    if (err != BF_OK)
        return config_fail(diag, cap, err, "%s", why);
    return BF_OK;
}

/* ---- the environment ------------------------------------------------------------------------ */

/* An existing regular file without the mode bits in forbidden. */
static bf_err config_check_file(const srv_config *cfg, const char *key, const char *path,
                                mode_t forbidden, const char *forbidden_text, char *diag,
                                size_t cap)
{
    struct stat st;
    const char *origin = config_origin(cfg, key);
    if (stat(path, &st) != 0)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT, "%s: %s: cannot access the file: %s",
                           origin, key, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT, "%s: %s: not a regular file", origin,
                           key);
    if ((st.st_mode & forbidden) != 0)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT, "%s: %s: the file is %s", origin,
                           key, forbidden_text);
    return BF_OK;
}

/* An existing directory not writable by group or others (it holds SQL the daemon runs). */
static bf_err config_check_dir(const srv_config *cfg, const char *key, const char *path, char *diag,
                               size_t cap)
{
    struct stat st;
    const char *origin = config_origin(cfg, key);
    if (stat(path, &st) != 0)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: %s: cannot access the directory: %s", origin, key, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT, "%s: %s: not a directory", origin,
                           key);
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: %s: the directory is writable by group or others (chmod go-w)",
                           origin, key);
    return BF_OK;
}

/* An ipc:// path must be absent in an existing directory, or be a socket. */
static bf_err config_check_ipc_path(const srv_config *cfg, size_t i, const char *path, char *diag,
                                    size_t cap)
{
    const char *origin = config_origin(cfg, "listen");
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (S_ISSOCK(st.st_mode))
            return BF_OK;
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: listen entry %zu: the ipc path exists and is not a socket", origin,
                           i + 1);
    }
    if (errno != ENOENT)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: listen entry %zu: cannot access the ipc path: %s", origin, i + 1,
                           strerror(errno));
    char *copy = strdup(path);
    if (copy == NULL)
        return BF_ERR_NOMEM;
    bool dir_ok = stat(dirname(copy), &st) == 0 && S_ISDIR(st.st_mode);
    free(copy);
    if (!dir_ok)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: listen entry %zu: the directory of the ipc path does not exist",
                           origin, i + 1);
    return BF_OK;
}

/* The host of a listener URL must resolve (an empty host means every address). i: the listen
 * entry, or SIZE_MAX for http_listen. */
static bf_err config_check_host(const srv_config *cfg, size_t i, char *diag, size_t cap)
{
    const char *u = i == SIZE_MAX ? cfg->http_listen : cfg->listen[i];
    const char *rest = u + (strncmp(u, "tcp://", 6) == 0    ? 6
                            : strncmp(u, "http://", 7) == 0 ? 7
                                                            : 10);
    char host[256], port[8];
    const char *p = NULL;
    size_t port_len = 0;
    if (!config_host_port(rest, host, sizeof host, &p, &port_len) || port_len >= sizeof port)
        return BF_ERR_INTERNAL; /* validated by config_check_listen_entry */
    memcpy(port, p, port_len);
    port[port_len] = '\0';
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int rv = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (res != NULL)
        freeaddrinfo(res);
    if (rv != 0 && i == SIZE_MAX)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: http_listen: the host does not resolve: %s",
                           config_origin(cfg, "http_listen"), gai_strerror(rv));
    if (rv != 0)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: listen entry %zu: the host does not resolve: %s",
                           config_origin(cfg, "listen"), i + 1, gai_strerror(rv));
    return BF_OK;
}

bf_err srv_config_check_environment(const srv_config *cfg, char *diag, size_t diag_len)
{
    if (cfg == NULL || (cfg->command != SRV_CMD_RUN && cfg->command != SRV_CMD_CHECK_CONFIG))
        return BF_OK;
    bool tls = false;
    bf_err err = BF_OK;
    for (size_t i = 0; err == BF_OK && i < cfg->n_listen; i++) {
        const char *u = cfg->listen[i];
        if (strncmp(u, "ipc://", 6) == 0) {
            err = config_check_ipc_path(cfg, i, u + 6, diag, diag_len);
        } else {
            tls = tls || strncmp(u, "tls+tcp://", 10) == 0;
            err = config_check_host(cfg, i, diag, diag_len);
        }
    }
    if (err == BF_OK && cfg->http_listen != NULL)
        err = config_check_host(cfg, SIZE_MAX, diag, diag_len);
    if (err == BF_OK && cfg->trusted_keys_file != NULL)
        err = config_check_file(cfg, "trusted_keys_file", cfg->trusted_keys_file, S_IWGRP | S_IWOTH,
                                "writable by group or others (chmod go-w)", diag, diag_len);
    if (err == BF_OK && cfg->revoked_tokens_file != NULL)
        err = config_check_file(cfg, "revoked_tokens_file", cfg->revoked_tokens_file,
                                S_IWGRP | S_IWOTH, "writable by group or others (chmod go-w)", diag,
                                diag_len);
    if (err == BF_OK && cfg->definitions_dir != NULL)
        err = config_check_dir(cfg, "definitions_dir", cfg->definitions_dir, diag, diag_len);
    if (err == BF_OK && tls && cfg->tls_cert_key_file != NULL)
        err = config_check_file(cfg, "tls_cert_key_file", cfg->tls_cert_key_file, S_IRWXG | S_IRWXO,
                                "accessible by group or others: it holds the private key "
                                "(chmod go-rwx)",
                                diag, diag_len);
    if (err == BF_ERR_NOMEM)
        config_fail(diag, diag_len, err, "out of memory");
    return err;
}

/* ---- flags --------------------------------------------------------------------------------- */

static bf_err config_flags(srv_config *cfg, config_raw *flags, int argc, char *const argv[],
                           char *diag, size_t cap)
{
    struct option opts[SRV_CONFIG_KEYS + 4];
    char names[SRV_CONFIG_KEYS][40];
    for (int k = 0; k < NKEYS; k++) {
        config_flag_name(config_keys[k].name, names[k], sizeof names[k]);
        opts[k] = (struct option){names[k], required_argument, NULL, CONFIG_OPT_BASE + k};
    }
    opts[NKEYS] = (struct option){"config", required_argument, NULL, 'c'};
    opts[NKEYS + 1] = (struct option){"help", no_argument, NULL, 'h'};
    opts[NKEYS + 2] = (struct option){"version", no_argument, NULL, 'V'};
    opts[NKEYS + 3] = (struct option){NULL, 0, NULL, 0};
    optind = 0; /* GNU: full re-initialisation, so tests may load more than once */
    opterr = 0;
    int c;
    bf_err err = BF_OK;
    while (err == BF_OK && (c = getopt_long(argc, argv, ":c:hV", opts, NULL)) != -1) {
        if (c == 'c') {
            free(cfg->config_file);
            if ((cfg->config_file = strdup(optarg)) == NULL)
                err = BF_ERR_NOMEM;
        } else if (c == 'h') {
            cfg->command = SRV_CMD_HELP;
        } else if (c == 'V') {
            cfg->command = SRV_CMD_VERSION;
        } else if (c >= CONFIG_OPT_BASE && c < CONFIG_OPT_BASE + NKEYS) {
            err = config_raw_set(flags, c - CONFIG_OPT_BASE, optarg, "flag --%s",
                                 names[c - CONFIG_OPT_BASE]);
        } else if (c == ':') {
            err = config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT, "option %.64s needs a value",
                              argv[optind - 1]);
        } else {
            const char *arg = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
            err = config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                              "unknown option %.64s (see --help)", arg);
        }
    }
    if (err != BF_OK || cfg->command == SRV_CMD_HELP || cfg->command == SRV_CMD_VERSION)
        return err;
    if (argc - optind >= 1 && strcmp(argv[optind], "preflight") == 0) {
        cfg->command = SRV_CMD_PREFLIGHT;
        cfg->ids = argv + optind + 1;
        cfg->n_ids = argc - optind - 1;
        return BF_OK;
    }
    if (argc - optind > 1)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT, "more than one command given");
    if (argc - optind == 1) {
        const char *cmd = argv[optind];
        if (strcmp(cmd, "run") == 0)
            cfg->command = SRV_CMD_RUN;
        else if (strcmp(cmd, "migrate") == 0)
            cfg->command = SRV_CMD_MIGRATE;
        else if (strcmp(cmd, "check-config") == 0)
            cfg->command = SRV_CMD_CHECK_CONFIG;
        else
            return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                               "unknown command \"%.32s\": expected run, migrate, check-config"
                               " or preflight",
                               cmd);
    }
    return BF_OK;
}

bf_err srv_config_load(srv_config *out, int argc, char *const argv[], char *const envp[],
                       char *diag, size_t diag_len)
{
    if (out == NULL || argv == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    srv_config cfg;
    memset(&cfg, 0, sizeof cfg);
    config_raw raw, flags;
    memset(&raw, 0, sizeof raw);
    memset(&flags, 0, sizeof flags);
    if (diag != NULL && diag_len > 0)
        diag[0] = '\0';
    bf_err err = config_flags(&cfg, &flags, argc, argv, diag, diag_len);
    for (int k = 0; err == BF_OK && k < NKEYS; k++)
        err = config_raw_set(&raw, k, config_keys[k].def ? config_keys[k].def : "", "default");
    if (err == BF_OK && cfg.config_file == NULL) {
        const char *path = config_env(envp, CONFIG_ENV_PREFIX "CONFIG");
        if (path != NULL && path[0] != '\0' && (cfg.config_file = strdup(path)) == NULL)
            err = BF_ERR_NOMEM;
    }
    if (err == BF_OK && cfg.config_file != NULL && cfg.command != SRV_CMD_HELP &&
        cfg.command != SRV_CMD_VERSION)
        err = config_read_file(&raw, cfg.config_file, diag, diag_len);
    for (int k = 0; err == BF_OK && k < NKEYS; k++) {
        char name[64];
        config_env_name(config_keys[k].name, name, sizeof name);
        const char *v = config_env(envp, name);
        if (v != NULL)
            err = config_raw_set(&raw, k, v, "environment %s", name);
    }
    for (int k = 0; err == BF_OK && k < NKEYS; k++)
        if (flags.val[k] != NULL)
            err = config_raw_set(&raw, k, flags.val[k], "%s", flags.origin[k]);
    if (err == BF_OK)
        err = config_convert(&cfg, &raw, diag, diag_len);
    if (err == BF_OK)
        err = config_overrides(&cfg, &raw, diag, diag_len);
    if (err == BF_OK)
        err = config_validate(&cfg, diag, diag_len);
    if (err == BF_ERR_NOMEM)
        config_fail(diag, diag_len, err, "out of memory");
    config_raw_free(&raw);
    config_raw_free(&flags);
    if (err != BF_OK) {
        srv_config_fini(&cfg);
        return err;
    }
    *out = cfg;
    return BF_OK;
}

static void config_free_list(char **items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(items[i]);
    free(items);
}

void srv_config_fini(srv_config *cfg)
{
    if (cfg == NULL)
        return;
    free(cfg->config_file);
    free(cfg->database_url);
    config_free_list(cfg->listen, cfg->n_listen);
    free(cfg->tls_cert_key_file);
    free(cfg->http_listen);
    config_free_list(cfg->modules, cfg->n_modules);
    free(cfg->definitions_dir);
    free(cfg->token_audience);
    free(cfg->trusted_keys_file);
    free(cfg->revoked_tokens_file);
    free(cfg->throttle.custom_sql);
    for (size_t i = 0; i < cfg->n_overrides; i++) {
        free(cfg->overrides[i].id);
        free(cfg->overrides[i].v.custom_sql);
    }
    free(cfg->overrides);
    memset(cfg, 0, sizeof *cfg);
}

/* ---- redaction ----------------------------------------------------------------------------- */

static void redact_append(char *out, size_t cap, size_t *n, const char *s, size_t len)
{
    for (size_t i = 0; i < len && *n + 1 < cap; i++)
        out[(*n)++] = s[i];
    out[*n < cap ? *n : cap - 1] = '\0';
}

/* Whether a conninfo keyword (len bytes, percent-encoded when url) names an option libpq marks
 * as secret: PQconndefaults()' dispchar "*" (password, sslpassword, and whatever a newer libpq
 * adds). "password" is always secret, also when libpq's defaults cannot be had. */
static bool redact_secret_key(const char *key, size_t len, bool url)
{
    char name[64];
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (n + 1 >= sizeof name)
            return false; /* longer than any libpq keyword */
        if (url && key[i] == '%' && i + 2 < len && isxdigit((unsigned char)key[i + 1]) &&
            isxdigit((unsigned char)key[i + 2])) {
            char hex[3] = {key[i + 1], key[i + 2], '\0'};
            name[n++] = (char)strtol(hex, NULL, 16);
            i += 2;
        } else {
            name[n++] = key[i];
        }
    }
    name[n] = '\0';
    if (strcasecmp(name, "password") == 0)
        return true;
    PQconninfoOption *opts = PQconndefaults();
    bool secret = false;
    for (const PQconninfoOption *o = opts; o != NULL && o->keyword != NULL; o++)
        if (strcasecmp(o->keyword, name) == 0 && o->dispchar != NULL && o->dispchar[0] == '*')
            secret = true;
    PQconninfoFree(opts);
    return secret;
}

static void redact_conninfo_into(const char *s, char *out, size_t cap, size_t *n, int depth);

/* A value of a non-secret key: a dbname may itself be a URL or conninfo (libpq expands it in
 * some calls), so it is redacted like one. */
static void redact_value(const char *key, size_t key_len, const char *value, size_t len, bool url,
                         char *out, size_t cap, size_t *n, int depth)
{
    if (redact_secret_key(key, key_len, url)) {
        redact_append(out, cap, n, "****", 4);
        return;
    }
    bool dbname = key_len == 6 && strncasecmp(key, "dbname", 6) == 0;
    bool nested = memchr(value, '=', len) != NULL || memmem(value, len, "://", 3) != NULL;
    if (dbname && nested && depth >= 2) { /* too deep, or quoted: not looked into */
        redact_append(out, cap, n, "****", 4);
        return;
    }
    if (dbname && nested) {
        char *copy = strndup(value, len);
        if (copy == NULL) {
            redact_append(out, cap, n, "****", 4);
            return;
        }
        redact_conninfo_into(copy, out, cap, n, depth + 1);
        free(copy);
        return;
    }
    redact_append(out, cap, n, value, len);
}

/* postgresql://user:password@host/db?password=x&sslpassword=y: the userinfo password and the
 * value of every secret parameter, keys percent-decoded as libpq does. The userinfo ends at the
 * last '@' before the first '/' (libpq reads up to the first '@', so this redacts at least as
 * much as it treats as the password); parameters are separated by '&' only. */
static void redact_url(const char *s, char *out, size_t cap, size_t *n, int depth)
{
    const char *auth = strstr(s, "://") + 3;
    redact_append(out, cap, n, s, (size_t)(auth - s));
    const char *auth_end = auth + strcspn(auth, "/");
    const char *at = NULL;
    for (const char *p = auth; p < auth_end; p++)
        if (*p == '@')
            at = p;
    if (at != NULL) {
        const char *colon = memchr(auth, ':', (size_t)(at - auth));
        if (colon != NULL) {
            redact_append(out, cap, n, auth, (size_t)(colon - auth));
            redact_append(out, cap, n, ":****", 5);
            auth = at;
        }
    }
    const char *query = auth + strcspn(auth, "?");
    redact_append(out, cap, n, auth, (size_t)(query - auth));
    const char *p = query;
    while (*p != '\0') {
        size_t len = strcspn(p + 1, "&") + 1; /* one "?key=value" or "&key=value" */
        const char *eq = memchr(p + 1, '=', len - 1);
        if (eq == NULL) {
            redact_append(out, cap, n, p, len);
        } else {
            redact_append(out, cap, n, p, (size_t)(eq + 1 - p));
            redact_value(p + 1, (size_t)(eq - p - 1), eq + 1, (size_t)(p + len - eq - 1), true, out,
                         cap, n, depth);
        }
        p += len;
    }
}

/* key = value pairs; values may be single-quoted with backslash escapes */
static void redact_keywords(const char *s, char *out, size_t cap, size_t *n, int depth)
{
    const char *p = s;
    while (*p != '\0') {
        const char *start = p;
        while (isspace((unsigned char)*p))
            p++;
        const char *key = p;
        while (*p != '\0' && *p != '=' && !isspace((unsigned char)*p))
            p++;
        size_t key_len = (size_t)(p - key);
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '=')
            p++;
        while (isspace((unsigned char)*p))
            p++;
        const char *value = p;
        bool quoted = *p == '\'';
        if (quoted) {
            for (p++; *p != '\0' && *p != '\''; p++)
                if (*p == '\\' && p[1] != '\0')
                    p++;
            if (*p == '\'')
                p++;
        } else {
            while (*p != '\0' && !isspace((unsigned char)*p))
                p++;
        }
        redact_append(out, cap, n, start, (size_t)(value - start));
        /* a quoted nested dbname is redacted whole, not looked into */
        redact_value(key, key_len, value, (size_t)(p - value), false, out, cap, n,
                     quoted ? 2 : depth);
        if (p == start) /* no progress: copy one byte */
            redact_append(out, cap, n, p++, 1);
    }
}

static void redact_conninfo_into(const char *s, char *out, size_t cap, size_t *n, int depth)
{
    if (strncmp(s, "postgresql://", 13) == 0 || strncmp(s, "postgres://", 11) == 0)
        redact_url(s, out, cap, n, depth);
    else
        redact_keywords(s, out, cap, n, depth);
}

void srv_redact_conninfo(const char *conninfo, char *out, size_t cap)
{
    if (cap == 0)
        return;
    out[0] = '\0';
    if (conninfo == NULL)
        return;
    size_t n = 0;
    redact_conninfo_into(conninfo, out, cap, &n, 0);
}

/* ---- output -------------------------------------------------------------------------------- */

static void config_print_quoted(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'' || *s == '\\')
            fputc('\\', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

static void config_print_list(FILE *f, char *const *items, size_t n)
{
    fputc('\'', f);
    for (size_t i = 0; i < n; i++) {
        for (const char *s = items[i]; *s; s++) {
            if (*s == '\'' || *s == '\\')
                fputc('\\', f);
            fputc(*s, f);
        }
        if (i + 1 < n)
            fputs(", ", f);
    }
    fputc('\'', f);
}

void srv_config_print(FILE *f, const srv_config *cfg)
{
    fprintf(f, "# buzz-backfilld effective configuration (secrets redacted)\n");
    if (cfg->config_file != NULL)
        fprintf(f, "# configuration file: %s\n", cfg->config_file);
    for (int k = 0; k < NKEYS; k++) {
        const key_def *d = &config_keys[k];
        const void *field = (const char *)cfg + d->off;
        fprintf(f, "%s = ", d->name);
        switch (d->type) {
        case KT_STRING: {
            const char *s = *(char *const *)field;
            if (s != NULL && strcmp(d->name, SECRET_KEY) == 0) {
                size_t cap = strlen(s) + 16;
                char *red = malloc(cap);
                if (red != NULL)
                    srv_redact_conninfo(s, red, cap);
                config_print_quoted(f, red ? red : "(redacted)");
                free(red);
            } else {
                config_print_quoted(f, s ? s : "");
            }
            break;
        }
        case KT_LIST:
            config_print_list(f, *(char **const *)field,
                              *(const size_t *)((const char *)cfg + d->count_off));
            break;
        case KT_INT:
            fprintf(f, "%d", *(const int *)field);
            break;
        case KT_BOOL:
            fputs(*(const bool *)field ? "on" : "off", f);
            break;
        case KT_MODE:
            fprintf(f, "'%04o'", (unsigned)*(const int *)field);
            break;
        case KT_LEVEL:
            fputs(srv_log_level_name(*(const bf_log_level *)field), f);
            break;
        case KT_FORMAT:
            fputs(srv_log_format_name(*(const srv_log_format *)field), f);
            break;
        }
        fprintf(f, "  # %s\n", cfg->origin[k][0] ? cfg->origin[k] : "default");
    }
    /* each definition's settings that differ from the daemon's */
    for (size_t i = 0; i < cfg->n_overrides; i++) {
        const srv_throttle_override *o = &cfg->overrides[i];
        for (int k = 0; k < NKEYS; k++) {
            const key_def *d = &config_keys[k];
            if (!config_key_per_definition(d))
                continue;
            size_t off = d->off - offsetof(srv_config, throttle);
            const void *mine = (const char *)&o->v + off;
            const void *daemon = (const char *)&cfg->throttle + off;
            if (d->type == KT_STRING) {
                const char *a = *(char *const *)mine, *b = *(char *const *)daemon;
                if ((a == NULL) == (b == NULL) && (a == NULL || strcmp(a, b) == 0))
                    continue;
                fprintf(f, "definition.%s.%s = ", o->id, d->name);
                config_print_quoted(f, a ? a : "");
            } else {
                if (*(const int *)mine == *(const int *)daemon)
                    continue;
                fprintf(f, "definition.%s.%s = %d", o->id, d->name, *(const int *)mine);
            }
            fprintf(f, "  # %s\n", o->origin);
        }
    }
}

static const char *config_type_hint(const key_def *d)
{
    switch (d->type) {
    case KT_BOOL:
        return "on|off";
    case KT_INT:
        return "integer";
    case KT_LIST:
        return "comma list";
    case KT_LEVEL:
        return "level";
    case KT_FORMAT:
        return "text|json";
    case KT_MODE:
        return "octal mode";
    case KT_STRING:
        break;
    }
    return "string";
}

/* Words of text on lines of at most 80 columns, each indented. */
static void config_print_wrapped(FILE *f, int indent, const char *text)
{
    const int width = 80;
    int col = 0;
    const char *p = text;
    while (*p != '\0') {
        while (*p == ' ')
            p++;
        int len = (int)strcspn(p, " ");
        if (len == 0)
            break;
        if (col > 0 && col + 1 + len > width) {
            fputc('\n', f);
            col = 0;
        }
        if (col == 0)
            col = fprintf(f, "%*s", indent, "");
        else
            col += fprintf(f, " ");
        col += fprintf(f, "%.*s", len, p);
        p += len;
    }
    fputc('\n', f);
}

void srv_config_usage(FILE *f, const char *prog)
{
    fprintf(f,
            "Usage: %s [OPTION]... [run|migrate|check-config|preflight [ID]...]\n"
            "\n"
            "The buzz-backfill engine service: runs durable PostgreSQL backfills and serves\n"
            "the Admin and Readiness APIs over nng (ipc://, tcp://, tls+tcp://).\n"
            "\n"
            "Commands:\n"
            "  run            serve and run workers until SIGTERM or SIGINT (default)\n"
            "  migrate        apply the engine's schema migrations, then exit\n"
            "  check-config   validate the configuration and print it with secrets redacted;\n"
            "                 exit 0 when valid, 1 otherwise\n"
            "  preflight      check that each definition's batches (or those of the IDs\n"
            "                 given) can only be bounded work on the database: key columns\n"
            "                 and types, a unique key, an index in the key's order, and\n"
            "                 index scans in PostgreSQL's plans of the batch statements;\n"
            "                 writes nothing; exit 0 when all pass, 1 when one does not,\n"
            "                 2 for an ID no module defines\n"
            "\n"
            "Options:\n"
            "  -c, --config FILE   read settings from FILE (key = value lines, # comments);\n"
            "                      default: $BUZZ_BACKFILL_CONFIG, else no file\n"
            "  -h, --help          show this help and exit\n"
            "  -V, --version       show the version and exit\n"
            "\n"
            "Settings: a file key, the environment variable BUZZ_BACKFILL_<KEY> and the flag\n"
            "--<key-with-dashes>. Flags override the environment, which overrides the file.\n"
            "Booleans take on/off (true/false, yes/no, 1/0). An empty value means not set.\n"
            "\n",
            prog);
    for (int k = 0; k < NKEYS; k++) {
        const key_def *d = &config_keys[k];
        char flag[40], env[64];
        config_flag_name(d->name, flag, sizeof flag);
        config_env_name(d->name, env, sizeof env);
        fprintf(f, "  --%s %s   (%s; default: %s)\n      file: %s   env: %s\n", flag, d->metavar,
                config_type_hint(d), d->def ? d->def : "not set", d->name, env);
        config_print_wrapped(f, 6, d->help);
    }
    fprintf(f,
            "\nSignals: SIGTERM/SIGINT stop gracefully (workers cancel the statement in flight,\n"
            "which rolls back whole, and release their claims); SIGHUP reloads trusted keys,\n"
            "revoked tokens and the throttle settings.\n"
            "Exit status: 0 on success, 1 on any error (configuration, startup, runtime).\n");
}
