/*
 * daemon.h - real buzz-backfilld processes for the test suites (prefix bd_).
 *
 * bd_setup() makes a private directory with a trusted Ed25519 key (kid BD_KID, minted into
 * tokens with the buzz/token.h API of buzz-common), the trusted keys file and a revoked tokens
 * file. bd_start() writes a configuration file and starts `buzz-backfilld --config FILE run` as a
 * child: a fresh test database (bt_db_create, or another from bd_db_new), an ipc:// listener in the
 * private directory and a tcp://127.0.0.1:<free port> listener, the test definitions module
 * (tests/support/test_definitions.c) with the definition sets named in the options, and
 * returns once the admin listener answers a request. Its stderr goes to a log file in the
 * directory (kept when a test fails). bd_stop() sends SIGTERM and returns the exit status; the
 * suites assert it is 0 (clean stop; under ASan this also means no leak).
 *
 * The daemon's environment is the test's without any BUZZ_BACKFILL_* variable, so only the
 * configuration file configures it.
 *
 * The files variant (BUZZ_CONFORMANCE_DEFINITIONS=files, bt_files.h): instead of the module, the
 * daemon gets a definitions_dir of its own holding the definition file of each definition the
 * module would give it (its sets and revision), each checked against the module's C definition
 * first (the module is loaded into the test process for that, from a copy of its own).
 *
 * Every function fails the running cmocka test on an unexpected error, except where a return
 * value says otherwise. Not thread-safe except bd_client()/bd_call() on distinct clients.
 */
#ifndef BUZZ_TEST_DAEMON_H
#define BUZZ_TEST_DAEMON_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "buzz/backfill/v1/admin.pb-c.h"
#include "buzz/backfill/v1/readiness.pb-c.h"
#include "buzz/backfill/v1/rpc.pb-c.h"
#include "buzz/client.h"
#include "buzz/token.h"

#define BD_AUDIENCE "buzz-test"
#define BD_KID      "k1"
#define BD_SC(name) BUZZ__BACKFILL__V1__STATUS_CODE__##name
#define BD_ST(name) BUZZ__BACKFILL__V1__STATE__##name
#define BD_CS(name) BUZZ__BACKFILL__V1__COMPONENT_STATUS__##name

typedef Buzz__Backfill__V1__CheckResponse bd_check_resp;
typedef Buzz__Backfill__V1__ControlResponse bd_control_resp;
typedef Buzz__Backfill__V1__ValidateResponse bd_validate_resp;
typedef Buzz__Backfill__V1__GetResponse bd_get_resp;

/* ---- the private directory, databases ------------------------------------------------- */

/* Make the private directory and the keys. name: a short tag for the directory. */
void bd_setup(const char *name);
/* Kill daemons still running, drop the databases made by bd_db_new, and remove the directory
 * unless keep (a failed test: the logs stay for reading). */
void bd_teardown(bool keep);
const char *bd_dir(void);
/* The suite's definitions directory, <bd_dir()>/defs, made on first use (0755: the daemon
 * refuses one writable by group or others); bd_def_file writes text to a file in it (0644),
 * bd_defs_clear removes its files; and
 * bd_defs_extra is the configuration line that points a daemon at it (bd_options.extra). */
const char *bd_defs_dir(void);
void bd_def_file(const char *name, const char *text);
void bd_defs_clear(void); /* every *.def of it removed */
const char *bd_defs_extra(void);

/* A further fresh database on BUZZ_TEST_PG_URL; its conninfo (valid until bd_teardown). */
const char *bd_db_new(const char *name);
/* Drop the database bd_db_new made last (its daemons stopped); its slot is free again. */
void bd_db_drop_last(void);
/* A libpq connection to conninfo (NULL: bt_db_conninfo()). */
PGconn *bd_connect(const char *conninfo);
/* Wait (at most 60 s) until the engine schema exists on c and holds n backfill rows (a
 * daemon's startup migrates and registers after its listeners answer). */
void bd_wait_registered(PGconn *c, int n);
/* `buzz-backfilld migrate` on conninfo (NULL: bt_db_conninfo()); asserts exit 0. */
void bd_migrate(const char *conninfo);

/* ---- daemons --------------------------------------------------------------------------- */

typedef struct bd_options {
    const char *conninfo;    /* NULL: bt_db_conninfo() */
    const char *definitions; /* BUZZ_TEST_DEFINITIONS for the module; NULL: no module */
    const char *revision;    /* BUZZ_TEST_REVISION; NULL: the module's default */
    bool auto_migrate;
    bool auto_backfill;
    bool ipc_boundary; /* token-less ipc:// requests get boundary authority */
    bool tcp;          /* also listen on tcp://127.0.0.1:<free port> */
    int workers;       /* worker threads (0: serve only) */
    int threads;       /* transport threads */
    int lease_ms;
    int statement_timeout_ms; /* 0: as long as the lease allows (lease - step_ms - 1) */
    int lock_timeout_ms;      /* 0: the same */
    int step_batches;         /* 0: the daemon's default */
    int request_retention_s;  /* 0: default */
    const char *log_level;
    const char *extra; /* configuration lines appended to the file (later keys win); NULL */
    const char *tls_cert_key_file; /* also listen on tls+tcp://127.0.0.1:<free port> with it */
} bd_options;

