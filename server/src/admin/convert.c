/*
 * convert.c - engine structs -> protobuf messages; engine errors -> wire status codes through
 * the one table in common/src/status.c.
 *
 * Design notes: the wire contract is proto2 so that unknown values have presence. Every field
 * below is set only when PostgreSQL knows it: no bound before start, no checkpoint before the
 * first batch, no claim when none is held, no source estimate when the planner had none, no
 * timestamp that was never written. Counters that PostgreSQL keeps from registration on
 * (generation, attempts, rows and batches committed) are known, so their zero is real.
 */
#include <string.h>

#include "buzz/status.h"
#include "srv.h"

/* ---- errors ------------------------------------------------------------------------------ */

srv_code srv_code_from_err(bf_err err)
{
    return (srv_code)bf_status_from_err(err);
}

/* ---- states ------------------------------------------------------------------------------ */

Buzz__Backfill__V1__State srv_state_to_proto(bf_state state)
{
    switch (state) {
    case BF_STATE_PENDING:
        return BUZZ__BACKFILL__V1__STATE__PENDING;
    case BF_STATE_RUNNING:
        return BUZZ__BACKFILL__V1__STATE__RUNNING;
    case BF_STATE_PAUSED:
        return BUZZ__BACKFILL__V1__STATE__PAUSED;
    case BF_STATE_BLOCKED:
        return BUZZ__BACKFILL__V1__STATE__BLOCKED;
    case BF_STATE_FAILED:
        return BUZZ__BACKFILL__V1__STATE__FAILED;
    case BF_STATE_VALIDATING:
        return BUZZ__BACKFILL__V1__STATE__VALIDATING;
    case BF_STATE_COMPLETED:
        return BUZZ__BACKFILL__V1__STATE__COMPLETED;
    }
    return BUZZ__BACKFILL__V1__STATE__STATE_UNSPECIFIED;
}

/* ---- the Backfill read model ------------------------------------------------------------- */

/* protobuf-c strings are char *; packing only reads them */
static char *convert_str(const char *s)
{
    return s[0] != '\0' ? (char *)s : NULL;
}

static Buzz__Backfill__V1__ValidationOutcome convert_outcome(bf_validation_outcome o)
{
    switch (o) {
    case BF_VALIDATION_SUCCESS:
        return BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__SUCCESS;
    case BF_VALIDATION_FAILURE:
        return BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__FAILURE;
    case BF_VALIDATION_CURRENT_STATE:
        return BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__CURRENT_STATE;
    case BF_VALIDATION_NONE:
        break;
    }
    return BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__VALIDATION_OUTCOME_UNSPECIFIED;
}

static void convert_definition(srv_backfill_msg *m, const bf_backfill *row)
{
    Buzz__Backfill__V1__Definition *d = &m->definition;
    buzz__backfill__v1__definition__init(d);
    d->description = convert_str(row->description);
    d->owner = convert_str(row->owner_meta);
    d->revision = convert_str(row->revision);
    d->key_types = convert_str(row->key_types);
    if (row->batch_size > 0) {
        d->has_batch_size = true;
        d->batch_size = (uint32_t)row->batch_size;
    }
    m->backfill.definition = d;
}

static void convert_bound(Buzz__Backfill__V1__Backfill *b, const bf_backfill *row)
{
    /* NULL bound and not empty: start has not captured one yet, so both stay absent */
    if (row->has_bound) {
        b->bound = (char *)row->bound;
        b->has_bound_empty = true;
        b->bound_empty = false;
    } else if (row->bound_empty) {
        b->has_bound_empty = true;
        b->bound_empty = true;
    }
    if (row->has_checkpoint)
        b->checkpoint = (char *)row->checkpoint;
}

static void convert_claim(srv_backfill_msg *m, const bf_backfill *row)
{
    if (row->claim_owner[0] == '\0')
        return;
    Buzz__Backfill__V1__Claim *c = &m->claim;
    buzz__backfill__v1__claim__init(c);
    c->owner = (char *)row->claim_owner;
    if (row->has_claim_expires) {
        c->has_expires_at_us = true;
        c->expires_at_us = row->claim_expires_at;
    }
    c->has_valid = true;
    c->valid = row->claimed;
    m->backfill.claim = c;
}

