/*
 * fuzz_envelope.c - libFuzzer target: arbitrary bytes as one request message through
 * srv_dispatch() (envelope scan, method lookup in the real Admin and Readiness descriptors,
 * the audit ID read off the body, authentication, authorization, size limits, NUL checks of
 * strings, the budgeted body decode, request ID, deadline, response encode).
 *
 * The authenticator is real but trusts one random key nobody holds and grants no boundary
 * authority, so every token is parsed and verified and every request is refused before a
 * handler could run. The session has no database (conninfo NULL): audits of rejected controls
 * fail fast with BF_ERR_UNAVAILABLE and are logged, nothing blocks.
 *
 * Invariants checked beyond "no crash, no sanitizer report":
 * - srv_dispatch always returns BF_OK and a response envelope that decodes, with a status;
 * - the status is never OK and carries no body (nothing is authorized);
 * - the message and detail stay within their bounds and hold no control characters;
 * - the request ID is echoed exactly when the input carried a 16-byte one;
 * - srv_envelope_scan() accepts exactly the inputs protobuf-c's unpack accepts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buzz/token.h"
#include "log.h"
#include "srv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static srv_context fuzz_ctx;
static srv_dispatcher *fuzz_disp;
static srv_session fuzz_session;
static char fuzz_dir[64];
static char fuzz_keys[128];

static void fuzz_cleanup(void)
{
    unlink(fuzz_keys);
    rmdir(fuzz_dir);
}

static void fuzz_log(void *arg, const bf_log_record *rec)
{
    (void)arg;
    (void)rec; /* "could not audit ...": expected without a database */
}

static void fuzz_init(void)
{
    snprintf(fuzz_dir, sizeof fuzz_dir, "/tmp/buzz-fuzz-envelope-XXXXXX");
    if (mkdtemp(fuzz_dir) == NULL)
        abort();
    snprintf(fuzz_keys, sizeof fuzz_keys, "%s/trusted.pub", fuzz_dir);
    atexit(fuzz_cleanup);
    char diag[256] = "";
    bft_secret *secret = NULL;
    if (bft_keygen(&secret, "fuzz-1") != BF_OK ||
        bft_public_save(secret, fuzz_keys, diag, sizeof diag) != BF_OK)
        abort();
    bft_secret_free(secret); /* nobody can sign for the trusted key any more */

    srv_auth_config acfg = {.audience = "fuzz-aud", .trusted_keys_file = fuzz_keys};
    srv_auth *auth = NULL;
    if (srv_auth_new(&auth, &acfg, diag, sizeof diag) != BF_OK) {
        fprintf(stderr, "srv_auth_new: %s\n", diag);
        abort();
    }
    fuzz_ctx.auth = auth;
    fuzz_ctx.conninfo = NULL;
    fuzz_ctx.engine_cfg.log = fuzz_log;
    fuzz_session.ctx = &fuzz_ctx;
    if (srv_dispatcher_new(&fuzz_disp, &fuzz_ctx) != BF_OK ||
        srv_dispatcher_add(fuzz_disp, srv_admin_service(), srv_admin_policies()) != BF_OK ||
        srv_dispatcher_add(fuzz_disp, srv_readiness_service(), srv_readiness_policies()) != BF_OK)
        abort();
}

static void fuzz_check_text(const char *s, size_t max)
{
    if (s == NULL)
        return;
    size_t n = strlen(s);
    if (n > max)
        abort();
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fuzz_disp == NULL)
        fuzz_init();
    /* the first byte picks the listener the request seems to arrive on */
    static const char *const listeners[] = {"tcp", "tls", "ipc", "unknown"};
    srv_peer peer = {.listener = listeners[size > 0 ? data[0] % 4 : 0]};
    if (strcmp(peer.listener, "ipc") == 0) {
        peer.has_uid = true;
        peer.uid = 1000;
    }
    const uint8_t *in = size > 0 ? data + 1 : data;
    size_t in_len = size > 0 ? size - 1 : 0;

    uint8_t *out = NULL;
    size_t out_len = 0;
    if (srv_dispatch(fuzz_disp, &fuzz_session, &peer, in, in_len, srv_now_us(), &out, &out_len) !=
        BF_OK)
        abort();
    Buzz__Backfill__V1__ResponseEnvelope *resp =
        buzz__backfill__v1__response_envelope__unpack(NULL, out_len, out);
    if (resp == NULL || resp->status == NULL)
        abort();
    if (resp->status->code == BUZZ__BACKFILL__V1__STATUS_CODE__OK || resp->has_body)
        abort();
    fuzz_check_text(resp->status->message, SRV_MESSAGE_MAX_LEN);
    fuzz_check_text(resp->status->detail, SRV_DETAIL_MAX_LEN - 1);

    Buzz__Backfill__V1__RequestEnvelope *env =
        buzz__backfill__v1__request_envelope__unpack(NULL, in_len, in);
    /* the dispatcher's allocation-free scan accepts exactly what protobuf-c accepts */
    srv_envelope scanned;
    if ((srv_envelope_scan(&scanned, in, in_len) == BF_OK) != (env != NULL))
        abort();
    bool id16 = env != NULL && env->has_request_id && env->request_id.len == 16;
    if (resp->has_request_id != id16)
        abort();
    if (id16 && memcmp(resp->request_id.data, env->request_id.data, 16) != 0)
        abort();
    if (env != NULL)
        buzz__backfill__v1__request_envelope__free_unpacked(env, NULL);
    buzz__backfill__v1__response_envelope__free_unpacked(resp, NULL);
    free(out);
    return 0;
}
