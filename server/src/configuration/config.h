/*
 * config.h - the configuration of buzz-backfilld: a key = value file (postgresql.conf style),
 * BUZZ_BACKFILL_<KEY> environment variables overriding it, and command-line flags overriding
 * both. One table in config_keys.c lists every key with its type, default and help text; --help,
 * check-config and docs/service.md follow it.
 *
 * Thread safety: load once in main() before any thread starts; read-only afterwards.
 */
#ifndef BUZZ_SRV_CONFIG_H
#define BUZZ_SRV_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "buzz/engine.h"
#include "log.h"

typedef enum srv_command {
    SRV_CMD_RUN = 0,      /* serve the admin API and run workers (default) */
    SRV_CMD_MIGRATE,      /* apply the engine migrations and exit */
    SRV_CMD_CHECK_CONFIG, /* validate, print the effective configuration (redacted), exit */
    SRV_CMD_HELP,         /* --help */
    SRV_CMD_VERSION,      /* --version */
    SRV_CMD_PREFLIGHT,    /* bf_preflight each definition (or the IDs given), report, exit */
} srv_command;

#define SRV_CONFIG_KEYS       48 /* settings in the table */
#define SRV_CONFIG_ORIGIN_MAX 160
#define SRV_CONFIG_LISTEN_MAX                                                                      \
    8 /* listeners (the transport's limit) */ /* "file /etc/buzz-backfilld.conf:12", "environment  \
                                                 ..." */

/* The throttle settings (docs/throttling.md) of the daemon, or of one definition
 * ("definition.<stable id>.<key>" lines of the configuration file, on top of the daemon's). */
typedef struct srv_throttle_values {
    int batch_target_ms;
    int batch_min;
    int batch_max;
    int max_rows_per_second;
    int replica_lag_bytes;
    int lock_waiters;
    int xact_age_s;
    int xid_age_pct;
    int check_ms;
    int wait_ms;
    char *custom_sql; /* NULL: none */
    /* the rate controller (docs/throttling.md "holding a latency target") */
    int latency_target_ms;
    char *latency_sql; /* NULL: none */
    int rate_min;
    int rate_max;
    int rate_increase;
    int rate_decrease_pct;
} srv_throttle_values;

typedef struct srv_throttle_override {
    char *id;
    srv_throttle_values v;
    char origin[SRV_CONFIG_ORIGIN_MAX]; /* where it was first set */
} srv_throttle_override;

typedef struct srv_config {
    srv_command command;
    char *config_file; /* NULL when none was given */
    char *const *ids;  /* preflight: the stable IDs after the command (argv's), n_ids of them */
    int n_ids;

    char *database_url; /* libpq URL or conninfo; secret: print only redacted */
    char **listen;      /* ipc://, tcp://, tls+tcp:// URLs */
    size_t n_listen;
    char *tls_cert_key_file; /* PEM certificate + private key for tls+tcp:// */
    char *http_listen;       /* http://host:port of /metrics, /livez, /readyz; NULL: off */
    int threads;             /* transport threads (concurrent requests) */
    int workers;             /* worker threads (concurrent backfills) */
    char **modules;          /* definitions modules (.so paths) */
    size_t n_modules;
    char *definitions_dir; /* definition files (*.def); NULL: none */
    bool auto_migrate;
    bool auto_backfill;
    char *token_audience;
    char *trusted_keys_file;
    char *revoked_tokens_file;
    bool ipc_boundary;
    int clock_skew_s;
    int lease_ms;
    int statement_timeout_ms;
    int lock_timeout_ms;
    int step_ms;
    int step_batches;
    int request_retention_s;
    int ipc_socket_mode;          /* 0600 or 0660 */
    int max_connections;          /* per listener */
    int max_connections_per_peer; /* per remote IP (tcp, tls) or uid (ipc) */
    bf_log_level log_level;
    srv_log_format log_format;      /* text or json lines */
    srv_throttle_values throttle;   /* every definition's, unless overridden */
    int daemon_max_rows_per_second; /* over all definitions of this process */
    srv_throttle_override *overrides;
    size_t n_overrides;
    bool watch_writers;    /* the old-writer watchdog of definitions without their own */
    bool watch_block;      /* new old-shape writes block a running backfill */
    int watch_grace_s;     /* a completed backfill keeps its watch this long */
    int preflight_watch_s; /* preflight: watch for old writers this long (0: off) */

    /* where each effective value came from, in table order (for check-config) */
    char origin[SRV_CONFIG_KEYS][SRV_CONFIG_ORIGIN_MAX];
} srv_config;

/*
 * Parse flags (argv), the configuration file (--config, or BUZZ_BACKFILL_CONFIG in envp), the
 * environment (envp: "NAME=value" strings, NULL-terminated; may be NULL) and validate the result
 * for the chosen command. Precedence: defaults < file < environment < flags. Unknown file keys,
 * malformed lines and invalid values are errors naming their origin ("file x.conf:12: ...").
 * Environment variables with the prefix that name no key are ignored (clients share the prefix).
 * On error: BF_ERR_INVALID_ARGUMENT (or BF_ERR_IO for an unreadable file) with a one-line reason
 * in diag, and nothing to free. On BF_OK, release with srv_config_fini().
 */
bf_err srv_config_load(srv_config *out, int argc, char *const argv[], char *const envp[],
                       char *diag, size_t diag_len);
void srv_config_fini(srv_config *cfg);

/*
 * What run would find wrong outside the configuration itself (run and check-config): every
 * ipc:// path is absent in an existing directory or is a socket; every tcp:// and tls+tcp://
 * host resolves; trusted_keys_file and revoked_tokens_file are regular files not writable by
 * group or others; definitions_dir is a directory not writable by group or others;
 * tls_cert_key_file (with a tls+tcp:// listener) is a regular file no one but
 * its owner may access. It reads no file and loads nothing. BF_ERR_INVALID_ARGUMENT with a
 * one-line reason naming the key and its origin (never the value) in diag.
 */
bf_err srv_config_check_environment(const srv_config *cfg, char *diag, size_t diag_len);

/* --help text: commands, options and every key with its flag, environment name and default. */
void srv_config_usage(FILE *f, const char *prog);

/* Replace the throttle's configuration with cfg's (the daemon's values, each definition's
 * overrides); BF_ERR_INVALID_ARGUMENT with a reason in diag leaves it unchanged. Used at start
 * and by the SIGHUP reload (config_throttle.c). */
bf_err srv_config_throttle(const srv_config *cfg, bf_throttle *throttle, char *diag,
                           size_t diag_len);

/* The position of key name in the table (cfg->origin's index); -1 for an unknown name. */
int srv_config_key_index(const char *name);

/* The effective configuration as a valid configuration file, with each value's origin as a
 * comment. The database password is redacted. */
void srv_config_print(FILE *f, const srv_config *cfg);

/* A libpq URL or key=value conninfo with its password replaced by "****" (bounded). */
void srv_redact_conninfo(const char *conninfo, char *out, size_t cap);

#endif /* BUZZ_SRV_CONFIG_H */
