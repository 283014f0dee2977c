/*
 * classify.c - the one SQLSTATE classification table.
 *
 * Every execution error is classified here before the engine reports it as handled:
 *   retryable       transient; the row stays running and backs off (bounded)
 *   unavailable     the connection broke; treated as retryable by workers
 *   prerequisite    a missing relation/column/function: the backfill blocks
 *   data_invariant  the data violates a constraint or type rule: the backfill blocks
 *   definition      the definition's SQL is wrong: the backfill fails
 * plus the engine's own SQLSTATEs raised by its schema (class BF).
 * The first matching prefix wins, so specific codes precede their class.
 */
#include <string.h>

#include "internal.h"

static const struct {
    const char *prefix;
    bf_err err;
    const char *label;
} sqlstate_table[] = {
    {"BFS01", BF_ERR_STALE, "claim or generation no longer current"},
    {"BFB01", BF_ERR_BATCH_BOUND, "batch exceeded its bound"},
    {"BFI01", BF_ERR_IMMUTABLE, "completed backfill is immutable"},
    {"BFI02", BF_ERR_IMMUTABLE, "captured bound is immutable"},
    {"40001", BF_ERR_RETRYABLE, "serialization failure"},
    {"40P01", BF_ERR_RETRYABLE, "deadlock detected"},
    {"55P03", BF_ERR_RETRYABLE, "lock timeout"},
    {"57014", BF_ERR_RETRYABLE, "statement timeout or cancel"},
    {"25P03", BF_ERR_RETRYABLE, "idle transaction timeout"},
    {"57P", BF_ERR_UNAVAILABLE, "server shutting down"},
    {"08", BF_ERR_UNAVAILABLE, "connection failure"},
    {"53", BF_ERR_RETRYABLE, "insufficient resources"},
    {"58", BF_ERR_RETRYABLE, "system error"},
    {"42P01", BF_ERR_PREREQUISITE, "undefined table"},
    {"42703", BF_ERR_PREREQUISITE, "undefined column"},
    {"42883", BF_ERR_PREREQUISITE, "undefined function"},
    {"42704", BF_ERR_PREREQUISITE, "undefined object"},
    {"3F000", BF_ERR_PREREQUISITE, "undefined schema"},
    {"42501", BF_ERR_PREREQUISITE, "insufficient privilege"},
    {"25006", BF_ERR_DEFINITION, "write in a read-only transaction"},
    {"23", BF_ERR_DATA_INVARIANT, "integrity constraint violation"},
    {"22", BF_ERR_DATA_INVARIANT, "data exception"},
    {"42", BF_ERR_DEFINITION, "invalid statement in definition"},
    {"", BF_ERR_RETRYABLE, "database error"},
};

bf_sqlstate_class bf__classify_sqlstate(const char *sqlstate)
{
    if (sqlstate == NULL)
        sqlstate = "";
    for (size_t i = 0; i < BF_ARRAY_LEN(sqlstate_table); i++) {
        size_t n = strlen(sqlstate_table[i].prefix);
        if (strncmp(sqlstate, sqlstate_table[i].prefix, n) == 0)
            return (bf_sqlstate_class){sqlstate_table[i].err, sqlstate_table[i].label};
    }
    return (bf_sqlstate_class){BF_ERR_RETRYABLE, "database error"};
}

const char *bf__error_class_name(bf_err err)
{
    switch (err) {
    case BF_ERR_RETRYABLE:
    case BF_ERR_TIMEOUT:
        return "retryable";
    case BF_ERR_UNAVAILABLE:
        return "unavailable";
    case BF_ERR_PREREQUISITE:
        return "prerequisite";
    case BF_ERR_DATA_INVARIANT:
        return "data_invariant";
    case BF_ERR_BATCH_BOUND:
        return "batch_bound";
    case BF_ERR_DEFINITION:
        return "definition";
    case BF_ERR_VALIDATION_FAILED:
        return "validation";
    default:
        return "internal";
    }
}
