/*
 * desk_driver.c - a private Xvfb and buzz-backfill-desktop on it, driven through its test hook
 * (see desk_driver.h).
 */
#include "desk_driver.h"

#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static pid_t dd_xvfb = -1;

static int64_t dd_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void dd_x_start(void)
{
    if (dd_xvfb > 0)
        return;
    int p[2];
    assert_int_equal(pipe(p), 0);
    dd_xvfb = fork();
    assert_true(dd_xvfb >= 0);
    if (dd_xvfb == 0) {
        close(p[0]);
        char fd[16];
        snprintf(fd, sizeof fd, "%d", p[1]);
        /* -displayfd: Xvfb picks a free display and writes its number when it accepts */
        execlp("Xvfb", "Xvfb", "-displayfd", fd, "-screen", "0", "1280x800x24", "-nolisten", "tcp",
               "-noreset", (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char num[16] = "";
    size_t o = 0;
    int64_t until = dd_now_ms() + DD_DEADLINE_S * 1000;
    while (o + 1 < sizeof num && strchr(num, '\n') == NULL) {
        struct pollfd pf = {.fd = p[0], .events = POLLIN};
        int left = (int)(until - dd_now_ms());
        if (left <= 0 || poll(&pf, 1, left) <= 0)
            fail_msg("Xvfb did not say its display within %d s (is xvfb installed?)",
                     DD_DEADLINE_S);
        ssize_t n = read(p[0], num + o, sizeof num - 1 - o);
        if (n <= 0)
            fail_msg("Xvfb exited before it said its display (is xvfb installed?)");
        o += (size_t)n;
        num[o] = '\0';
    }
    close(p[0]);
    char display[24];
    snprintf(display, sizeof display, ":%d", atoi(num));
    assert_int_equal(setenv("DISPLAY", display, 1), 0);
}

void dd_x_stop(void)
{
    if (dd_xvfb <= 0)
        return;
    kill(dd_xvfb, SIGTERM);
    waitpid(dd_xvfb, NULL, 0);
    dd_xvfb = -1;
}

/* Read from the application until its output ends with the line want ("END\n"). */
static void dd_read_until(dd_app *a, const char *want)
{
    size_t o = 0, wl = strlen(want);
    a->dump[0] = '\0';
    int64_t until = dd_now_ms() + DD_DEADLINE_S * 1000;
    for (;;) {
        if (o >= wl && strcmp(a->dump + o - wl, want) == 0 &&
            (o == wl || a->dump[o - wl - 1] == '\n'))
            break;
        struct pollfd pf = {.fd = a->from_app, .events = POLLIN};
        int left = (int)(until - dd_now_ms());
        if (left <= 0 || poll(&pf, 1, left) <= 0)
            fail_msg("the application did not answer within %d s; so far:\n%s", DD_DEADLINE_S,
                     a->dump);
        if (o + 1 >= sizeof a->dump)
            fail_msg("the application's answer is too long");
        ssize_t n = read(a->from_app, a->dump + o, sizeof a->dump - 1 - o);
        if (n <= 0)
            fail_msg("the application exited; its last output:\n%s", a->dump);
        o += (size_t)n;
        a->dump[o] = '\0';
    }
    a->dump[o - wl] = '\0';
}

void dd_start(dd_app *a, const char *config_home, const char *const *args)
{
    memset(a, 0, sizeof *a);
    int in[2], out[2];
    assert_int_equal(pipe(in), 0);
    assert_int_equal(pipe(out), 0);
    a->pid = fork();
    assert_true(a->pid >= 0);
    if (a->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        setenv("XDG_CONFIG_HOME", config_home, 1);
        setenv("BUZZ_DESKTOP_TEST", "1", 1);
        setenv("GDK_BACKEND", "x11", 1);
        setenv("GSK_RENDERER", "cairo", 1); /* no GL on Xvfb */
        setenv("GTK_A11Y", "none", 1);      /* the hook reads the widgets; no a11y bus needed */
        setenv("NO_AT_BRIDGE", "1", 1);
        setenv("LANG", "C.UTF-8", 1);
        /* under ASan: GTK, GLib and fontconfig keep their caches to exit, which LeakSanitizer
         * would report as the application's leaks; memory errors still abort it */
        const char *asan = getenv("ASAN_OPTIONS");
        char opts[512];
        snprintf(opts, sizeof opts, "%s%sdetect_leaks=0", asan ? asan : "",
                 asan && asan[0] ? ":" : "");
        setenv("ASAN_OPTIONS", opts, 1);
        unsetenv("BUZZ_BACKFILL_URL");
        unsetenv("BUZZ_BACKFILL_TOKEN");
        unsetenv("BUZZ_BACKFILL_TOKEN_FILE");
        const char *argv[24] = {BUZZ_DESKTOP_PATH};
        size_t n = 1;
        for (size_t i = 0; args[i] != NULL && n + 1 < sizeof argv / sizeof argv[0]; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        execv(BUZZ_DESKTOP_PATH, (char *const *)argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    a->to_app = in[1];
    a->from_app = out[0];
    signal(SIGPIPE, SIG_IGN);
    dd_read_until(a, "READY\n");
}

void dd_stop(dd_app *a)
{
    close(a->to_app);
    int64_t until = dd_now_ms() + DD_DEADLINE_S * 1000;
    int status = 0;
    while (waitpid(a->pid, &status, WNOHANG) == 0) {
        char buf[4096];
        struct pollfd pf = {.fd = a->from_app, .events = POLLIN};
        if (poll(&pf, 1, 100) > 0 && read(a->from_app, buf, sizeof buf) < 0 && errno != EINTR)
            break;
        if (dd_now_ms() > until) {
            kill(a->pid, SIGKILL);
            waitpid(a->pid, NULL, 0);
            fail_msg("the application did not exit when its input closed");
        }
    }
    close(a->from_app);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("the application exited with status 0x%x", status);
}

static const char *dd_vcmd(dd_app *a, const char *fmt, va_list ap)
{
    char line[2048];
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    assert_true(n > 0 && (size_t)n < sizeof line - 1);
    line[n++] = '\n';
    assert_int_equal(write(a->to_app, line, (size_t)n), n);
    dd_read_until(a, "END\n");
    return a->dump;
}

const char *dd_cmd(dd_app *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *r = dd_vcmd(a, fmt, ap);
    va_end(ap);
    return r;
}

void dd_do(dd_app *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *r = dd_vcmd(a, fmt, ap);
    va_end(ap);
    if (strcmp(r, "ok\n") != 0)
        fail_msg("the hook refused: %s", r);
}

const char *dd_field(dd_app *a, const char *name)
{
    static char value[4096];
    size_t nl = strlen(name);
    for (const char *p = a->dump; *p != '\0';) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (len > nl + 1 && strncmp(p, name, nl) == 0 && p[nl] == '\t') {
            const char *v = p + nl + 1;
            const char *tab = memchr(v, '\t', len - nl - 1); /* the kind */
            if (tab != NULL)
                v = tab + 1;
            snprintf(value, sizeof value, "%.*s", (int)(p + len - v), v);
            return value;
        }
        p += len + (eol != NULL);
    }
    return NULL;
}

void dd_wait(dd_app *a, const char *name, const char *want)
{
    int64_t until = dd_now_ms() + DD_DEADLINE_S * 1000;
    for (;;) {
        dd_cmd(a, "dump");
        const char *v = dd_field(a, name);
        if (v != NULL && strstr(v, want) != NULL)
            return;
        if (dd_now_ms() > until)
            fail_msg("waited %d s for %s to show \"%s\" (it shows \"%s\"); the window:\n%s",
                     DD_DEADLINE_S, name, want, v ? v : "(not shown)", a->dump);
        /* a bounded poll of what the window shows, not an ordering sleep */
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

bool dd_shows(dd_app *a, const char *text)
{
    return strstr(a->dump, text) != NULL;
}

void dd_refute(dd_app *a, const char *text)
{
    if (dd_shows(a, text))
        fail_msg("the window shows \"%s\":\n%s", text, a->dump);
}

void dd_shot(dd_app *a, const char *path)
{
    dd_do(a, "shot %s", path);
}
