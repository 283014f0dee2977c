/*
 * dash_view.h - the model of `buzzctl dash` and its pure rendering (prefix bfc_dash_). No I/O,
 * no clock, no curses: the caller feeds RPC results (or their failures) and the time it read
 * them, and bfc_dash_render() turns the model into text lines that the curses layer (or
 * --once) only draws. The same model and size always give the same lines.
 *
 * Honesty rules the model keeps (spec: read model and honest projection):
 * - a failed refresh keeps the last data and marks it STALE with its age and a short typed
 *   error; it never clears it, and never shows it as current;
 * - nothing unknown is drawn as 0, 100 %, healthy, ready or offline: before the first answer
 *   the banner says "unknown", a progress bar appears only when it is computable (rows passed
 *   and a planner estimate), a rate only from two samples in a recent window in which the
 *   backfill was running in both, and an ETA only from such a rate, marked "~";
 * - the keys map to exactly the five supported actions, each behind a y/n confirmation.
 *
 * Ownership: the model owns copies of everything it shows (no protobuf pointers are kept).
 * Threading: none; one model per dashboard.
 */
#ifndef BUZZ_DASH_VIEW_H
#define BUZZ_DASH_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buzz/backfill/v1/admin.pb-c.h"
#include "buzz/backfill/v1/readiness.pb-c.h"
#include "buzz/backfill/v1/rpc.pb-c.h"
#include "buzz/client.h"
#include "projection.h"

#define BFC_DASH_MAX_ROWS    100000 /* backfills kept: every page of List up to this many */
#define BFC_DASH_MAX_GATING  16
#define BFC_DASH_SAMPLES     16       /* rate samples per backfill */
#define BFC_DASH_RATE_WINDOW 60000000 /* us: the recent window a rate is computed over */
#define BFC_DASH_AUDIT_TAIL  8
#define BFC_DASH_LINE        512 /* bytes of one rendered line */
#define BFC_DASH_MAX_LINES   200
#define BFC_DASH_ERR         112 /* a typed, short error: "unavailable: connection refused" */

/* Why a read gave no data: the typed kind of the failure (transport or server status). */
typedef enum bfc_fetch_kind {
    BFC_FETCH_OK = 0,
    BFC_FETCH_UNAVAILABLE,       /* not connected, connection refused or closed */
    BFC_FETCH_DEADLINE,          /* no answer in time (transport) or DEADLINE_EXCEEDED */
    BFC_FETCH_UNAUTHENTICATED,   /* the server refused the credential */
    BFC_FETCH_PERMISSION_DENIED, /* the credential lacks the capability */
    BFC_FETCH_MALFORMED,         /* an answer that could not be decoded or did not match */
    BFC_FETCH_SERVER_ERROR,      /* any other typed status from the server */
} bfc_fetch_kind;

typedef struct bfc_fetch_error {
    bfc_fetch_kind kind;
    char text[BFC_DASH_ERR]; /* "unavailable: no answer in time after 1 attempt(s)" */
} bfc_fetch_error;

/* The typed error of a failed call (err != BF_OK) from its status. */
void bfc_fetch_error_from(bfc_fetch_error *out, bf_err err, const bfc_status *st);
const char *bfc_fetch_kind_name(bfc_fetch_kind kind);

typedef struct bfc_rate_sample {
    int64_t at_us;   /* PostgreSQL's observed_at of the read */
    int64_t covered; /* rows_covered (keys passed) */
    bool running;    /* the backfill was running at that read */
} bfc_rate_sample;

/*
 * Rows per second over the samples newer than window_us before the newest one, counting only
 * intervals whose two ends were both running (a pause or a block between them excludes that
 * interval's time and rows). false (unknown) without such an interval.
 */
bool bfc_rate_window(double *out, const bfc_rate_sample *s, size_t n, int64_t window_us);

