/*
 * log.c - the daemon's log lines: the level filter, the observer every record reaches first,
 * and the two line formats (text, JSON lines) written to stderr.
 *
 * Design notes: a JSON line is written by a small escaper here rather than through json-c
 * (which the tests use to parse the lines): json-c copies a string's bytes as they are, so an
 * invalid UTF-8 sequence from a hostile stable ID would still make an invalid line, and it
 * has no byte bound with a marker. What a line needs is exactly that: each text field checked
 * as UTF-8 (invalid bytes become U+FFFD), '"', '\' and control bytes escaped, cut after a
 * bounded number of input bytes on a character boundary with "... (N more bytes)". Every field
 * is bounded, so the worst-case line (six output bytes per input byte) fits SRV_LOG_LINE_MAX,
 * and the writer checks its capacity anyway. A line is written with one fputs to the
 * unbuffered stderr, so lines of concurrent threads do not interleave within a line.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "log.h"

_Static_assert(6 * (SRV_LOG_MSG_MAX + 3 * SRV_LOG_FIELD_MAX) + 1024 < SRV_LOG_LINE_MAX,
               "the worst-case JSON line fits its buffer");

static _Atomic int log_min_level = BF_LOG_INFO;
static _Atomic int log_format = SRV_LOG_TEXT;
static bf_log_fn log_observer;
static void *log_observer_arg;

void srv_log_setup(bf_log_level min_level)
{
    atomic_store(&log_min_level, (int)min_level);
}

void srv_log_set_format(srv_log_format format)
{
    atomic_store(&log_format, (int)format);
}

bool srv_log_format_parse(const char *s, srv_log_format *out)
{
    if (strcasecmp(s, "text") == 0)
        *out = SRV_LOG_TEXT;
    else if (strcasecmp(s, "json") == 0)
        *out = SRV_LOG_JSON;
    else
        return false;
    return true;
}

const char *srv_log_format_name(srv_log_format format)
{
    return format == SRV_LOG_JSON ? "json" : "text";
}

void srv_log_set_observer(bf_log_fn fn, void *arg)
{
    log_observer = fn;
    log_observer_arg = arg;
}

/* ---- a bounded writer ---------------------------------------------------------------------- */

typedef struct log_out {
    char *buf;
    size_t cap, len; /* len < cap always: buf stays terminated */
} log_out;

static void log_put(log_out *o, const char *s, size_t n)
{
    if (o->cap == 0)
        return;
    if (n > o->cap - 1 - o->len)
        n = o->cap - 1 - o->len;
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    o->buf[o->len] = '\0';
}

static void log_puts(log_out *o, const char *s)
{
    log_put(o, s, strlen(s));
}

