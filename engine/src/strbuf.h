/* strbuf.h - a tiny growable string for building SQL once at registration time (internal:
 * bf__, not exported from the shared library). */
#ifndef BUZZ_STRBUF_H
#define BUZZ_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct bf_strbuf {
    char *data;
    size_t len, cap;
    bool failed; /* an allocation failed; data is unusable */
} bf_strbuf;

void bf__strbuf_init(bf_strbuf *sb);
void bf__strbuf_fini(bf_strbuf *sb);
void bf__strbuf_add(bf_strbuf *sb, const char *s);
void bf__strbuf_addf(bf_strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append s as the next element of a text[] literal opened with "{": quoted (an unquoted element
 * spelled "null" would read as a NULL), after a comma unless it is the first. For IDs and
 * identifiers: s must hold no '"' or '\\'. */
void bf__strbuf_add_element(bf_strbuf *sb, const char *s);
/* Hand the string to the caller (NULL after a failed allocation) and reset the buffer. */
char *bf__strbuf_take(bf_strbuf *sb);

#endif
