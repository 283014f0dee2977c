/*
 * audit.c - the append-only audit trail. Rows are written inside the transaction whose outcome
 * they record (an accepted change never commits without its row); rejections that never reach
 * the lifecycle get a transaction of their own. Every text is bounded before it is stored.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* Bounded copy for audit text; strings that are not a valid stable ID are still bounded. */
static const char *bounded(char *buf, size_t cap, const char *s)
{
    if (s == NULL)
        return NULL;
    bf__copy(buf, cap, s);
    /* never store control characters that could forge log lines */
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    return buf;
}

bf_err bf__audit(bf_engine *e, const bf_audit_record *rec)
{
    char id[81], actor[BF_ACTOR_MAX], authority[BF_ACTOR_MAX], request[BF_REQUEST_ID_MAX];
    char outcome[BF_DIAG_MAX], generation[24];
    const bf_actor *who = rec->who;
    bf__format(generation, sizeof generation, "%lld", (long long)rec->generation);
    const char *params[] = {
        bounded(id, sizeof id, rec->backfill_id),
        rec->action,
        who ? bounded(actor, sizeof actor, who->actor) : NULL,
        bounded(authority, sizeof authority, who && who->authority ? who->authority : "engine"),
        who ? bounded(request, sizeof request, who->request_id) : NULL,
        rec->prior ? bf_state_name(rec->prior) : NULL,
        rec->result ? bf_state_name(rec->result) : NULL,
        rec->has_generation ? generation : NULL,
        bounded(outcome, sizeof outcome, rec->outcome ? rec->outcome : ""),
    };
    return bf__exec0(e, "write audit",
                     "INSERT INTO buzz_backfill.audit (backfill_id, action, actor, authority,"
                     " request_id, prior_state, result_state, generation, outcome)"
                     " VALUES ($1, $2, $3, $4, $5, $6, $7, $8::bigint, $9)",
                     9, params);
}

bf_err bf_audit_rejection(bf_engine *e, const char *action, const char *id, const bf_actor *who,
                          bf_err err, const char *outcome)
{
    if (e == NULL || action == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    bf_err rc = bf__ensure_conn(e);
    if (rc != BF_OK)
        return rc;
    char text[BF_DIAG_MAX];
    bf__format(text, sizeof text, "rejected: %s%s%s", bf_err_str(err), outcome ? ": " : "",
               outcome ? outcome : "");
    char act[24];
    bf__copy(act, sizeof act, action);
    bf_audit_record rec = {.backfill_id = id, .action = act, .who = who, .outcome = text};
    return bf__audit(e, &rec);
}

bf_err bf_audit_list(bf_engine *e, const char *id, int64_t before_seq, bf_audit_entry *out,
                     int limit, int *count_out)
{
    if (e == NULL || out == NULL || count_out == NULL || limit < 1 || limit > 1000)
        return BF_ERR_INVALID_ARGUMENT;
    if (id != NULL && !bf_id_valid(id))
        return BF_ERR_INVALID_ARGUMENT;
    bf_err err = bf__ensure_conn(e);
    if (err != BF_OK)
        return err;
    char before[24], lim[16];
    bf__format(before, sizeof before, "%lld", (long long)before_seq);
    bf__format(lim, sizeof lim, "%d", limit);
    const char *params[] = {id, before_seq > 0 ? before : NULL, lim};
    PGresult *r = NULL;
    err = bf__exec(e, &r, "read audit",
                   "SELECT seq, (extract(epoch FROM at) * 1000000)::bigint, backfill_id, action,"
                   " actor, authority, request_id, prior_state, result_state, generation, outcome"
                   " FROM buzz_backfill.audit"
                   " WHERE ($1::text IS NULL OR backfill_id = $1)"
                   " AND ($2::bigint IS NULL OR seq < $2::bigint)"
                   " ORDER BY seq DESC LIMIT $3::integer",
                   3, params);
    if (err != BF_OK)
        return err;
    int n = PQntuples(r);
    for (int i = 0; i < n; i++) {
        bf_audit_entry *a = &out[i];
        memset(a, 0, sizeof *a);
        a->seq = bf__field_i64(r, i, 0);
        a->at = bf__field_i64(r, i, 1);
        bf__copy(a->backfill_id, sizeof a->backfill_id, bf__field(r, i, 2));
        bf__copy(a->action, sizeof a->action, bf__field(r, i, 3));
        bf__copy(a->actor, sizeof a->actor, bf__field(r, i, 4));
        bf__copy(a->authority, sizeof a->authority, bf__field(r, i, 5));
        bf__copy(a->request_id, sizeof a->request_id, bf__field(r, i, 6));
        bf_state st;
        if (bf_state_parse(bf__field(r, i, 7), &st) == BF_OK)
            a->prior = st;
        if (bf_state_parse(bf__field(r, i, 8), &st) == BF_OK)
            a->result = st;
        a->has_generation = !bf__isnull(r, i, 9);
        a->generation = bf__field_i64(r, i, 9);
        bf__copy(a->outcome, sizeof a->outcome, bf__field(r, i, 10));
    }
    PQclear(r);
    *count_out = n;
    return BF_OK;
}