static void log_printf(log_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void log_printf(log_out *o, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        log_put(o, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* Length of the valid UTF-8 character at s (of at most n bytes), 0 when invalid: no overlong
 * forms, surrogates or code points above U+10FFFF. */
static size_t log_utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, min = 0x10000;
    else
        return 0;
    if (len > n)
        return 0;
    unsigned cp = c & (0x7fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* s as the contents of a JSON string (without quotes): at most max input bytes, cut on a
 * character boundary, then the marker. */
static void log_json_text(log_out *o, const char *s, size_t max)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t len = log_utf8_len(p + i, n - i);
        if (i + (len ? len : 1) > max)
            break;
        if (len == 0) {
            log_puts(o, "\xef\xbf\xbd"); /* U+FFFD for an invalid byte */
            i++;
        } else if (len > 1) {
            log_put(o, s + i, len);
            i += len;
        } else {
            if (c == '"')
                log_puts(o, "\\\"");
            else if (c == '\\')
                log_puts(o, "\\\\");
            else if (c == '\n')
                log_puts(o, "\\n");
            else if (c == '\r')
                log_puts(o, "\\r");
            else if (c == '\t')
                log_puts(o, "\\t");
            else if (c < 0x20 || c == 0x7f)
                log_printf(o, "\\u%04x", c);
            else
                log_put(o, s + i, 1);
            i++;
        }
    }
    if (i < n)
        log_printf(o, "... (%zu more bytes)", n - i);
}

static void log_json_string(log_out *o, const char *name, const char *value, size_t max)
{
    log_printf(o, ",\"%s\":\"", name);
    log_json_text(o, value, max);
    log_puts(o, "\"");
}

static void log_when(char *out, size_t cap, const struct timespec *when)
{
    struct tm tm;
    gmtime_r(&when->tv_sec, &tm);
    char sec[32];
    strftime(sec, sizeof sec, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, cap, "%s.%03ldZ", sec, when->tv_nsec / 1000000);
}

size_t srv_log_format_json(char *buf, size_t cap, const bf_log_record *rec,
                           const struct timespec *when, long pid)
{
    log_out o = {buf, cap, 0};
    if (cap > 0)
        buf[0] = '\0';
    char time_text[48];
    log_when(time_text, sizeof time_text, when);
    log_printf(&o, "{\"time\":\"%s\",\"level\":\"%s\",\"event\":\"%s\",\"pid\":%ld", time_text,
               srv_log_level_name(rec->level), bf_event_code(rec->event), pid);
    log_json_string(&o, "msg", rec->msg != NULL ? rec->msg : "", SRV_LOG_MSG_MAX);
    if (rec->id != NULL)
        log_json_string(&o, "id", rec->id, SRV_LOG_FIELD_MAX);
    if (rec->generation >= 0)
        log_printf(&o, ",\"generation\":%lld", (long long)rec->generation);
    if (rec->checkpoint != NULL)
        log_json_string(&o, "checkpoint", rec->checkpoint, SRV_LOG_FIELD_MAX);
    if (rec->batch_size >= 0)
        log_printf(&o, ",\"batch_size\":%ld", rec->batch_size);
    if (rec->batches >= 0)
        log_printf(&o, ",\"batches\":%ld", rec->batches);
    if (rec->rows >= 0)
        log_printf(&o, ",\"rows\":%ld", rec->rows);
    if (rec->touched >= 0)
        log_printf(&o, ",\"touched\":%ld", rec->touched);
    if (rec->duration_us >= 0)
        log_printf(&o, ",\"duration_ms\":%lld.%03lld", (long long)(rec->duration_us / 1000),
                   (long long)(rec->duration_us % 1000));
    if (rec->reason != NULL)
        log_json_string(&o, "reason", rec->reason, SRV_LOG_FIELD_MAX);
    /* the closing always fits: the worst case is below cap (the static assertion) */
    log_puts(&o, "}\n");
    return o.len;
}

size_t srv_log_format_text(char *buf, size_t cap, const bf_log_record *rec,
                           const struct timespec *when, long pid)
{
    const char *msg = rec->msg != NULL ? rec->msg : "";
    char line[SRV_LOG_MSG_MAX + 1];
    size_t n = 0, len = strlen(msg);
    for (size_t i = 0; i < len && n < SRV_LOG_MSG_MAX; i++) /* one line, no control bytes */
        line[n++] = (unsigned char)msg[i] < 0x20 ? ' ' : msg[i];
    while (n > 0 && line[n - 1] == ' ')
        n--;
    line[n] = '\0';
    char time_text[48], more[48] = "", event[48] = "";
    log_when(time_text, sizeof time_text, when);
    if (len > SRV_LOG_MSG_MAX)
        snprintf(more, sizeof more, "... (%zu more bytes)", len - SRV_LOG_MSG_MAX);
    if (rec->event != BF_EV_NONE)
        snprintf(event, sizeof event, " [%s]", bf_event_code(rec->event));
    int w = snprintf(buf, cap, "%s buzz-backfilld[%ld] %s: %s%s%s\n", time_text, pid,
                     srv_log_level_name(rec->level), line, more, event);
    if (w < 0)
        return 0;
    return (size_t)w < cap ? (size_t)w : cap - 1;
}

/* ---- the sink ------------------------------------------------------------------------------ */

void srv_log_sink(void *arg, const bf_log_record *rec)
{
    (void)arg;
    if (log_observer != NULL)
        log_observer(log_observer_arg, rec);
    if ((int)rec->level < atomic_load(&log_min_level))
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char line[SRV_LOG_LINE_MAX];
    if (atomic_load(&log_format) == SRV_LOG_JSON)
        srv_log_format_json(line, sizeof line, rec, &ts, (long)getpid());
    else
        srv_log_format_text(line, sizeof line, rec, &ts, (long)getpid());
    fputs(line, stderr);
}

static void log_vevent(bf_log_level level, bf_event event, const char *fmt, va_list ap)
{
    char msg[SRV_LOG_MSG_MAX + 64];
    vsnprintf(msg, sizeof msg, fmt, ap);
    bf_log_record rec = BF_LOG_RECORD_INIT;
    rec.level = level;
    rec.event = event;
    rec.msg = msg;
    srv_log_sink(NULL, &rec);
}

void srv_log(bf_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vevent(level, BF_EV_NONE, fmt, ap);
    va_end(ap);
}

void srv_log_event(bf_log_level level, bf_event event, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vevent(level, event, fmt, ap);
    va_end(ap);
}

/* ---- levels ------------------------------------------------------------------------------- */

bool srv_log_level_parse(const char *s, bf_log_level *out)
{
    if (strcasecmp(s, "debug") == 0)
        *out = BF_LOG_DEBUG;
    else if (strcasecmp(s, "info") == 0)
        *out = BF_LOG_INFO;
    else if (strcasecmp(s, "warn") == 0 || strcasecmp(s, "warning") == 0)
        *out = BF_LOG_WARN;
    else if (strcasecmp(s, "error") == 0)
        *out = BF_LOG_ERROR;
    else
        return false;
    return true;
}

const char *srv_log_level_name(bf_log_level level)
{
    switch (level) {
    case BF_LOG_DEBUG:
        return "debug";
    case BF_LOG_INFO:
        return "info";
    case BF_LOG_WARN:
        return "warn";
    case BF_LOG_ERROR:
        return "error";
    }
    return "info";
}

/* ---- monotonic time ---------------------------------------------------------------------- */

int64_t srv_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
