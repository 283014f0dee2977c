/*
 * relay_readiness.c - what a relay does at startup: ask buzz-backfilld whether it may serve,
 * through the installed client library (pkg-config libbuzz-backfill-client) and the generated
 * Readiness stub, and never guess when the answer is unknown.
 *
 *     cc -o relay_readiness relay_readiness.c $(pkg-config --cflags --libs libbuzz-backfill-client)
 *     ./relay_readiness ipc:///run/buzz-backfill/admin.sock [TOKEN]
 *
 * Exit status: 0 ready, 1 not ready (the gating backfills are printed), 2 unknown (no answer,
 * or the service could not decide: the relay must not treat that as ready).
 */
#include <stdio.h>
#include <stdlib.h>

#include <buzz/backfill/v1/readiness.pb-c.h>
#include <buzz/client.h>

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s URL [TOKEN]\n", argv[0]);
        return 2;
    }
    bfc_options opts = {.token = argc == 3 ? argv[2] : NULL, .timeout_ms = 5000};
    char diag[128];
    bfc_client *c = NULL;
    bf_err err = bfc_open(&c, argv[1], &opts, diag, sizeof diag);
    if (err != BF_OK) {
        fprintf(stderr, "readiness unknown: %s\n", diag);
        return 2;
    }
    Buzz__Backfill__V1__CheckRequest req = BUZZ__BACKFILL__V1__CHECK_REQUEST__INIT;
    ProtobufCMessage *out = NULL;
    bfc_status st;
    err = bfc_call(c, &buzz__backfill__v1__readiness__descriptor, "Check", &req.base, &out, &st);
    int rc = 2;
    if (err != BF_OK || out == NULL) {
        fprintf(stderr, "readiness unknown: %s (%s)\n", bf_err_str(err),
                st.answered ? bfc_code_name(st.code) : st.transport_detail);
    } else {
        const Buzz__Backfill__V1__CheckResponse *r = (const Buzz__Backfill__V1__CheckResponse *)out;
        int unknown = 0;
        for (size_t i = 0; i < r->n_components; i++)
            unknown |=
                r->components[i]->status == BUZZ__BACKFILL__V1__COMPONENT_STATUS__UNKNOWN_STATUS;
        if (r->has_ready && r->ready) {
            printf("ready\n");
            rc = 0;
        } else if (!r->has_ready || unknown) {
            printf("unknown\n");
        } else {
            printf("not ready: gated by %zu backfill(s)\n", r->n_gating);
            for (size_t i = 0; i < r->n_gating; i++)
                printf("  %s\n", r->gating[i]->id ? r->gating[i]->id : "?");
            rc = 1;
        }
        protobuf_c_message_free_unpacked(out, NULL);
    }
    bfc_close(c);
    return rc;
}
