/*
 * client_conn.c - the server and the credential of a client program (see client_conn.h): the
 * token file, the token variables and the packaged default socket, for buzzctl and the
 * desktop client alike.
 */
#include "client_conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sodium.h>

#include "projection.h"

#define CONN_TOKEN_FILE_MAX 8192

/* Each refusal here would otherwise send a token other than the one in the file (a shorter
 * one, or none and so no credential at all), never a refusal the operator could understand. */
char *bfc_conn_read_token_file(const char *path, const char **why)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        *why = strerror(errno); /* "No such file or directory", "Permission denied" */
        return NULL;
    }
    char *buf = calloc(1, CONN_TOKEN_FILE_MAX + 1);
    if (buf == NULL) {
        fclose(f);
        *why = "out of memory";
        return NULL;
    }
    size_t n = fread(buf, 1, CONN_TOKEN_FILE_MAX + 1, f);
    bool failed = ferror(f) != 0;
    fclose(f);
    char *token = NULL;
    if (failed) {
        *why = "could not read it (i/o error, or a directory)";
    } else if (n > CONN_TOKEN_FILE_MAX) {
        *why = "it is larger than 8 KiB: not a token file";
    } else if (memchr(buf, '\0', n) != NULL) {
        *why = "it holds a NUL byte";
    } else {
        buf[strcspn(buf, "\r\n")] = '\0';
        if (buf[0] == '\0')
            *why = "it is empty (its first line holds no token)";
        else if ((token = strdup(buf)) == NULL)
            *why = "out of memory";
    }
    sodium_memzero(buf, CONN_TOKEN_FILE_MAX + 1);
    free(buf);
    return token;
}

int bfc_conn_env_token(char **token, char *why, size_t why_cap)
{
    const char *text = getenv("BUZZ_BACKFILL_TOKEN");
    const char *file = getenv("BUZZ_BACKFILL_TOKEN_FILE");
    *token = NULL;
    if (text != NULL && file != NULL) {
        snprintf(why, why_cap,
                 "BUZZ_BACKFILL_TOKEN and BUZZ_BACKFILL_TOKEN_FILE are both set: unset one");
        return -1;
    }
    if (text != NULL) {
        if (text[0] == '\0') {
            snprintf(why, why_cap, "BUZZ_BACKFILL_TOKEN is set but empty: set a token or unset it");
            return -1;
        }
        if ((*token = strdup(text)) == NULL) {
            snprintf(why, why_cap, "BUZZ_BACKFILL_TOKEN: out of memory");
            return -1;
        }
    } else if (file != NULL) {
        const char *reason = "it is empty: set a path or unset it";
        if (file[0] == '\0' || (*token = bfc_conn_read_token_file(file, &reason)) == NULL) {
            char safe[160];
            bfc_printable(safe, sizeof safe, file);
            snprintf(why, why_cap, "BUZZ_BACKFILL_TOKEN_FILE %s: %s", safe, reason);
            return -1;
        }
    }
    return 0;
}

const char *bfc_conn_default_socket(void)
{
    const char *env = getenv("BUZZ_BACKFILL_DEFAULT_SOCKET");
    return env != NULL && env[0] != '\0' ? env : BFC_CONN_DEFAULT_SOCKET;
}

bool bfc_conn_default_url(char *buf, size_t cap)
{
    const char *path = bfc_conn_default_socket();
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISSOCK(sb.st_mode))
        return false;
    int n = snprintf(buf, cap, "ipc://%s", path);
    return n > 0 && (size_t)n < cap;
}
