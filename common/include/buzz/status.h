/*
 * buzz/status.h - the wire status codes of the RPC envelope (Buzz__Backfill__V1__StatusCode in
 * proto/buzz/backfill/v1/rpc.proto) and the two tables between them and bf_err: the one the
 * service answers with and the one a client reads them back with. Codes are the enum's values,
 * passed as int so that this header needs no generated code.
 */
#ifndef BUZZ_STATUS_H
#define BUZZ_STATUS_H

#include "buzz/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The status code the service answers an engine error with (UNKNOWN for an unlisted one). */
int bf_status_from_err(bf_err err);
/* The bf_err a client reports for a received status code (BF_ERR_INTERNAL for an unknown one). */
bf_err bf_status_to_err(int code);
/* The code's lower-case name ("permission_denied"); "unknown" for an unknown code. */
const char *bf_status_name(int code);

#ifdef __cplusplus
}
#endif
#endif /* BUZZ_STATUS_H */
