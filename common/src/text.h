/*
 * text.h - bounded text for buzz-backfill's own code (not installed, not exported from the
 * shared libraries): formatting into fixed-size buffers that never splits a UTF-8 character and
 * marks a cut with "...".
 */
#ifndef BUZZ_COMMON_TEXT_H
#define BUZZ_COMMON_TEXT_H

#include <stdarg.h>
#include <stddef.h>

/* Format into dst (cap bytes, always terminated when cap > 0); a cut keeps whole UTF-8
 * characters and ends in "..." when there is room for it. */
void bf__vformat(char *dst, size_t cap, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
void bf__format(char *dst, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* bf__format(dst, cap, "%s", src), NULL as "". */
void bf__copy(char *dst, size_t cap, const char *src);

#endif /* BUZZ_COMMON_TEXT_H */
