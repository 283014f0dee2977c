/*
 * config.c - loading buzz-backfilld's configuration: the key = value file parser (postgresql.conf
 * style), BUZZ_BACKFILL_<KEY> environment overrides, getopt_long flags and the typed values.
 * The key table is config_keys.c, validation and the environment checks config_check.c, the
 * redaction of connection strings config_redact.c, check-config's output and --help
 * config_print.c (config_impl.h is what they share).
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "config_impl.h"

#define CONFIG_LINE_MAX 65536
#define CONFIG_OPT_BASE 1000

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

bf_err config_fail(char *diag, size_t cap, bf_err err, const char *fmt, ...)
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

int config_key_index(const char *name)
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
 * sets SQL the daemon runs (throttle_custom_sql, throttle_latency_sql), the database and the
 * listeners, so a file anyone can write hands the daemon to anyone (like the key files,
 * config_check_file). Checked on the open descriptor, for every command and every SIGHUP reload. */
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

void config_env_name(const char *key, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "%s", CONFIG_ENV_PREFIX);
    for (const char *p = key; *p != '\0' && n + 1 < cap; p++)
        out[n++] = (char)toupper((unsigned char)*p);
    out[n < cap ? n : cap - 1] = '\0';
}

void config_flag_name(const char *key, char *out, size_t cap)
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
            t->v.latency_sql = NULL;
            snprintf(t->origin, sizeof t->origin, "%s", o->origin);
            if ((t->id = strdup(o->id)) == NULL ||
                (cfg->throttle.custom_sql != NULL &&
                 (t->v.custom_sql = strdup(cfg->throttle.custom_sql)) == NULL) ||
                (cfg->throttle.latency_sql != NULL &&
                 (t->v.latency_sql = strdup(cfg->throttle.latency_sql)) == NULL))
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
            if (!srv_log_level_parse(v, (bf_log_level *)field))
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
    free(cfg->throttle.latency_sql);
    for (size_t i = 0; i < cfg->n_overrides; i++) {
        free(cfg->overrides[i].id);
        free(cfg->overrides[i].v.custom_sql);
        free(cfg->overrides[i].v.latency_sql);
    }
    free(cfg->overrides);
    memset(cfg, 0, sizeof *cfg);
}
