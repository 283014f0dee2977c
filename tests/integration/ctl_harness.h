/*
 * ctl_harness.h - running the buzzctl binary against a scripted server for the buzzctl suites
 * (test_buzzctl.c, test_buzzctl_fixes.c): buzzctl as a child with its stdout and stderr in
 * files, and a bare nng REP socket in the test process that receives its request envelopes
 * and answers them (or does not). Compiled into each suite (BUZZCTL_PATH comes from the suite's
 * target). The suite's group setup fills ch_dir with a private directory.
 */
#ifndef BUZZ_TEST_CTL_HARNESS_H
#define BUZZ_TEST_CTL_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <nng/nng.h>

#include "buzz/backfill/v1/admin.pb-c.h"
#include "buzz/backfill/v1/readiness.pb-c.h"
#include "buzz/backfill/v1/rpc.pb-c.h"

#define SC(name)   BUZZ__BACKFILL__V1__STATUS_CODE__##name
#define SCRIPT_MAX 16

extern char ch_dir[64]; /* the suite's private directory */
extern int ch_case_no;  /* numbers the files of each run */

typedef struct ctl_run {
    pid_t pid;
    char out_path[128], err_path[128];
    char *out, *err; /* after ctl_finish */
    int status;      /* exit code */
    bool reaped;     /* waitpid already collected raw */
    int raw;
} ctl_run;

typedef struct fake {
    nng_socket sock;
    char url[160];
} fake;

/* A scripted conversation; see ctl_scripted. */
typedef struct script {
    const ProtobufCMessage *answers[SCRIPT_MAX];
    int codes[SCRIPT_MAX];
    const char *message, *detail; /* of every answer; NULL: none */
    size_t n;
    int delay_ms;       /* before every answer */
    int delay_first_ms; /* before the first answer only */
    Buzz__Backfill__V1__RequestEnvelope *seen[SCRIPT_MAX];
    size_t n_seen;
} script;

/* buzzctl args... as a child (no BUZZ_BACKFILL_URL or _TOKEN in its environment, and
 * BUZZ_BACKFILL_DEFAULT_SOCKET, unless the test set it, a path where no socket is, so the
 * host's own daemon is never the default server); ctl_finish waits for it
 * and reads its stdout and stderr; ctl_run_all does both (no server involved). */
void ctl_start(ctl_run *r, const char *const *args);
void ctl_finish(ctl_run *r);
void ctl_free(ctl_run *r);
void ctl_run_all(ctl_run *r, const char *const *args);
/* A bare REP socket on a fresh ipc:// URL; fake_recv the next request envelope (caller frees);
 * fake_answer(_status) answers it with a code, message, detail and body (each may be NULL). */
void fake_open(fake *f);
void fake_close(fake *f);
Buzz__Backfill__V1__RequestEnvelope *fake_recv(fake *f);
void fake_answer_status(fake *f, const Buzz__Backfill__V1__RequestEnvelope *env, int code,
                        const char *message, const char *detail, const ProtobufCMessage *body);
void fake_answer(fake *f, const Buzz__Backfill__V1__RequestEnvelope *env, int code,
                 const ProtobufCMessage *body);
/* buzzctl --url <fresh server> cmd...: its one request answered OK with answer. */
void ctl_answered(ctl_run *r, const char *const *cmd, const ProtobufCMessage *answer);
void script_free(script *s);
/* buzzctl --url <fresh server> cmd...: every request answered by s (request i with codes[i]
 * and answers[i], the last pair repeating) until it exits; the envelopes are kept in s. */
void ctl_scripted(ctl_run *r, const char *const *cmd, script *s);
/* Fail the test when s holds a byte a terminal would act on (C0 but newline, DEL, C1). */
void assert_printable(const char *s);

#endif
