/*
 * dash_fetch.h - the reads and the controls behind a dashboard model (prefix bfc_dash_), shared
 * by `buzzctl dash` and buzz-backfill-desktop so that both show the same calls' results
 * through the same model (dash_view.h): one lifecycle, one projection.
 *
 * These functions do I/O on the client they are given and block for at most its budget per
 * call; the model is only written through the bfc_dash_apply_* functions. Threading: the
 * caller's (a client is used by one thread at a time; so is a model).
 */
#ifndef BUZZ_DASH_FETCH_H
#define BUZZ_DASH_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buzz/client.h"
#include "dash_view.h"

#define BFC_DASH_LIST_PAGE 1000 /* the server's largest page */

/* The clock a refresh stamps its results with (microseconds, realtime). */
int64_t bfc_dash_now_us(void);

/*
 * One refresh: Readiness.Check, every page of Admin.List (up to BFC_DASH_MAX_ROWS) and, when
 * detail_id is not NULL, Admin.Get and the audit tail of detail_id, each result (or failure)
 * applied to m at the time it arrived. c NULL: no connection could be opened; every read fails
 * with open_err and open_st (the last data stays, marked stale); so does every read when
 * Readiness.Check got no answer at all (unavailable or no answer in time), without waiting
 * out a budget for each. Returns the first error.
 */
bf_err bfc_dash_refresh(bfc_dash_model *m, bfc_client *c, bf_err open_err,
                        const bfc_status *open_st, const char *detail_id);

/*
 * The outcome of a control as one line, made only from what the call returned: the server's
 * answer ("pause X: running -> paused (request id ...)", "retry X refused, now paused: <the
 * server's reason> (request id ...)"), or, when no answer came, the typed failure and that
 * the outcome is unknown. out: the body bfc_control() gave (NULL when none).
 */
void bfc_dash_outcome(char *line, size_t cap, int action, const char *id, bf_err err,
                      const bfc_status *st, const ProtobufCMessage *out);

#endif
