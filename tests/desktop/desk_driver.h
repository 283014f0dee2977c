/*
 * desk_driver.h - buzz-backfill-desktop driven as a person would, for tests/desktop: a private
 * Xvfb display, the application on it with its test hook (BUZZ_DESKTOP_TEST=1, see
 * client/desktop/desk_test.c), and what its window shows read back as "name -> text" lines.
 * Every wait polls the window until a deadline; nothing is ordered by sleeping.
 * Functions fail the running cmocka test on an unexpected error.
 */
#ifndef BUZZ_TEST_DESK_DRIVER_H
#define BUZZ_TEST_DESK_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define DD_DEADLINE_S 30 /* seconds a window may take to show something */
#define DD_DUMP_MAX   (1 << 20)

typedef struct dd_app {
    pid_t pid;
    int to_app, from_app; /* its stdin and stdout */
    char dump[DD_DUMP_MAX];
} dd_app;

/* A private Xvfb (once per process; stopped by dd_x_stop). */
void dd_x_start(void);
void dd_x_stop(void);

/* The application with args (NULL-terminated, after the program name); XDG_CONFIG_HOME is
 * config_home (its saved settings). Waits for the test hook to say READY. */
void dd_start(dd_app *a, const char *config_home, const char *const *args);
/* Close its stdin (the hook closes the window) and wait for a clean exit (status 0). */
void dd_stop(dd_app *a);
/* One hook command; its answer (until "END") into a->dump, returned. */
const char *dd_cmd(dd_app *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* dd_cmd that must answer "ok". */
void dd_do(dd_app *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The text of the visible widget named name in the last dump, NULL when not shown. The
 * returned pointer is into a static buffer valid until the next call. */
const char *dd_field(dd_app *a, const char *name);
/* Dump until the widget named name shows a text containing want (within DD_DEADLINE_S). */
void dd_wait(dd_app *a, const char *name, const char *want);
/* Whether the last dump shows the text anywhere. */
bool dd_shows(dd_app *a, const char *text);
/* Fail with the dump when the last dump shows text. */
void dd_refute(dd_app *a, const char *text);
/* A screenshot of the window into path (a PNG). */
void dd_shot(dd_app *a, const char *path);

#endif
