/*
 * projection.h - the pure projection from RPC results to what an operator sees (buzzctl's
 * tables, the dashboard). No I/O, no state: the same message always renders the same text.
 * Unknown, absent or stale values render as such ("unknown", "-"), never as zero, complete,
 * healthy or offline.
 */
#ifndef BUZZ_PROJECTION_H
#define BUZZ_PROJECTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buzz/backfill/v1/admin.pb-c.h"

#define BFC_CELL 96

typedef struct bfc_view {
    char id[BFC_CELL];
    char state[24];
    char progress[160]; /* "12,000 rows, 3,000 changed (~1.2% of ~1,000,000 est.)" */
    char rate[40];      /* bfc_project_rate(): rows (keys passed) per second between two reads */
    char eta[40];       /* from that rate and the estimate ("~6.0s (est.)"), "unknown", "-" */
    char checkpoint[BFC_CELL]; /* "-" before the first batch */
    char bound[BFC_CELL];      /* "-" before start, "(empty)" for an empty source set */
    char generation[24];
    char claim[BFC_CELL];      /* "worker-a (valid, 12s left)", "none", "expired" */
    char retry[BFC_CELL];      /* "attempt 2, next in 3s", "-" */
    char error[BFC_CELL];      /* "prerequisite: undefined table (42P01)", "-" */
    char validation[BFC_CELL]; /* "success 3m ago", "never" */
    char updated[40];          /* "12s ago" */
    char batch[48];            /* "250 of 1000" (adaptive size of the declared bound), "-" */
    char throttle[BFC_CELL];   /* "replica_lag: 301234 bytes (limit 262144), 12s", "-" */
    char slow[BFC_CELL];       /* "batch 3.2 s, median 40 ms, 12s", "-" */
    /* a running validation: "1,234,000 of ~2,000,000 rows checked, 0 need repair, 45s"; one
     * whose validator stopped: "stopped at 1,234,000 rows checked, 0 need repair (silent 2m)";
     * "-" when none runs */
    char validating[BFC_CELL];
    /* a running backfill that no worker holds (no claim, or an expired one) and that waits for
     * no retry: "waiting for a worker" (or "waiting for a worker (claim expired)"); "-" else */
    char waiting[48];
    bool waiting_worker;
    bool gating;
    /* the old-writer watchdog (docs/definitions.md "Old writers"): "37 rows since 14:02 from
     * application relay-1.3 at 10.0.0.7 (role relay), last 14:05" (UTC; "+ 2 more writers",
     * ", 37 healed"), "none (watching)", "none (watch removed)"; "-" when never watched.
     * old_writers_short: "37 (relay-1.3)", "0", "-" (at most 24 columns) */
    char old_writers[200];
    char old_writers_short[40];
    bool has_old_writers; /* rows were counted */
} bfc_view;

/* Project one Backfill. now_us: the observation time (PostgreSQL's, from times.observed_at),
 * used for ages and ETA. */
void bfc_project(const Buzz__Backfill__V1__Backfill *b, bfc_view *out);

/* The rate and ETA of a running backfill from a rate measured between two reads (has_rate
 * false: "unknown"). A single read cannot give an honest rate: the RPC data holds no pause or
 * block history, so rows over time since start would count paused time. */
void bfc_project_rate(bfc_view *v, const Buzz__Backfill__V1__Backfill *b, bool has_rate,
                      double rate);

/* Lower-case name of a State ("running"); "unknown" for unset or unknown values. */
const char *bfc_state_name(int state);
const char *bfc_outcome_name(int outcome);

/* Server text made safe for a terminal: at most cap - 1 bytes, cut on a character boundary;
 * control characters (C0, DEL, C1) and bytes that are not UTF-8 become '?'. src NULL gives "".
 * Every string from a response goes through this (or bfc_project) before it is printed. */
void bfc_printable(char *dst, size_t cap, const char *src);
/* Length of the UTF-8 character at p (1..4), 0 when p does not start a valid one; *control
 * tells whether it is a C0, DEL or C1 control character. */
size_t bfc_utf8_char(const unsigned char *p, bool *control);

/* "1.5s", "3m", "2h05m", "4d"; "unknown" for negative input. */
void bfc_format_duration(char *buf, size_t cap, int64_t us);
/* 1234567 -> "1.2M", 120000 -> "120k", 9999 -> "9999" */
void bfc_format_short_count(char *buf, size_t cap, int64_t n);
/* 1234567 -> "1,234,567" */
void bfc_format_count(char *buf, size_t cap, int64_t n);

#endif
