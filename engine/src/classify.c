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
 *
 * Beside it, the condition names (PostgreSQL's errcodes.txt) of the exact SQLSTATEs a
 * definition's SQL or data can cause, which diagnostics show with the code: an operator reads
 * "undefined_column 42703, column fixd" and knows what to fix.
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
    {"P0001", BF_ERR_DATA_INVARIANT, "raised by a trigger or function"},
    {"P0", BF_ERR_DEFINITION, "PL/pgSQL error"},
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

static const struct {
    const char code[6];
    const char *name;
} condition_table[] = {
    {"21000", "cardinality_violation"},
    {"22001", "string_data_right_truncation"},
    {"22003", "numeric_value_out_of_range"},
    {"22004", "null_value_not_allowed"},
    {"22007", "invalid_datetime_format"},
    {"22008", "datetime_field_overflow"},
    {"22012", "division_by_zero"},
    {"22021", "character_not_in_repertoire"},
    {"22023", "invalid_parameter_value"},
    {"2202E", "array_subscript_error"},
    {"22P02", "invalid_text_representation"},
    {"22P05", "untranslatable_character"},
    {"23502", "not_null_violation"},
    {"23503", "foreign_key_violation"},
    {"23505", "unique_violation"},
    {"23514", "check_violation"},
    {"23P01", "exclusion_violation"},
    {"25006", "read_only_sql_transaction"},
    {"25P03", "idle_in_transaction_session_timeout"},
    {"3F000", "invalid_schema_name"},
    {"40001", "serialization_failure"},
    {"40P01", "deadlock_detected"},
    {"42501", "insufficient_privilege"},
    {"42601", "syntax_error"},
    {"42702", "ambiguous_column"},
    {"42703", "undefined_column"},
    {"42704", "undefined_object"},
    {"42803", "grouping_error"},
    {"42804", "datatype_mismatch"},
    {"42809", "wrong_object_type"},
    {"42883", "undefined_function"},
    {"42P01", "undefined_table"},
    {"42P02", "undefined_parameter"},
    {"42P18", "indeterminate_datatype"},
    {"53100", "disk_full"},
    {"53200", "out_of_memory"},
    {"54000", "program_limit_exceeded"},
    {"55P03", "lock_not_available"},
    {"57014", "query_canceled"},
    {"P0001", "raise_exception"},
    {"P0002", "no_data_found"},
    {"P0003", "too_many_rows"},
    {"P0004", "assert_failure"},
};

const char *bf__condition_name(const char *sqlstate)
{
    for (size_t i = 0; sqlstate != NULL && i < BF_ARRAY_LEN(condition_table); i++)
        if (strcmp(sqlstate, condition_table[i].code) == 0)
            return condition_table[i].name;
    return NULL;
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
