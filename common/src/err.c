/*
 * err.c - the strings of the one error list (generated from BF_ERR_LIST), bounded diagnostics,
 * and the bounded, UTF-8-safe formatting every part of buzz-backfill uses for client-visible
 * text (engine, server, client; buzz-common).
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "buzz/err.h"
#include "text.h"

const char *bf_err_str(bf_err err)
{
    switch (err) {
#define BF_ERR_CASE(name, value, text)                                                             \
    case name:                                                                                     \
        return text;
        BF_ERR_LIST(BF_ERR_CASE)
#undef BF_ERR_CASE
    }
    return "unknown error";
}

const char *bf_err_name(bf_err err)
{
    switch (err) {
#define BF_ERR_CASE(name, value, text)                                                             \
    case name:                                                                                     \
        return #name;
        BF_ERR_LIST(BF_ERR_CASE)
#undef BF_ERR_CASE
    }
    return "BF_ERR_UNKNOWN";
}

void bf__vformat(char *dst, size_t cap, const char *fmt, va_list ap)
{
    if (cap == 0)
        return;
    int n = vsnprintf(dst, cap, fmt, ap);
    if (n < 0 || (size_t)n < cap)
        return;
    /* cut on a UTF-8 character boundary: PostgreSQL rejects a split character, and this text
     * is stored (error_detail, audit); "..." marks the cut when there is room for it. Whole
     * characters are kept while they fit before the limit (dst[0..limit) is the formatted
     * text; vsnprintf overwrote dst[cap - 1] with the terminator). */
    bool mark = cap > 4;
    size_t limit = mark ? cap - 4 : cap - 1, end = 0;
    while (end < limit) {
        unsigned char c = (unsigned char)dst[end];
        size_t len = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
        if (end + len > limit)
            break;
        end += len;
    }
    if (mark)
        memcpy(dst + end, "...", 4);
    else
        dst[end] = '\0';
}

void bf__format(char *dst, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bf__vformat(dst, cap, fmt, ap);
    va_end(ap);
}

void bf__copy(char *dst, size_t cap, const char *src)
{
    bf__format(dst, cap, "%s", src ? src : "");
}

bf_err bf_diag_set(char *diag, size_t cap, bf_err err, const char *fmt, ...)
{
    if (diag == NULL || cap == 0)
        return err;
    va_list ap;
    va_start(ap, fmt);
    bf__vformat(diag, cap, fmt, ap);
    va_end(ap);
    return err;
}
