/* names.c - the names of the engine's small enums (states, outcomes, actions, steps). The bf_err
 * strings live in common/src/err.c. */
#include <stdarg.h>
#include <string.h>

#include "buzz/engine.h"
#include "internal.h"

static const char *const state_names[] = {
    [BF_STATE_PENDING] = "pending",     [BF_STATE_RUNNING] = "running",
    [BF_STATE_PAUSED] = "paused",       [BF_STATE_BLOCKED] = "blocked",
    [BF_STATE_FAILED] = "failed",       [BF_STATE_VALIDATING] = "validating",
    [BF_STATE_COMPLETED] = "completed",
};

const char *bf_state_name(bf_state state)
{
    if (state < BF_STATE_PENDING || state > BF_STATE_COMPLETED)
        return "unknown";
    return state_names[state];
}

bf_err bf_state_parse(const char *name, bf_state *out)
{
    if (name == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    for (int s = BF_STATE_PENDING; s <= BF_STATE_COMPLETED; s++) {
        if (strcmp(state_names[s], name) == 0) {
            *out = (bf_state)s;
            return BF_OK;
        }
    }
    return BF_ERR_INVALID_ARGUMENT;
}

const char *bf_validation_outcome_name(bf_validation_outcome outcome)
{
    switch (outcome) {
    case BF_VALIDATION_NONE:
        return "none";
    case BF_VALIDATION_SUCCESS:
        return "success";
    case BF_VALIDATION_FAILURE:
        return "failure";
    case BF_VALIDATION_CURRENT_STATE:
        return "current-state";
    }
    return "unknown";
}

const char *bf_action_name(bf_action action)
{
    switch (action) {
    case BF_ACTION_START:
        return "start";
    case BF_ACTION_PAUSE:
        return "pause";
    case BF_ACTION_RESUME:
        return "resume";
    case BF_ACTION_RETRY:
        return "retry";
    case BF_ACTION_VALIDATE:
        return "validate";
    }
    return "unknown";
}

const char *bf_step_name(bf_step step)
{
    switch (step) {
    case BF_STEP_IDLE:
        return "idle";
    case BF_STEP_BATCH:
        return "batch";
    case BF_STEP_VALIDATING:
        return "validating";
    case BF_STEP_COMPLETED:
        return "completed";
    case BF_STEP_RETRY:
        return "retry";
    case BF_STEP_FAILED:
        return "failed";
    case BF_STEP_BLOCKED:
        return "blocked";
    case BF_STEP_LOST:
        return "lost";
    case BF_STEP_THROTTLED:
        return "throttled";
    }
    return "unknown";
}
