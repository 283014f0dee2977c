/*
 * config_redact.c - redaction of connection strings (libpq URLs and key=value conninfo, nested ones
 * too): passwords and other secrets become "****" before anything is printed or logged.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <libpq-fe.h>

#include "config_impl.h"

/* ---- redaction ----------------------------------------------------------------------------- */

static void redact_append(char *out, size_t cap, size_t *n, const char *s, size_t len)
{
    for (size_t i = 0; i < len && *n + 1 < cap; i++)
        out[(*n)++] = s[i];
    out[*n < cap ? *n : cap - 1] = '\0';
}

/* Whether a conninfo keyword (len bytes, percent-encoded when url) names an option libpq marks
 * as secret: PQconndefaults()' dispchar "*" (password, sslpassword, and whatever a newer libpq
 * adds). "password" is always secret, also when libpq's defaults cannot be had. */
static bool redact_secret_key(const char *key, size_t len, bool url)
{
    char name[64];
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (n + 1 >= sizeof name)
            return false; /* longer than any libpq keyword */
        if (url && key[i] == '%' && i + 2 < len && isxdigit((unsigned char)key[i + 1]) &&
            isxdigit((unsigned char)key[i + 2])) {
            char hex[3] = {key[i + 1], key[i + 2], '\0'};
            name[n++] = (char)strtol(hex, NULL, 16);
            i += 2;
        } else {
            name[n++] = key[i];
        }
    }
    name[n] = '\0';
    if (strcasecmp(name, "password") == 0)
        return true;
    PQconninfoOption *opts = PQconndefaults();
    bool secret = false;
    for (const PQconninfoOption *o = opts; o != NULL && o->keyword != NULL; o++)
        if (strcasecmp(o->keyword, name) == 0 && o->dispchar != NULL && o->dispchar[0] == '*')
            secret = true;
    PQconninfoFree(opts);
    return secret;
}

static void redact_conninfo_into(const char *s, char *out, size_t cap, size_t *n, int depth);

/* A value of a non-secret key: a dbname may itself be a URL or conninfo (libpq expands it in
 * some calls), so it is redacted like one. */
static void redact_value(const char *key, size_t key_len, const char *value, size_t len, bool url,
                         char *out, size_t cap, size_t *n, int depth)
{
    if (redact_secret_key(key, key_len, url)) {
        redact_append(out, cap, n, "****", 4);
        return;
    }
    bool dbname = key_len == 6 && strncasecmp(key, "dbname", 6) == 0;
    bool nested = memchr(value, '=', len) != NULL || memmem(value, len, "://", 3) != NULL;
    if (dbname && nested && depth >= 2) { /* too deep, or quoted: not looked into */
        redact_append(out, cap, n, "****", 4);
        return;
    }
    if (dbname && nested) {
        char *copy = strndup(value, len);
        if (copy == NULL) {
            redact_append(out, cap, n, "****", 4);
            return;
        }
        redact_conninfo_into(copy, out, cap, n, depth + 1);
        free(copy);
        return;
    }
    redact_append(out, cap, n, value, len);
}

/* postgresql://user:password@host/db?password=x&sslpassword=y: the userinfo password and the
 * value of every secret parameter, keys percent-decoded as libpq does. The userinfo ends at the
 * last '@' before the first '/' (libpq reads up to the first '@', so this redacts at least as
 * much as it treats as the password); parameters are separated by '&' only. */
static void redact_url(const char *s, char *out, size_t cap, size_t *n, int depth)
{
    const char *auth = strstr(s, "://") + 3;
    redact_append(out, cap, n, s, (size_t)(auth - s));
    const char *auth_end = auth + strcspn(auth, "/");
    const char *at = NULL;
    for (const char *p = auth; p < auth_end; p++)
        if (*p == '@')
            at = p;
    if (at != NULL) {
        const char *colon = memchr(auth, ':', (size_t)(at - auth));
        if (colon != NULL) {
            redact_append(out, cap, n, auth, (size_t)(colon - auth));
            redact_append(out, cap, n, ":****", 5);
            auth = at;
        }
    }
    const char *query = auth + strcspn(auth, "?");
    redact_append(out, cap, n, auth, (size_t)(query - auth));
    const char *p = query;
    while (*p != '\0') {
        size_t len = strcspn(p + 1, "&") + 1; /* one "?key=value" or "&key=value" */
        const char *eq = memchr(p + 1, '=', len - 1);
        if (eq == NULL) {
            redact_append(out, cap, n, p, len);
        } else {
            redact_append(out, cap, n, p, (size_t)(eq + 1 - p));
            redact_value(p + 1, (size_t)(eq - p - 1), eq + 1, (size_t)(p + len - eq - 1), true, out,
                         cap, n, depth);
        }
        p += len;
    }
}

/* key = value pairs; values may be single-quoted with backslash escapes */
static void redact_keywords(const char *s, char *out, size_t cap, size_t *n, int depth)
{
    const char *p = s;
    while (*p != '\0') {
        const char *start = p;
        while (isspace((unsigned char)*p))
            p++;
        const char *key = p;
        while (*p != '\0' && *p != '=' && !isspace((unsigned char)*p))
            p++;
        size_t key_len = (size_t)(p - key);
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '=')
            p++;
        while (isspace((unsigned char)*p))
            p++;
        const char *value = p;
        bool quoted = *p == '\'';
        if (quoted) {
            for (p++; *p != '\0' && *p != '\''; p++)
                if (*p == '\\' && p[1] != '\0')
                    p++;
            if (*p == '\'')
                p++;
        } else {
            while (*p != '\0' && !isspace((unsigned char)*p))
                p++;
        }
        redact_append(out, cap, n, start, (size_t)(value - start));
        /* a quoted nested dbname is redacted whole, not looked into */
        redact_value(key, key_len, value, (size_t)(p - value), false, out, cap, n,
                     quoted ? 2 : depth);
        if (p == start) /* no progress: copy one byte */
            redact_append(out, cap, n, p++, 1);
    }
}

static void redact_conninfo_into(const char *s, char *out, size_t cap, size_t *n, int depth)
{
    if (strncmp(s, "postgresql://", 13) == 0 || strncmp(s, "postgres://", 11) == 0)
        redact_url(s, out, cap, n, depth);
    else
        redact_keywords(s, out, cap, n, depth);
}

void srv_redact_conninfo(const char *conninfo, char *out, size_t cap)
{
    if (cap == 0)
        return;
    out[0] = '\0';
    if (conninfo == NULL)
        return;
    size_t n = 0;
    redact_conninfo_into(conninfo, out, cap, &n, 0);
}
