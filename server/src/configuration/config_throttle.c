/*
 * config_throttle.c - the throttle settings of the configuration (config.h srv_throttle_values:
 * the daemon's, and each definition's from "definition.<stable id>.<key>" lines) handed to the
 * engine's bf_throttle, at start and at every SIGHUP reload (docs/throttling.md).
 */
#include <stdlib.h>

#include "config.h"

static bf_throttle_config config_throttle_engine(const srv_throttle_values *v)
{
    return (bf_throttle_config){
        .batch_target_ms = v->batch_target_ms,
        .batch_min = v->batch_min,
        .batch_max = v->batch_max,
        .max_rows_per_second = v->max_rows_per_second,
        .replica_lag_bytes = v->replica_lag_bytes,
        .lock_waiters = v->lock_waiters,
        .xact_age_s = v->xact_age_s,
        .xid_age_pct = v->xid_age_pct,
        .custom_sql = v->custom_sql,
        .check_ms = v->check_ms,
        .wait_ms = v->wait_ms,
        .latency_target_ms = v->latency_target_ms,
        .latency_sql = v->latency_sql,
        .rate_min = v->rate_min,
        .rate_max = v->rate_max,
        .rate_increase = v->rate_increase,
        .rate_decrease_pct = v->rate_decrease_pct,
    };
}

bf_err srv_config_throttle(const srv_config *cfg, bf_throttle *throttle, char *diag,
                           size_t diag_len)
{
    size_t n = cfg->n_overrides;
    const char **ids = n ? calloc(n, sizeof *ids) : NULL;
    bf_throttle_config *own = n ? calloc(n, sizeof *own) : NULL;
    if (n && (ids == NULL || own == NULL)) {
        free(ids);
        free(own);
        return BF_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        ids[i] = cfg->overrides[i].id;
        own[i] = config_throttle_engine(&cfg->overrides[i].v);
    }
    bf_throttle_config def = config_throttle_engine(&cfg->throttle);
    bf_err err = bf_throttle_configure(throttle, &def, ids, own, n, cfg->daemon_max_rows_per_second,
                                       diag, diag_len);
    free(ids);
    free(own);
    return err;
}
