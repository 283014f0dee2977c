/*
 * bt.h - shared support for the cmocka suites: a private database per test program on the
 * PostgreSQL named by BUZZ_TEST_PG_URL, small SQL helpers, barrier helpers built on advisory
 * locks, and child processes. Tests drive the engine only through its public API; these
 * helpers never write lifecycle columns.
 */
#ifndef BUZZ_TEST_BT_H
#define BUZZ_TEST_BT_H

#include <libpq-fe.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "buzz/engine.h"

/* Create a fresh database for this test program (dropped by bt_db_drop) and return its
 * conninfo. Fails the test when BUZZ_TEST_PG_URL is unset or the server is unreachable. */
const char *bt_db_create(const char *name);
void bt_db_drop(void);
/* A suite's teardown: free its registry (NULL-safe), then drop its database. */
void bt_db_drop_registry(bf_registry *reg);
const char *bt_db_conninfo(void);

/* A plain libpq connection to the test database (fails the test on error). */
PGconn *bt_connect(void);
void bt_exec(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* First column of the first row as an integer / text (caller frees text). */
long long bt_int(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *bt_text(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Engine session on the test database with the given registry; migrated. */
bf_engine *bt_engine(const bf_registry *reg, const char *owner, int lease_ms);

/* Batches one worker step of the engines made from now on may commit (bf_config.step_batches).
 * The helpers default to 1, so a suite observes (and orders, through the step hooks) each batch
 * of a declarative definition; 0 restores the engine's production default. */
void bt_set_step_batches(int n);
/* A registry of defs. With BUZZ_CONFORMANCE_DEFINITIONS=files (bt_files.h), each definition
 * is replaced by the definition file of its ID after checking that the two are the same
 * definition; one with C callbacks stays C. Fails the test on any error. */
bf_registry *bt_registry(const bf_definition *const *defs, size_t n);
/* The definition a test process runs for def: def, or in the files variant the definition file
 * standing in for it (bt_files_standin: checked to be the same definition; revision, when not
 * NULL, is the informational revision the process runs it with). Never calls cmocka (usable in
 * forked children); on error BF_ERR_DEFINITION (BF_ERR_INVALID_ARGUMENT: a bad switch) with the
 * reason in why. */
bf_err bt_standin(const bf_definition **out, const bf_definition *def, const char *revision,
                  char *why, size_t why_len);
/* A C mutation made of SQL statements only: runs each statement of arg (a NULL-terminated
 * array of strings) through bf_txn_exec() in order and returns the first error, as a definition
 * file's `mutate` statements do (server/src/configuration/deffile.c). A definition whose mutation
 * is this one has a definition file standing in for it in the files variant. */
bf_err bt_sql_mutate(bf_txn *txn, void *arg);
/* The throttle (bf_config.throttle) of the engines made from now on; NULL (the default): none. */
void bt_set_throttle(bf_throttle *t);

/* Demo-style source tables. */
void bt_make_items(PGconn *c, const char *table, long rows); /* id bigint PK, val int, fixed int */
void bt_make_events(PGconn *c, const char *table, long rows, int ties); /* (ts, eid) compound */

/* Barrier: an advisory lock (key) held by conn. Definitions call
 * bt_barrier(key) in SQL (created by bt_install_barrier) which blocks until released. */
void bt_install_barrier(PGconn *c);
void bt_lock(PGconn *holder, int key);
void bt_unlock(PGconn *holder, int key);
/* Block until at least n backends wait for the advisory lock key. */
void bt_wait_waiters(PGconn *c, int key, int n);

/* Run fn(arg) in a child process; returns its pid. */
pid_t bt_spawn(int (*fn)(void *), void *arg);
/* Wait for a child; returns its exit status (or 128+signal). */
int bt_wait_child(pid_t pid);

/* Children started from now on preload lib (LD_PRELOAD), with ASan's link-order check off (a
 * preloaded library comes before the ASan runtime); NULL restores the environment as it was. */
void bt_preload(const char *lib);

/* Read a backfill row through the engine API. */
bf_backfill bt_get(bf_engine *e, const char *id);

/* Apply an action as an operator; returns the bf_err. */
bf_err bt_act(bf_engine *e, bf_action action, const char *id);

/* One worker step (or, with run, bf_worker_run until idle or stopped) on its own thread, so the
 * test can hold a barrier, pause, stop or take over meanwhile. */
typedef struct bt_step_thread {
    bf_worker *w;
    bool run;
    bf_step_info info; /* the step's report (not with run) */
    bf_err err;
    atomic_bool done; /* the step returned */
    pthread_t tid;
} bt_step_thread;

void bt_step_thread_start(bt_step_thread *t, bf_worker *w, bool run);
/* Join, failing the test (instead of hanging) when the thread has not returned within
 * timeout_s seconds. */
void bt_step_thread_join(bt_step_thread *t, int timeout_s);

/* A new worker on e holding the claim of id (fails the test otherwise). */
bf_worker *bt_claimed_worker(bf_engine *e, const char *id);

/* Step the worker until it reports something other than BF_STEP_BATCH; returns that step. */
bf_step bt_step_until_not_batch(bf_worker *w, int max_steps);

/* ---- a captured engine log ------------------------------------------------------------- */

/* An engine (migrated, step_batches 1, statement and lock timeouts 20 s) whose log records of
 * level info and above go to one process-wide buffer instead of stderr (BT_VERBOSE prints them
 * too). bt_log_reset empties it; bt_log_count counts a needle in it; bt_log_text copies it
 * (caller frees). */
bf_engine *bt_capture_engine(const bf_registry *reg, const char *owner, int lease_ms);
void bt_log_reset(void);
int bt_log_count(const char *needle);
char *bt_log_text(void);

/* ---- conformance helpers (claims, crashes, timeouts) ------------------------------------ */

/* bt_engine() with explicit per-statement timeouts (fails the test on error). */
bf_engine *bt_engine_timeouts(const bf_registry *reg, const char *owner, int lease_ms,
                              int statement_timeout_ms, int lock_timeout_ms);

/* An engine for a forked child: never calls cmocka, does not migrate; NULL on failure. */
bf_engine *bt_child_engine(const bf_registry *reg, const char *owner, int lease_ms);

/* Claim id, polling while it is not claimable yet (an unexpired claim, a retry backoff) for at
 * most timeout_ms. Never calls cmocka (safe in children); returns the last bf_err. */
bf_err bt_claim_poll(bf_worker *w, const char *id, int64_t *generation_out, int timeout_ms);

/* Pid of a backend waiting for barrier key, 0 when none. */
int bt_barrier_waiter_pid(PGconn *c, int key);

/* Block until the backend pid has exited (e.g. the session of a killed child). */
void bt_wait_backend_gone(PGconn *c, int pid);

/* Block until at least n backends of the test database wait for a heavyweight lock (a row
 * locked by the test, for instance). */
void bt_wait_lock_waiters(PGconn *c, int n);

#endif
