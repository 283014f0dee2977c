/*
 * ctl_harness.c - see ctl_harness.h: buzzctl runs and the scripted nng REP server.
 */
#include "ctl_harness.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <nng/protocol/reqrep0/rep.h>

char ch_dir[64];
int ch_case_no;

/* ---- running buzzctl ---------------------------------------------------------------------- */

void ctl_start(ctl_run *r, const char *const *args)
{
    memset(r, 0, sizeof *r);
    snprintf(r->out_path, sizeof r->out_path, "%s/out.%d", ch_dir, ch_case_no);
    snprintf(r->err_path, sizeof r->err_path, "%s/err.%d", ch_dir, ch_case_no);
    char *argv[32];
    int n = 0;
    argv[n++] = (char *)BUZZCTL_PATH;
    for (; args[n - 1] != NULL && n < 31; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    r->pid = fork();
    assert_true(r->pid >= 0);
    if (r->pid == 0) {
        int out = open(r->out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int err = open(r->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
            _exit(126);
        unsetenv("BUZZ_BACKFILL_URL");
        unsetenv("BUZZ_BACKFILL_TOKEN");
        /* never the host's packaged daemon: a test that wants a default socket names one */
        setenv("BUZZ_BACKFILL_DEFAULT_SOCKET", "/nonexistent/buzz-test/admin.sock", 0);
        execv(argv[0], argv);
        _exit(127);
    }
}

static char *ch_slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *buf = calloc(1, 1 << 20);
    assert_non_null(buf);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

void ctl_finish(ctl_run *r)
{
    int st = r->raw;
    if (!r->reaped)
        assert_int_equal(waitpid(r->pid, &st, 0), r->pid);
    assert_true(WIFEXITED(st));
    r->status = WEXITSTATUS(st);
    r->out = ch_slurp(r->out_path);
    r->err = ch_slurp(r->err_path);
    ch_case_no++;
}

void ctl_free(ctl_run *r)
{
    free(r->out);
    free(r->err);
}

/* Run buzzctl to completion (no server involved). */
void ctl_run_all(ctl_run *r, const char *const *args)
{
    ctl_start(r, args);
    ctl_finish(r);
}

/* ---- the scripted server ------------------------------------------------------------------ */

void fake_open(fake *f)
{
    snprintf(f->url, sizeof f->url, "ipc://%s/srv.%d", ch_dir, ch_case_no);
    assert_int_equal(nng_rep0_open(&f->sock), 0);
    assert_int_equal(nng_socket_set_ms(f->sock, NNG_OPT_RECVTIMEO, 20000), 0);
    assert_int_equal(nng_listen(f->sock, f->url, NULL, 0), 0);
}

void fake_close(fake *f)
{
    nng_close(f->sock);
}

/* The next request envelope (caller frees). */
Buzz__Backfill__V1__RequestEnvelope *fake_recv(fake *f)
{
    nng_msg *m = NULL;
    assert_int_equal(nng_recvmsg(f->sock, &m, 0), 0);
    Buzz__Backfill__V1__RequestEnvelope *env =
        buzz__backfill__v1__request_envelope__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
    nng_msg_free(m);
    assert_non_null(env);
    return env;
}

/* Answer env with code, message, detail (may be NULL) and body (may be NULL). */
void fake_answer_status(fake *f, const Buzz__Backfill__V1__RequestEnvelope *env, int code,
                        const char *message, const char *detail, const ProtobufCMessage *body)
{
    Buzz__Backfill__V1__Status status = BUZZ__BACKFILL__V1__STATUS__INIT;
    status.code = code;
    status.message = (char *)message;
    status.detail = (char *)detail;
    Buzz__Backfill__V1__ResponseEnvelope resp = BUZZ__BACKFILL__V1__RESPONSE_ENVELOPE__INIT;
    resp.status = &status;
    uint8_t *packed = NULL;
    if (body != NULL) {
        packed = malloc(protobuf_c_message_get_packed_size(body) + 1);
        assert_non_null(packed);
        resp.has_body = true;
        resp.body.len = protobuf_c_message_pack(body, packed);
        resp.body.data = packed;
    }
    resp.has_request_id = env->has_request_id;
    resp.request_id = env->request_id;
    nng_msg *m = NULL;
    assert_int_equal(
        nng_msg_alloc(&m, buzz__backfill__v1__response_envelope__get_packed_size(&resp)), 0);
    buzz__backfill__v1__response_envelope__pack(&resp, nng_msg_body(m));
    assert_int_equal(nng_sendmsg(f->sock, m, 0), 0);
    free(packed);
}

void fake_answer(fake *f, const Buzz__Backfill__V1__RequestEnvelope *env, int code,
                 const ProtobufCMessage *body)
{
    fake_answer_status(f, env, code, NULL, NULL, body);
}

/* Run buzzctl --url <a fresh scripted server> cmd... and answer its one request with OK and
 * answer. */
void ctl_answered(ctl_run *r, const char *const *cmd, const ProtobufCMessage *answer)
{
    fake f;
    fake_open(&f);
    const char *args[16];
    int n = 0;
    args[n++] = "--url";
    args[n++] = f.url;
    for (int k = 0; cmd[k] != NULL; k++) {
        assert_true(n < 15);
        args[n++] = cmd[k];
    }
    args[n] = NULL;
    ctl_start(r, args);
    Buzz__Backfill__V1__RequestEnvelope *env = fake_recv(&f);
    fake_answer(&f, env, SC(OK), answer);
    buzz__backfill__v1__request_envelope__free_unpacked(env, NULL);
    ctl_finish(r);
    fake_close(&f);
}

/* A scripted conversation: request i is answered with codes[i] and answers[i] (the last pair
 * repeats), each after delay_ms; the envelopes received are kept for inspection. */

void script_free(script *s)
{
    for (size_t i = 0; i < s->n_seen; i++)
        buzz__backfill__v1__request_envelope__free_unpacked(s->seen[i], NULL);
    s->n_seen = 0;
}

/* Run buzzctl --url <a fresh scripted server> cmd... and answer every request it sends by s,
 * until it exits. */
void ctl_scripted(ctl_run *r, const char *const *cmd, script *s)
{
    fake f;
    fake_open(&f);
    assert_int_equal(nng_socket_set_ms(f.sock, NNG_OPT_RECVTIMEO, 50), 0);
    const char *args[24];
    int n = 0;
    args[n++] = "--url";
    args[n++] = f.url;
    for (int k = 0; cmd[k] != NULL; k++) {
        assert_true(n < 23);
        args[n++] = cmd[k];
    }
    args[n] = NULL;
    ctl_start(r, args);
    for (;;) {
        nng_msg *m = NULL;
        if (nng_recvmsg(f.sock, &m, 0) == 0) {
            Buzz__Backfill__V1__RequestEnvelope *env =
                buzz__backfill__v1__request_envelope__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
            nng_msg_free(m);
            assert_non_null(env);
            size_t i = s->n_seen < s->n ? s->n_seen : s->n - 1;
            int delay = s->delay_ms + (s->n_seen == 0 ? s->delay_first_ms : 0);
            if (delay > 0)
                usleep((useconds_t)delay * 1000);
            fake_answer_status(&f, env, s->codes[i], s->message, s->detail, s->answers[i]);
            if (s->n_seen < SCRIPT_MAX)
                s->seen[s->n_seen++] = env;
            else
                buzz__backfill__v1__request_envelope__free_unpacked(env, NULL);
            continue;
        }
        pid_t p = waitpid(r->pid, &r->raw, WNOHANG);
        assert_true(p >= 0);
        if (p == r->pid) {
            r->reaped = true;
            break;
        }
    }
    ctl_finish(r);
    fake_close(&f);
}

/* Bytes a terminal would act on: C0 controls but newline, DEL, raw C1 bytes, UTF-8 C1. */
void assert_printable(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '\n')
            continue;
        if (*p < 0x20 || *p == 0x7f ||
            (*p >= 0x80 && *p <= 0x9f && (p == (const unsigned char *)s || p[-1] < 0xc2)))
            fail_msg("control byte 0x%02x at offset %td in:\n%s", *p, (const char *)p - s, s);
        if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
            fail_msg("C1 control U+00%02X at offset %td", p[1], (const char *)p - s);
    }
}
