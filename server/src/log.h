/*
 * log.h - the daemon's log lines: every record of the engine, the dispatcher, the transport
 * and the daemon itself goes through srv_log_sink() to stderr, one line per record, as text
 * (the default) or as one JSON object per line (log_format = json).
 *
 * JSON line fields: time (RFC 3339 UTC, milliseconds), level, event (the stable code of
 * bf_event_code()), pid, msg, and where the record has them id, generation, checkpoint,
 * batch_size, batches, rows, touched, duration_ms, reason. Strings are valid JSON and valid
 * UTF-8 (control characters escaped, invalid sequences replaced by U+FFFD) and bounded (a cut
 * text ends with "... (N more bytes)").
 *
 * Thread safety: srv_log_setup(), srv_log_set_format() and srv_log_set_observer() are called
 * once before threads start; srv_log_sink() and srv_log() from any thread.
 */
#ifndef BUZZ_SRV_LOG_H
#define BUZZ_SRV_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "buzz/engine.h"

typedef enum srv_log_format { SRV_LOG_TEXT = 0, SRV_LOG_JSON = 1 } srv_log_format;

#define SRV_LOG_MSG_MAX   1024  /* bytes of a message kept; the rest is counted */
#define SRV_LOG_FIELD_MAX 600   /* bytes of another text field kept (checkpoints: 511) */
#define SRV_LOG_LINE_MAX  20480 /* a formatted line, newline included, always fits */

/* Records below min_level are not printed (the observer still sees them). */
void srv_log_setup(bf_log_level min_level);
void srv_log_set_format(srv_log_format format);
/* "text" or "json" into *out; false for anything else. */
bool srv_log_format_parse(const char *s, srv_log_format *out);
const char *srv_log_format_name(srv_log_format format);

/* A bf_log_fn (engine, dispatcher and transport log through the context's engine_cfg.log). */
void srv_log_sink(void *arg, const bf_log_record *rec);
/* Every record the sink receives, whatever its level, is first passed to fn (the metrics count
 * events there). Set once, before threads start; fn must be thread-safe. NULL: none. */
void srv_log_set_observer(bf_log_fn fn, void *arg);
/* A plain message (event "log") and an event of the daemon's own. */
void srv_log(bf_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void srv_log_event(bf_log_level level, bf_event event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The line of rec at when by process pid, newline-terminated, into buf (at least
 * SRV_LOG_LINE_MAX bytes). Returns its length. Exposed for the unit tests. */
size_t srv_log_format_json(char *buf, size_t cap, const bf_log_record *rec,
                           const struct timespec *when, long pid);
size_t srv_log_format_text(char *buf, size_t cap, const bf_log_record *rec,
                           const struct timespec *when, long pid);

/* "debug", "info", "warn", "error"; srv_log_level_parse also takes "warning", any case. */
const char *srv_log_level_name(bf_log_level level);
bool srv_log_level_parse(const char *s, bf_log_level *out);

/* Microseconds on the monotonic clock (deadlines, windows, durations). */
int64_t srv_now_us(void);

#endif /* BUZZ_SRV_LOG_H */
