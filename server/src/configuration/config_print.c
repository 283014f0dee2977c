/*
 * config_print.c - output of the configuration: the effective configuration of check-config (a
 * valid configuration file, each value with its origin, the password redacted) and --help.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_impl.h"

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
