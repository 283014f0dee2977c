/*
 * status.c - the tables between bf_err and the wire status codes (buzz/status.h): the code the
 * service answers each engine error with, and the bf_err a client reads each code back as.
 * The mapping is not one to one (several errors share FAILED_PRECONDITION), so there are two.
 */
#include "buzz/status.h"

#include <stddef.h>

#include "buzz/backfill/v1/rpc.pb-c.h"

#define SC(name) BUZZ__BACKFILL__V1__STATUS_CODE__##name

/* the service's answers */
static const struct {
    bf_err err;
    int code;
} err_codes[] = {
    {BF_OK, SC(OK)},
    {BF_ERR_INVALID_ARGUMENT, SC(INVALID_ARGUMENT)},
    {BF_ERR_NOT_FOUND, SC(NOT_FOUND)},
    {BF_ERR_CONFLICT, SC(FAILED_PRECONDITION)},
    {BF_ERR_STALE, SC(ABORTED)},
    {BF_ERR_NO_WORK, SC(FAILED_PRECONDITION)},
    {BF_ERR_UNAVAILABLE, SC(UNAVAILABLE)},
    {BF_ERR_TIMEOUT, SC(DEADLINE_EXCEEDED)},
    /* the service cannot serve until an operator fixes the schema */
    {BF_ERR_SCHEMA_MISSING, SC(UNAVAILABLE)},
    {BF_ERR_SCHEMA_TOO_NEW, SC(UNAVAILABLE)},
    {BF_ERR_SCHEMA_CHECKSUM, SC(UNAVAILABLE)},
    /* this process cannot act on the row as it stands: the current row travels along */
    {BF_ERR_INCOMPATIBLE, SC(FAILED_PRECONDITION)},
    {BF_ERR_UNKNOWN_DEFINITION, SC(FAILED_PRECONDITION)},
    {BF_ERR_BATCH_BOUND, SC(INTERNAL)},
    {BF_ERR_PREREQUISITE, SC(FAILED_PRECONDITION)},
    {BF_ERR_DATA_INVARIANT, SC(FAILED_PRECONDITION)},
    {BF_ERR_RETRYABLE, SC(UNAVAILABLE)},
    {BF_ERR_DEFINITION, SC(INTERNAL)},
    {BF_ERR_VALIDATION_FAILED, SC(FAILED_PRECONDITION)},
    {BF_ERR_BUSY, SC(ABORTED)},
    {BF_ERR_IMMUTABLE, SC(FAILED_PRECONDITION)},
    {BF_ERR_CANCELLED, SC(CANCELLED)},
    {BF_ERR_NOMEM, SC(RESOURCE_EXHAUSTED)},
    {BF_ERR_INTERNAL, SC(INTERNAL)},
    {BF_ERR_UNAUTHENTICATED, SC(UNAUTHENTICATED)},
    {BF_ERR_PERMISSION_DENIED, SC(PERMISSION_DENIED)},
    {BF_ERR_RESOURCE_EXHAUSTED, SC(RESOURCE_EXHAUSTED)},
    {BF_ERR_IO, SC(UNAVAILABLE)},
};

int bf_status_from_err(bf_err err)
{
    for (size_t i = 0; i < sizeof err_codes / sizeof err_codes[0]; i++)
        if (err_codes[i].err == err)
            return err_codes[i].code;
    return SC(UNKNOWN);
}

/* what a client reads them as, with the codes' names */
static const struct {
    int code;
    const char *name;
    bf_err err;
} status_codes[] = {
    {SC(OK), "ok", BF_OK},
    {SC(CANCELLED), "cancelled", BF_ERR_CANCELLED},
    {SC(UNKNOWN), "unknown", BF_ERR_INTERNAL},
    {SC(INVALID_ARGUMENT), "invalid_argument", BF_ERR_INVALID_ARGUMENT},
    {SC(DEADLINE_EXCEEDED), "deadline_exceeded", BF_ERR_TIMEOUT},
    {SC(NOT_FOUND), "not_found", BF_ERR_NOT_FOUND},
    {SC(PERMISSION_DENIED), "permission_denied", BF_ERR_PERMISSION_DENIED},
    {SC(RESOURCE_EXHAUSTED), "resource_exhausted", BF_ERR_RESOURCE_EXHAUSTED},
    {SC(FAILED_PRECONDITION), "failed_precondition", BF_ERR_CONFLICT},
    {SC(ABORTED), "aborted", BF_ERR_BUSY},
    {SC(UNIMPLEMENTED), "unimplemented", BF_ERR_INVALID_ARGUMENT},
    {SC(INTERNAL), "internal", BF_ERR_INTERNAL},
    {SC(UNAVAILABLE), "unavailable", BF_ERR_UNAVAILABLE},
    {SC(UNAUTHENTICATED), "unauthenticated", BF_ERR_UNAUTHENTICATED},
};

bf_err bf_status_to_err(int code)
{
    for (size_t i = 0; i < sizeof status_codes / sizeof status_codes[0]; i++)
        if (status_codes[i].code == code)
            return status_codes[i].err;
    return BF_ERR_INTERNAL;
}

const char *bf_status_name(int code)
{
    for (size_t i = 0; i < sizeof status_codes / sizeof status_codes[0]; i++)
        if (status_codes[i].code == code)
            return status_codes[i].name;
    return "unknown";
}