static void convert_retry_and_error(srv_backfill_msg *m, const bf_backfill *row)
{
    Buzz__Backfill__V1__Retry *r = &m->retry;
    buzz__backfill__v1__retry__init(r);
    r->has_attempts = true;
    r->attempts = row->attempts > 0 ? (uint32_t)row->attempts : 0;
    if (row->has_next_attempt) {
        r->has_next_attempt_at_us = true;
        r->next_attempt_at_us = row->next_attempt_at;
    }
    m->backfill.retry = r;

    if (row->error_class[0] == '\0' && row->error_detail[0] == '\0')
        return;
    Buzz__Backfill__V1__Diagnostic *d = &m->error;
    buzz__backfill__v1__diagnostic__init(d);
    d->error_class = convert_str(row->error_class);
    d->detail = convert_str(row->error_detail);
    m->backfill.error = d;
}

static void convert_validation(srv_backfill_msg *m, const bf_backfill *row)
{
    if (row->validation == BF_VALIDATION_NONE)
        return;
    Buzz__Backfill__V1__Validation *v = &m->validation;
    buzz__backfill__v1__validation__init(v);
    v->has_outcome = true;
    v->outcome = convert_outcome(row->validation);
    v->detail = convert_str(row->validation_detail);
    if (row->has_validated_at) {
        v->has_at_us = true;
        v->at_us = row->validated_at;
    }
    v->request_id = convert_str(row->validation_request);
    m->backfill.last_validation = v;
}

static void convert_progress(srv_backfill_msg *m, const bf_backfill *row)
{
    Buzz__Backfill__V1__Progress *p = &m->progress;
    buzz__backfill__v1__progress__init(p);
    p->has_rows_committed = true;
    p->rows_committed = row->rows_committed;
    if (row->has_rows_covered) {
        p->has_rows_covered = true;
        p->rows_covered = row->rows_covered;
    }
    p->has_batches_committed = true;
    p->batches_committed = row->batches_committed;
    if (row->has_source_estimate) {
        p->has_source_estimate = true;
        p->source_estimate = row->source_estimate;
    }
    m->backfill.progress = p;
}

static void convert_times(srv_backfill_msg *m, const bf_backfill *row)
{
    Buzz__Backfill__V1__Times *t = &m->times;
    buzz__backfill__v1__times__init(t);
    /* registered_at and updated_at are NOT NULL columns; 0 only for a row never read */
    if (row->registered_at != 0) {
        t->has_registered_at_us = true;
        t->registered_at_us = row->registered_at;
    }
    if (row->updated_at != 0) {
        t->has_updated_at_us = true;
        t->updated_at_us = row->updated_at;
    }
    if (row->has_started_at) {
        t->has_started_at_us = true;
        t->started_at_us = row->started_at;
    }
    if (row->has_last_progress_at) {
        t->has_last_progress_at_us = true;
        t->last_progress_at_us = row->last_progress_at;
    }
    if (row->has_completed_at) {
        t->has_completed_at_us = true;
        t->completed_at_us = row->completed_at;
    }
    if (row->now != 0) {
        t->has_observed_at_us = true;
        t->observed_at_us = row->now;
    }
    m->backfill.times = t;
}

/* What the last worker observed: its batch size, and what a live claim holder waits for. */
static void convert_throttle(srv_backfill_msg *m, const bf_backfill *row)
{
    if (row->has_batch_size_current && row->batch_size_current > 0) {
        m->backfill.has_batch_size_current = true;
        m->backfill.batch_size_current = (uint32_t)row->batch_size_current;
    }
    if (row->throttle_signal[0] == '\0')
        return;
    Buzz__Backfill__V1__Throttle *t = &m->throttle;
    buzz__backfill__v1__throttle__init(t);
    t->signal = (char *)row->throttle_signal;
    if (row->throttle_value[0] != '\0')
        t->value = (char *)row->throttle_value;
    if (row->has_throttled_since) {
        t->has_since_us = true;
        t->since_us = row->throttled_since;
    }
    m->backfill.throttle = t;
}