/* The defaults: manual mode, auto_migrate off, ipc boundary on, tcp on, 2 workers, 4 threads,
 * lease 30 s, log level debug. */
bd_options bd_defaults(void);

typedef struct bd_daemon {
    pid_t pid;
    int seq;
    char ipc_url[160];
    char tcp_url[64]; /* "" without a tcp listener */
    char tls_url[64]; /* "" without a tls+tcp listener */
    char config[160];
    char log[160];
} bd_daemon;

/* Start and wait (at most 30 s) until every listener answers a request. */
void bd_start(bd_daemon *d, const bd_options *o);
/* bd_start in two halves, to start several daemons at once: launch, then wait. */
void bd_launch(bd_daemon *d, const bd_options *o);
void bd_wait_up(bd_daemon *d);
/* Send sig (0: none) and wait at most 60 s for the exit; returns the exit status, 128+signal
 * when killed. Fails the test when the process does not exit. */
int bd_signal_wait(bd_daemon *d, int sig);
/* SIGTERM; asserts a clean exit (status 0). */
void bd_stop(bd_daemon *d);
/* SIGKILL: no cleanup at all (a crash). */
void bd_kill(bd_daemon *d);
/* A daemon suite's fixture: bd_setup(name), the suite database (bt_db_create(name)) and a
 * connection to it. */
PGconn *bd_suite_open(const char *name);
/* Undo bd_suite_open: stop d when it runs (d may be NULL), close pg, drop the suite database,
 * bd_teardown(keep). */
void bd_suite_close(bd_daemon *d, PGconn *pg, bool keep);
bool bd_log_contains(const bd_daemon *d, const char *text);
/* Wait at most 60 s for text to appear in the daemon's log. */
void bd_wait_log(const bd_daemon *d, const char *text);
/* SIGHUP, then wait until the daemon logged that it reloaded keys and revocations. */
void bd_reload(bd_daemon *d);
/* Append lines to d's configuration file (later keys win), SIGHUP it and wait (bd_wait_log)
 * for logged. */
void bd_reconfigure(bd_daemon *d, const char *lines, const char *logged);

/* ---- tokens ---------------------------------------------------------------------------- */

typedef struct bd_token_spec {
    const char *actor;     /* NULL: "operator@test" */
    uint32_t caps;         /* BFT_CAP_* */
    uint32_t roles;        /* BFT_ROLE_* */
    const char *audience;  /* NULL: BD_AUDIENCE */
    int64_t not_before;    /* Unix seconds; 0: absent */
    int64_t expires_at;    /* Unix seconds; 0: now + 1 h */
    const bft_secret *key; /* NULL: the trusted key */
} bd_token_spec;

/* Mint a token into out (at least BFT_TOKEN_MAX + 1 bytes); its ID (hex) into id_hex when not
 * NULL. */
void bd_mint(char *out, size_t out_len, const bd_token_spec *spec, char *id_hex);
/* A token of the trusted key for "operator@test" with caps; static storage, one per call site
 * is not needed: the string is copied into a ring of 8. */
const char *bd_token(uint32_t caps);
/* Append a token ID to the revoked tokens file (bd_reload a running daemon afterwards). */
void bd_revoke(const char *id_hex);

/* ---- clients and calls ----------------------------------------------------------------- */

/* A client of url (token may be NULL); timeout_ms 0: 30 s. retries -1: one attempt only. */
bfc_client *bd_client(const char *url, const char *token, int timeout_ms, int retries);
/* One call; returns the status code, or -1 when no answer came (see bfc_last_status). *out
 * (may be NULL) receives the body for OK and FAILED_PRECONDITION. */
int bd_call(bfc_client *c, const ProtobufCServiceDescriptor *svc, const char *method,
            const ProtobufCMessage *in, ProtobufCMessage **out);
/* Admin.<method>(ControlRequest{id}); Start, Pause, Resume, Retry. */
int bd_control(bfc_client *c, const char *method, const char *id, bd_control_resp **out);
/* bd_control that must answer OK; fails the test with the server's detail otherwise. */
void bd_control_ok(bfc_client *c, const char *method, const char *id);
int bd_validate(bfc_client *c, const char *id, bd_validate_resp **out);
/* Admin.Get; fails the test unless OK. */
bd_get_resp *bd_get(bfc_client *c, const char *id);
/* Readiness.Check; fails the test unless OK. */
bd_check_resp *bd_check(bfc_client *c, uint32_t wait_ms);
/* The named component of a Check answer (fails the test when absent). */
const Buzz__Backfill__V1__Component *bd_component(const bd_check_resp *r, const char *name);
/* protobuf_c_message_free_unpacked(m, NULL); NULL is a no-op. */
void bd_free(void *m);

/* Poll Admin.Get until id is in state (at most 60 s); returns the last Get answer. */
bd_get_resp *bd_wait_state(bfc_client *c, const char *id, Buzz__Backfill__V1__State state);

/* The request ID of the last call on c, lower-case hex. */
const char *bd_request_id(const bfc_client *c);
/* Pin the next request ID of c to the 16 bytes given as 32 hex digits. */
void bd_pin(bfc_client *c, const char *hex);

void bd_sleep_ms(int ms);
/* A TCP port on 127.0.0.1 that was free a moment ago. */
int bd_free_port(void);

#endif