typedef struct bfc_dash_row {
    bfc_view v;        /* the projection of the last read (state, claim, retry, error, ...) */
    int state;         /* Buzz__Backfill__V1__State, 0 unknown */
    bool has_fraction; /* rows passed and a planner estimate: a bar can be drawn */
    double fraction;   /* 0..1, of the estimate */
    bool has_rate;
    double rate; /* rows/s over the recent window */
    char rate_text[24];
    char eta_text[24]; /* "~3m05s", "-", "unknown" */
    bfc_rate_sample samples[BFC_DASH_SAMPLES];
    size_t n_samples;
    bool seen; /* present in the last successful read */
} bfc_dash_row;

typedef enum bfc_dash_sort {
    BFC_DASH_SORT_ID = 0,
    BFC_DASH_SORT_STATE,
    BFC_DASH_SORT_PROGRESS,
    BFC_DASH_SORT_COUNT,
} bfc_dash_sort;

typedef struct bfc_dash_gate {
    char id[BFC_CELL];
    char state[24]; /* "running", "not registered" */
} bfc_dash_gate;

typedef struct bfc_dash_detail {
    bool has_data; /* a Get answered for id */
    char id[BFC_CELL];
    bfc_view v;
    char validation_time[40]; /* RFC 3339, "never" */
    char validation_detail[160];
    bool audit_ok;
    char audit[BFC_DASH_AUDIT_TAIL][200]; /* time, action, actor, states, outcome */
    size_t n_audit;
    bool stale;
    int64_t ok_at_us;
    bfc_fetch_error err;
} bfc_dash_detail;

typedef struct bfc_dash_model {
    char url[128];
    /* readiness */
    bool ready_known; /* a Check answered at least once */
    bool ready;
    size_t n_gating;
    bfc_dash_gate gating[BFC_DASH_MAX_GATING];
    size_t more_gating;
    bool ready_stale;
    int64_t ready_ok_at_us;
    bfc_fetch_error ready_err;
    /* the table */
    bool list_known; /* a List answered at least once */
    bool list_stale; /* the last List failed: rows are from list_ok_at_us */
    int64_t list_ok_at_us;
    bfc_fetch_error list_err;
    bfc_dash_row *rows; /* n_rows, sorted by id; owned (bfc_dash_fini frees them) */
    size_t n_rows;
    bool list_truncated; /* the server holds more than BFC_DASH_MAX_ROWS: only these shown */
    int64_t now_us;      /* client time of the last refresh attempt (ages of STALE) */
    /* presentation */
    char filter[64];
    bool filter_editing;
    bfc_dash_sort sort;
    size_t selected; /* index into the visible (filtered, sorted) rows */
    bool help;
    bool show_detail;
    bfc_dash_detail detail;
    int confirm_action; /* bfc_action awaiting y/n, 0 none */
    char confirm_id[BFC_CELL];
    char message[BFC_DASH_LINE]; /* the outcome of the last action, or "" */
} bfc_dash_model;

/* Initialise caller storage (any content: init does not free). bfc_dash_fini frees the rows;
 * a model may be initialised again only after fini. */
void bfc_dash_init(bfc_dash_model *m, const char *url);
void bfc_dash_fini(bfc_dash_model *m);

/* Results of a refresh at client time now_us. resp NULL with err != BF_OK: the read failed
 * (the previous data stays, marked stale). */
void bfc_dash_apply_ready(bfc_dash_model *m, const Buzz__Backfill__V1__CheckResponse *resp,
                          bf_err err, const bfc_status *st, int64_t now_us);
/* One List page set: backfills of every page read, or a failure. truncated: the server has
 * more than were read (the status line says so). On allocation failure the last data stays,
 * marked stale ("error: out of memory"). */
void bfc_dash_apply_list(bfc_dash_model *m, Buzz__Backfill__V1__Backfill *const *backfills,
                         size_t n, bool truncated, bf_err err, const bfc_status *st,
                         int64_t now_us);