/* A collapse a live claim holder saw (bf__slow_judge); absent when not slow or unknown. */
static void convert_slow(srv_backfill_msg *m, const bf_backfill *row)
{
    if (row->slow_value[0] == '\0')
        return;
    Buzz__Backfill__V1__Slow *s = &m->slow;
    buzz__backfill__v1__slow__init(s);
    s->value = (char *)row->slow_value;
    if (row->has_slow_since) {
        s->has_since_us = true;
        s->since_us = row->slow_since;
    }
    m->backfill.slow = s;
}

/* The latest validation's progress as its validator recorded it; absent when none did. */
static void convert_validation_progress(srv_backfill_msg *m, const bf_backfill *row)
{
    const bf_validation_progress *vp = &row->validation_progress;
    if (!vp->present)
        return;
    Buzz__Backfill__V1__ValidationProgress *p = &m->validation_progress;
    buzz__backfill__v1__validation_progress__init(p);
    p->has_running = p->has_finished = p->has_lifecycle = true;
    p->running = vp->running;
    p->finished = vp->finished;
    p->lifecycle = vp->lifecycle;
    if (vp->owner[0] != '\0')
        p->owner = (char *)vp->owner;
    p->has_started_at_us = p->has_updated_at_us = true;
    p->started_at_us = vp->started_at;
    p->updated_at_us = vp->updated_at;
    if (vp->has_finished_at) {
        p->has_finished_at_us = true;
        p->finished_at_us = vp->finished_at;
    }
    p->has_rows_checked = p->has_rows_needing_repair = true;
    p->rows_checked = vp->rows_checked;
    p->rows_needing_repair = vp->rows_needing_repair;
    m->backfill.validation_progress = p;
}

/* The old-writer watchdog; absent when the backfill was never watched. */
static void convert_old_writers(srv_backfill_msg *m, const bf_backfill *row)
{
    const bf_old_writers *ow = &row->old_writers;
    if (ow->mode[0] == '\0')
        return;
    Buzz__Backfill__V1__OldWriters *o = &m->old_writers;
    buzz__backfill__v1__old_writers__init(o);
    o->has_watching = o->has_rows = o->has_healed = o->has_writers = true;
    o->watching = ow->watching;
    o->mode = (char *)ow->mode;
    o->rows = ow->rows;
    o->healed = ow->healed;
    o->writers = ow->writers;
    if (ow->rows > 0) {
        o->has_first_seen_at_us = o->has_last_seen_at_us = true;
        o->first_seen_at_us = ow->first_seen;
        o->last_seen_at_us = ow->last_seen;
        o->application = (char *)ow->application;
        o->address = (char *)ow->address;
        o->role = (char *)ow->role;
        o->has_top_rows = o->has_top_first_seen_at_us = o->has_top_last_seen_at_us = true;
        o->top_rows = ow->top_rows;
        o->top_first_seen_at_us = ow->top_first_seen;
        o->top_last_seen_at_us = ow->top_last_seen;
    }
    m->backfill.old_writers = o;
}

void srv_backfill_msg_init(srv_backfill_msg *m, const bf_backfill *row, bool gating)
{
    memset(m, 0, sizeof *m);
    Buzz__Backfill__V1__Backfill *b = &m->backfill;
    buzz__backfill__v1__backfill__init(b);
    b->id = (char *)row->id;
    Buzz__Backfill__V1__State st = srv_state_to_proto(row->state);
    if (st != BUZZ__BACKFILL__V1__STATE__STATE_UNSPECIFIED) {
        b->has_state = true;
        b->state = st;
    }
    convert_definition(m, row);
    b->has_required = true;
    b->required = row->required;
    b->has_gating = true;
    b->gating = gating;
    convert_bound(b, row);
    b->has_generation = true;
    b->generation = row->generation;
    convert_claim(m, row);
    convert_retry_and_error(m, row);
    convert_validation(m, row);
    convert_progress(m, row);
    convert_times(m, row);
    convert_throttle(m, row);
    convert_slow(m, row);
    convert_validation_progress(m, row);
    convert_old_writers(m, row);
}
