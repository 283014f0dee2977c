/*
 * config_keys.c - the table of buzz-backfilld's settings: each key's type, default, bounds,
 * metavariable and help text. --help, check-config, the docs and the environment names follow
 * it (config_impl.h).
 */
#include <stddef.h>

#include "config_impl.h"

#define F(field) offsetof(srv_config, field)
#define NOCOUNT  0

const key_def config_keys[SRV_CONFIG_KEYS] = {
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
     "Directory of definition files (*.def, one definition each), loaded at startup; new "
     "files join on SIGHUP. Not writable by group or others.",
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
    {"throttle_latency_target_ms", KT_INT, "0", 0, 600000, "MS",
     "Rate controller: keep throttle_latency_sql's value at or below this many ms, raising the "
     "keys per second while it is, cutting them when it is not (0: off).",
     F(throttle.latency_target_ms), NOCOUNT},
    {"throttle_latency_sql", KT_STRING, NULL, 0, 0, "SQL",
     "Rate controller's signal: a query returning the relay's recent latency in ms (NULL: "
     "unknown) and optionally its window; read at most every throttle_check_ms.",
     F(throttle.latency_sql), NOCOUNT},
    {"throttle_rate_min", KT_INT, "100", 1, 100000000, "N",
     "Rate controller: the keys per second it never goes below.", F(throttle.rate_min), NOCOUNT},
    {"throttle_rate_max", KT_INT, "0", 0, 100000000, "N",
     "Rate controller: the keys per second it never goes above (0: twice the fastest pace the "
     "backfill's steps showed).",
     F(throttle.rate_max), NOCOUNT},
    {"throttle_rate_increase", KT_INT, "0", 0, 100000000, "N",
     "Rate controller: keys per second added per second at or below the target (0: a tenth of "
     "the highest rate in force).",
     F(throttle.rate_increase), NOCOUNT},
    {"throttle_rate_decrease_pct", KT_INT, "50", 1, 99, "PERCENT",
     "Rate controller: share of the rate a window above the target removes.",
     F(throttle.rate_decrease_pct), NOCOUNT},
    {"daemon_max_rows_per_second", KT_INT, "0", 0, 100000000, "N",
     "Keys per second this process passes over all definitions (0: no ceiling).",
     F(daemon_max_rows_per_second), NOCOUNT},
    {"watch_writers", KT_BOOL, "off", 0, 0, "on|off",
     "Old-writer watchdog of every definition that does not set its own: a row trigger counts "
     "rows written that break the postcondition while a backfill runs, by writer.",
     F(watch_writers), NOCOUNT},
    {"watch_block", KT_BOOL, "off", 0, 0, "on|off",
     "A running backfill whose watch sees new old-shape writes enters blocked, naming the "
     "writer.",
     F(watch_block), NOCOUNT},
    {"watch_grace_s", KT_INT, "0", 0, 604800, "SECONDS",
     "A completed backfill keeps its watch trigger this long (0: removed at completion).",
     F(watch_grace_s), NOCOUNT},
    {"preflight_watch_s", KT_INT, "0", 0, 3600, "SECONDS",
     "preflight: also watch each definition's table this long for writes that break its "
     "postcondition, and fail a definition an old writer still writes (0: off).",
     F(preflight_watch_s), NOCOUNT},
};

/* A key that may also be set per definition: one of the throttle settings. */

bool config_key_per_definition(const key_def *d)
{
    return d->off >= offsetof(srv_config, throttle) &&
           d->off < offsetof(srv_config, throttle) + sizeof(srv_throttle_values);
}
