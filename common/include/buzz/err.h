/*
 * buzz/err.h - the one error vocabulary of buzz-backfill.
 *
 * Every public function returns a bf_err. The list below is the single source of the enum and of
 * the short, client-safe strings; codes are never renumbered or reused (append only). The wire
 * status codes of the RPC service map onto this list in one table (server side), and PostgreSQL
 * SQLSTATEs map onto it in one table (engine/src/classify.c).
 */
#ifndef BUZZ_ERR_H
#define BUZZ_ERR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, short message: lower case, no period, no secrets) */
#define BF_ERR_LIST(X)                                                                             \
    X(BF_OK, 0, "ok")                                                                              \
    X(BF_ERR_INVALID_ARGUMENT, 1, "invalid argument")                                              \
    X(BF_ERR_NOT_FOUND, 2, "backfill not found")                                                   \
    X(BF_ERR_CONFLICT, 3, "request conflicts with the current state")                              \
    X(BF_ERR_STALE, 4, "claim or generation is no longer current")                                 \
    X(BF_ERR_NO_WORK, 5, "no eligible work")                                                       \
    X(BF_ERR_UNAVAILABLE, 6, "database unavailable")                                               \
    X(BF_ERR_TIMEOUT, 7, "operation timed out")                                                    \
    X(BF_ERR_SCHEMA_MISSING, 8, "engine schema is missing or incomplete")                          \
    X(BF_ERR_SCHEMA_TOO_NEW, 9, "database schema is newer than this binary")                       \
    X(BF_ERR_SCHEMA_CHECKSUM, 10, "applied migration does not match this binary")                  \
    X(BF_ERR_INCOMPATIBLE, 11, "definition cannot interpret the stored backfill")                  \
    X(BF_ERR_UNKNOWN_DEFINITION, 12, "no local definition for this backfill")                      \
    X(BF_ERR_BATCH_BOUND, 13, "batch touched more rows than its bound")                            \
    X(BF_ERR_PREREQUISITE, 14, "prerequisite not met")                                             \
    X(BF_ERR_DATA_INVARIANT, 15, "data invariant violated")                                        \
    X(BF_ERR_RETRYABLE, 16, "transient database error")                                            \
    X(BF_ERR_DEFINITION, 17, "definition error")                                                   \
    X(BF_ERR_VALIDATION_FAILED, 18, "validation failed")                                           \
    X(BF_ERR_BUSY, 19, "validation already in progress")                                           \
    X(BF_ERR_IMMUTABLE, 20, "completed backfill is immutable")                                     \
    X(BF_ERR_CANCELLED, 21, "cancelled")                                                           \
    X(BF_ERR_NOMEM, 22, "out of memory")                                                           \
    X(BF_ERR_INTERNAL, 23, "internal error")                                                       \
    X(BF_ERR_UNAUTHENTICATED, 24, "unauthenticated")                                               \
    X(BF_ERR_PERMISSION_DENIED, 25, "permission denied")                                           \
    X(BF_ERR_RESOURCE_EXHAUSTED, 26, "resource exhausted")                                         \
    X(BF_ERR_IO, 27, "i/o error")

typedef enum bf_err {
#define BF_ERR_ENUM(name, value, text) name = value,
    BF_ERR_LIST(BF_ERR_ENUM)
#undef BF_ERR_ENUM
} bf_err;

/* Short, static, client-safe text for an error code; never NULL. */
const char *bf_err_str(bf_err err);

/* The enum constant's name ("BF_ERR_STALE"); never NULL. */
const char *bf_err_name(bf_err err);

/* Write a bounded diagnostic into a caller's buffer (NULL or cap 0: nothing is written; text
 * that does not fit ends in "...") and return err, for "return bf_diag_set(...)". */
bf_err bf_diag_set(char *diag, size_t cap, bf_err err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#ifdef __cplusplus
}
#endif
#endif /* BUZZ_ERR_H */
