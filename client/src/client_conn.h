/*
 * client_conn.h - how a client program finds its server and its credential (prefix bfc_conn_),
 * shared by buzzctl and buzz-backfill-desktop so that both take the same URL forms, token
 * sources and default server: the token file, the BUZZ_BACKFILL_TOKEN / _TOKEN_FILE
 * variables, and the packaged ipc:// socket. No json-c, no curses, no GTK.
 */
#ifndef BUZZ_CLIENT_CONN_H
#define BUZZ_CLIENT_CONN_H

#include <stdbool.h>
#include <stddef.h>

/* The packaged ipc:// admin socket (packaging/buzz-backfilld.conf); a client uses it when no
 * --url or BUZZ_BACKFILL_URL names a server and a socket exists at the path.
 * BUZZ_BACKFILL_DEFAULT_SOCKET names another path (tests, a non-standard install). */
#ifndef BFC_CONN_DEFAULT_SOCKET
#define BFC_CONN_DEFAULT_SOCKET "/run/buzz-backfill/admin.sock"
#endif
#define BFC_CONN_URL_MAX 300

/* The token in a token file: its first line, caller frees (clear it with sodium_memzero
 * before free). NULL with a short reason in *why when the file cannot be read, is too large,
 * holds a NUL byte or has an empty first line. */
char *bfc_conn_read_token_file(const char *path, const char **why);

/* The credential from the environment when no token option was given: BUZZ_BACKFILL_TOKEN,
 * else the first line of the file BUZZ_BACKFILL_TOKEN_FILE names. *token is NULL when neither
 * is set. A variable that is set but empty is refused (the operator meant a credential, and
 * sending none could mean boundary authority instead). 0, or -1 with a one-line reason in
 * why (no program name, no token text). */
int bfc_conn_env_token(char **token, char *why, size_t why_cap);

/* The default server: "ipc://" and the packaged socket's path into buf when a socket exists
 * there; false (buf untouched) otherwise. */
bool bfc_conn_default_url(char *buf, size_t cap);
/* The path bfc_conn_default_url looks at. */
const char *bfc_conn_default_socket(void);

#endif
