/*
 * startup.h - the parts main.c composes: logging, signals, the context and its subsystems'
 * configuration, and the startup sequence of DESIGN.md with the workers it ends in.
 *
 * Order (main.c): config -> logging -> signals blocked -> auth -> srv_startup_begin(), whose
 * thread opens the database sessions meanwhile -> definitions modules and files -> dispatcher +
 * transport (the admin listener answers from here on, while serving is gated) ->
 * srv_startup_proceed(), after which the startup thread goes on:
 *   database (retry with backoff) -> migrations (auto_migrate) or bf_schema_check (a missing or
 *   incompatible schema is reported and re-checked, never papered over) -> registration of every
 *   definition (the complete required set, before anything starts) -> bf_start_required
 *   (auto_backfill only) -> worker threads, which recover already-started work in every mode ->
 *   periodic pruning of the request table.
 * Readiness never waits for this sequence: it reads PostgreSQL on every call.
 */
#ifndef BUZZ_SRV_STARTUP_H
#define BUZZ_SRV_STARTUP_H

#include "config.h"
#include "deffile.h"
#include "log.h"
#include "srv.h"
#include "transport.h"

/* ---- signals ------------------------------------------------------------------------------- */

/* Block SIGTERM, SIGINT and SIGHUP and ignore SIGPIPE in the calling thread; call before any
 * thread starts so every thread inherits the mask and only srv_signals_serve() receives them. */
bf_err srv_signals_block(void);
/* What SIGHUP reloads besides the auth key sets: the throttle settings of the configuration,
 * read anew from the same flags, file and environment (the rest of a changed configuration
 * needs a restart). */
typedef struct srv_reload {
    int argc;
    char *const *argv;
    char *const *envp;
    bf_throttle *throttle;
    srv_defdir *definitions;     /* the definition files loaded at start (may be NULL) */
    const bf_config *engine_cfg; /* new definition files register through it */
    bool auto_backfill;          /* automatic mode: a required one that joins is started */
} srv_reload;

/* Wait for signals: SIGHUP reloads the auth key sets (srv_auth_reload) and, with reload, the
 * throttle settings (a failed reload keeps the previous ones, logged) and reads the
 * definitions directory again, new files joining the registry (srv_defdir_reload); SIGTERM or
 * SIGINT returns false, a stop asked for by srv_signals_stop_fatal() returns true. */
bool srv_signals_serve(srv_auth *auth, const srv_reload *reload);
/* Ask srv_signals_serve() to return as after SIGTERM, but for a failure the process cannot
 * recover from (the daemon then exits 1, for its supervisor to restart it). why: a static
 * string for the log. Thread-safe; may be called from any thread. */
void srv_signals_stop_fatal(const char *why);

/* ---- composition helpers ------------------------------------------------------------------- */

/* Raise the soft limit on open descriptors to the hard limit (nng and libpq poll without
 * select, so any number works), and warn when it stays below what the connection caps, the
 * threads and the workers may hold at once. */
void srv_fd_limit_raise(const srv_config *cfg);

/* Load every configured definitions module and the definition files of definitions_dir into a
 * new registry (all or nothing). *files_out (NULL without definitions_dir) owns the files'
 * definitions: release both with srv_registry_unload(). */
bf_err srv_registry_load(bf_registry **out, srv_defdir **files_out, const srv_config *cfg,
                         char *diag, size_t diag_len);
/* The same into reg, an empty registry that sessions may already hold (bf_registry is
 * append-only; they only read it). On error the caller discards reg and *files_out (which may
 * hold files reg points into) with srv_registry_unload(), after whatever reads reg is gone. */
bf_err srv_registry_fill(bf_registry *reg, srv_defdir **files_out, const srv_config *cfg,
                         char *diag, size_t diag_len);
void srv_registry_unload(bf_registry *reg, srv_defdir *files);

/* The subsystems' configurations, borrowing strings from cfg. */
srv_auth_config srv_auth_config_from(const srv_config *cfg);
srv_transport_config srv_transport_config_from(const srv_config *cfg);

/* Fill a context from the configuration (registry and auth may be NULL). Also sets libpq's
 * default connect timeout (PGCONNECT_TIMEOUT) when the environment has none, so startup and
 * shutdown are never stuck on an unreachable host. Call before threads start. */
void srv_context_init(srv_context *ctx, const srv_config *cfg, const bf_registry *registry,
                      srv_auth *auth);

/* The migrate command: apply the engine migrations once; 0 on success, 1 on failure. */
int srv_migrate_command(const srv_config *cfg);
/* buzz-backfilld preflight [ID]...: bf_preflight for each definition of the modules (or each
 * ID given), one line each on stdout ("ok    <id>: <plans>" or "FAIL  <id>: <error>: <what
 * and the fix>"). Returns the exit status: 0 all pass, 1 one does not (or an error), 2 an ID
 * that no module defines. */
int srv_preflight_command(const srv_config *cfg);

/* ---- the startup sequence and the workers ------------------------------------------------ */

typedef struct srv_startup srv_startup;

/* Start the sequence above on its own thread. cfg and ctx must outlive the srv_startup. It
 * opens the database sessions (its own and the workers') and then waits for
 * srv_startup_proceed() before it reads the schema or touches the registry, so that main.c can
 * start it before the definitions are loaded and the listeners are up: opening sessions is most
 * of a restart's wait on a busy database, and it needs neither. (A daemon that then fails to
 * load its definitions stops it and exits having touched nothing; srv_startup_free() waits for
 * a connection attempt in progress, at most libpq's connect timeout.) */
bf_err srv_startup_begin(srv_startup **out, srv_context *ctx, const srv_config *cfg);
/* The registry is complete and the listeners are up: the sequence may go on. Thread-safe. */
void srv_startup_proceed(srv_startup *s);
/* Ask the sequence and every worker to stop: a batch in flight commits or rolls back, claims
 * are released. Returns at once; thread-safe. */
void srv_startup_stop(srv_startup *s);
/* Stop, join every thread, close their engines. NULL is a no-op. */
void srv_startup_free(srv_startup *s);

#endif /* BUZZ_SRV_STARTUP_H */
