/* strbuf.c - growable string used to compile definition SQL. */
#include "strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bf__strbuf_init(bf_strbuf *sb)
{
    sb->data = NULL;
    sb->len = sb->cap = 0;
    sb->failed = false;
}

void bf__strbuf_fini(bf_strbuf *sb)
{
    free(sb->data);
    bf__strbuf_init(sb);
}

static bool strbuf_reserve(bf_strbuf *sb, size_t extra)
{
    if (sb->failed)
        return false;
    if (sb->len + extra + 1 <= sb->cap)
        return true;
    /* most of what is built here is a statement of one to four kB: start at their size, so a
     * statement takes one allocation instead of a chain of copies (bf__strbuf_take gives the
     * rest back) */
    size_t cap = sb->cap ? sb->cap : 4096;
    while (cap < sb->len + extra + 1)
        cap *= 2;
    char *p = realloc(sb->data, cap);
    if (p == NULL) {
        sb->failed = true;
        return false;
    }
    sb->data = p;
    sb->cap = cap;
    return true;
}

void bf__strbuf_add(bf_strbuf *sb, const char *s)
{
    size_t n = strlen(s);
    if (!strbuf_reserve(sb, n))
        return;
    memcpy(sb->data + sb->len, s, n + 1);
    sb->len += n;
}

void bf__strbuf_add_element(bf_strbuf *sb, const char *s)
{
    if (sb->len > 0 && sb->data[sb->len - 1] != '{')
        bf__strbuf_add(sb, ",");
    bf__strbuf_add(sb, "\"");
    bf__strbuf_add(sb, s);
    bf__strbuf_add(sb, "\"");
}

void bf__strbuf_addf(bf_strbuf *sb, const char *fmt, ...)
{
    if (sb->failed)
        return;
    /* format into the room there is; only when it does not fit, grow and format again (the
     * definitions' SQL is compiled at startup: one pass, not two, for almost every piece) */
    size_t room = sb->cap - sb->len;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(room ? sb->data + sb->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n < 0) {
        if (room)
            sb->data[sb->len] = '\0';
        return;
    }
    if ((size_t)n >= room) {
        if (!strbuf_reserve(sb, (size_t)n))
            return;
        va_start(ap, fmt);
        vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    sb->len += (size_t)n;
}

char *bf__strbuf_take(bf_strbuf *sb)
{
    char *s = sb->failed ? NULL : sb->data;
    if (sb->failed)
        free(sb->data);
    if (s != NULL && sb->len + 1 < sb->cap) {
        /* kept for the registry's lifetime: without the slack (the allocator shrinks it in
         * place, and the next statement's buffer reuses what it gives back) */
        char *fit = realloc(s, sb->len + 1);
        if (fit != NULL)
            s = fit;
    }
    if (s == NULL && !sb->failed)
        s = calloc(1, 1);
    bf__strbuf_init(sb);
    return s;
}
