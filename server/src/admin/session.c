/*
 * session.c - an engine session, lent by the transport to one request at a time: opened
 * lazily from the context's engine template on first use, reopened on the next use after it
 * was closed (set to NULL by its user after an error). The engine reconnects a lost
 * connection by itself, so a session that is open stays open. Its engine tells the thread
 * using it before each wait on PostgreSQL (srv_thread_blocks).
 */
#include "srv.h"

static _Thread_local void (*thread_block_fn)(void *arg);
static _Thread_local void *thread_block_arg;

void srv_thread_on_block(void (*fn)(void *arg), void *arg)
{
    thread_block_fn = fn;
    thread_block_arg = arg;
}

void srv_thread_blocks(void)
{
    if (thread_block_fn != NULL)
        thread_block_fn(thread_block_arg);
}

static void session_engine_blocks(void *arg)
{
    (void)arg;
    srv_thread_blocks();
}

bf_err srv_session_engine(srv_session *s, bf_engine **out)
{
    if (s == NULL || out == NULL || s->ctx == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    if (s->engine == NULL) {
        /* no database configured (tools, fuzzers): fail fast, never block */
        if (s->ctx->conninfo == NULL)
            return BF_ERR_UNAVAILABLE;
        bf_config cfg = s->ctx->engine_cfg;
        cfg.conninfo = s->ctx->conninfo;
        cfg.on_block = session_engine_blocks; /* its connect, the first one too, tells */
        bf_engine *engine = NULL;
        bf_err err = bf_engine_open(&engine, &cfg, s->ctx->registry);
        if (err != BF_OK)
            return err;
        s->engine = engine;
    }
    *out = s->engine;
    return BF_OK;
}