void bfc_dash_apply_detail(bfc_dash_model *m, const Buzz__Backfill__V1__GetResponse *get,
                           bf_err get_err, const bfc_status *get_st,
                           const Buzz__Backfill__V1__AuditResponse *audit, bf_err audit_err,
                           int64_t now_us);

/* The visible rows (filter, sort) as indexes into m->rows; returns how many (at most cap). */
size_t bfc_dash_visible(const bfc_dash_model *m, size_t *idx, size_t cap);
/* The same into a malloc'd array (*out, free()d by the caller; NULL when none or out of
 * memory). */
size_t bfc_dash_visible_alloc(const bfc_dash_model *m, size_t **out);
/* The id of the selected visible row, or NULL. */
const char *bfc_dash_selected_id(const bfc_dash_model *m);

/* ---- keys ------------------------------------------------------------------------------ */

/* Key codes the model understands besides characters; they equal ncurses' KEY_* values
 * (buzzctl_dash.c checks that at compile time), so this file needs no curses header. */
#define BFC_KEY_DOWN      0402
#define BFC_KEY_UP        0403
#define BFC_KEY_BACKSPACE 0407
#define BFC_KEY_ENTER     0527
#define BFC_KEY_RESIZE    0632

/* The action a key stands for (a bfc_action), 0 for every other key. Exactly five keys map to
 * an action, one each: S start, p pause, r resume, R retry, v validate. */
int bfc_dash_key_action(int key);

typedef enum bfc_dash_cmd {
    BFC_DASH_NONE = 0,
    BFC_DASH_QUIT,
    BFC_DASH_REFRESH, /* fetch now */
    BFC_DASH_SEND,    /* the operator confirmed m->confirm_action on m->confirm_id: send it */
} bfc_dash_cmd;

/* Apply a key (an ncurses key code; KEY_* values above 255 are passed through) to the
 * presentation state; what the caller must do next. An action key only asks for the
 * confirmation; only 'y' on that prompt returns BFC_DASH_SEND. */
bfc_dash_cmd bfc_dash_key(bfc_dash_model *m, int key);
/* After SEND: record the outcome line and clear the prompt. */
void bfc_dash_action_done(bfc_dash_model *m, const char *outcome_line);

/* ---- rendering ------------------------------------------------------------------------- */

typedef enum bfc_dash_attr {
    BFC_DASH_PLAIN = 0,
    BFC_DASH_BOLD,
    BFC_DASH_REVERSE, /* the selected row, the title */
    BFC_DASH_ALERT,   /* STALE, errors, not ready */
    BFC_DASH_GOOD,    /* ready */
} bfc_dash_attr;

typedef struct bfc_dash_frame {
    size_t n;
    char line[BFC_DASH_MAX_LINES][BFC_DASH_LINE];
    bfc_dash_attr attr[BFC_DASH_MAX_LINES];
} bfc_dash_frame;

/* The screen for a rows x cols terminal (each line at most cols columns). */
void bfc_dash_render(const bfc_dash_model *m, int rows, int cols, bfc_dash_frame *out);

/* A row's PROGRESS cell: a bar and "~50%" (or "done") when computable, else the rows passed
 * ("12,000 rows") or "unknown"; narrow: "~50%", "12k". The desktop client shows the same. */
void bfc_dash_row_progress(char *buf, size_t cap, const bfc_dash_row *r, bool narrow);
/* The line under a row (waiting for a worker, old writer, slow, validating, throttled, or
 * claim, retry and error), without indent; BFC_DASH_ALERT when it needs attention. */
bfc_dash_attr bfc_dash_row_note(char *buf, size_t cap, const bfc_dash_row *r);

/* "12,000 rows" style helpers shared with list: a bar "[#####.....]" of width w (w >= 3). */
void bfc_dash_bar(char *buf, size_t cap, double fraction, int w);

#endif
