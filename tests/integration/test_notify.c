/*
 * test_notify.c - the real buzz-backfilld under a (simulated) service manager: the test binds
 * the datagram socket that $NOTIFY_SOCKET names, as systemd does for a Type=notify unit, and
 * reads what the daemon sends.
 *
 *   1. READY=1 only once the startup order has completed: with the migration lock held by the
 *      test, the listeners answer and the daemon waits for the lock, but no READY=1 has come;
 *      once the lock is released READY=1 arrives, and by then every definition is registered
 *      (guard: srv_notify_ready() at the end of startup_main, not at the listeners), also when
 *      a SIGHUP arrives meanwhile (guard: srv_notify_reloaded sends READY=1 only once started);
 *   2. the watchdog: with WATCHDOG_USEC set, WATCHDOG=1 keep-alives arrive while it serves
 *      (guard: the keep-alive in srv_signals_serve);
 *   3. SIGHUP sends RELOADING=1 then READY=1 (guard: the notifications around the reload);
 *   4. SIGTERM sends STOPPING=1 before the exit (guard: srv_notify_stopping in main.c);
 *   5. a manager that stopped reading holds neither SIGHUP nor SIGTERM (guard: notify.c's
 *      keep-alives without a wait).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt.h"
#include "daemon.h"

#define MIGRATION_LOCK_KEY 1111883776 /* engine/src/migrate.c MIGRATION_LOCK, (key, 1) */
#define WAIT_MS            60000

static int notify_fd = -1;
static bd_daemon stalled_; /* test 5's daemon, stopped by the teardown if the test fails */
static PGconn *pg;
static bool passed;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The simulated manager reads its socket all the time, as systemd does (a reader that falls
 * behind is test 5's case): every datagram is appended to notify_log, and the test reads the
 * log from its own cursor. */
static pthread_t notify_reader;
static pthread_mutex_t notify_mtx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t notify_cond = PTHREAD_COND_INITIALIZER;
static char notify_log[1 << 20];
static size_t notify_len, notify_cursor;

static void *notify_reader_main(void *arg)
{
    (void)arg;
    for (;;) {
        char buf[1024];
        ssize_t n = recv(notify_fd, buf, sizeof buf - 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return NULL; /* shut down */
        buf[n] = '\0';
        pthread_mutex_lock(&notify_mtx);
        /* one datagram per record, its lines as sent; a full log keeps its beginning */
        int w =
            snprintf(notify_log + notify_len, sizeof notify_log - notify_len, "%s\n\x1e\n", buf);
        if (w > 0 && (size_t)w < sizeof notify_log - notify_len)
            notify_len += (size_t)w;
        pthread_cond_broadcast(&notify_cond);
        pthread_mutex_unlock(&notify_mtx);
    }
}

/* The next datagram after the cursor, waiting at most wait_ms (0: only what arrived); false
 * when none. */
static bool notify_recv(char *buf, size_t cap, int wait_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += wait_ms / 1000;
    until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&notify_mtx);
    while (notify_cursor == notify_len && wait_ms > 0 &&
           pthread_cond_timedwait(&notify_cond, &notify_mtx, &until) == 0)
        ;
    bool got = notify_cursor < notify_len;
    if (got) {
        const char *rec = notify_log + notify_cursor;
        const char *endrec = strstr(rec, "\n\x1e\n");
        size_t n = (size_t)(endrec - rec);
        snprintf(buf, cap, "%.*s", (int)n, rec);
        notify_cursor += n + 3;
    }
    pthread_mutex_unlock(&notify_mtx);
    return got;
}

/* Wait for a datagram holding line (e.g. "READY=1"); every datagram read meanwhile is
 * appended to seen (when not NULL). Fails the test after WAIT_MS. */
static void notify_expect(const char *line, char *seen, size_t seen_cap)
{
    for (int64_t t0 = now_ms(); now_ms() - t0 < WAIT_MS;) {
        char buf[1024];
        if (!notify_recv(buf, sizeof buf, 1000))
            continue;
        if (seen != NULL)
            snprintf(seen + strlen(seen), seen_cap - strlen(seen), "%s\n", buf);
        for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l != NULL;
             l = strtok_r(NULL, "\n", &save))
            if (strcmp(l, line) == 0)
                return;
    }
    fail_msg("no %s from the daemon within %d ms", line, WAIT_MS);
}

static int setup(void **state)
{
    (void)state;
    pg = bd_suite_open("notify");
    char path[200];
    snprintf(path, sizeof path, "%s/notify.sock", bd_dir());
    notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(notify_fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    assert_true(strlen(path) < sizeof sa.sun_path);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    assert_int_equal(bind(notify_fd, (struct sockaddr *)&sa, sizeof sa), 0);
    setenv("NOTIFY_SOCKET", path, 1);
    setenv("WATCHDOG_USEC", "200000", 1); /* keep-alives every 100 ms */
    unsetenv("WATCHDOG_PID");
    assert_int_equal(pthread_create(&notify_reader, NULL, notify_reader_main, NULL), 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    shutdown(notify_fd, SHUT_RDWR); /* the reader's recv returns */
    pthread_join(notify_reader, NULL);
    close(notify_fd);
    bd_suite_close(stalled_.pid > 0 ? &stalled_ : NULL, pg, !passed);
    return 0;
}

static void test_notify_lifecycle(void **state)
{
    (void)state;
    PGconn *holder = bd_connect(NULL);
    bt_exec(holder, "SELECT pg_advisory_lock(%d, 1)", MIGRATION_LOCK_KEY);

    bd_options o = bd_defaults();
    o.definitions = "c11";
    o.auto_migrate = true;
    o.workers = 1;
    bd_daemon d;
    bd_start(&d, &o); /* returns once the listeners answer */

    /* 1. the startup order is stuck at the migration: the daemon waits for the lock */
    for (int64_t t0 = now_ms();; bd_sleep_ms(10)) {
        if (bt_int(pg,
                   "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                   " AND classid = %d AND objid = 1",
                   MIGRATION_LOCK_KEY) > 0)
            break;
        if (now_ms() - t0 > WAIT_MS)
            fail_msg("the daemon never waited for the migration lock");
    }
    /* a reload meanwhile must not announce readiness either (guard: srv_notify_reloaded) */
    bd_reload(&d);
    char buf[1024];
    while (notify_recv(buf, sizeof buf, 0))
        if (strstr(buf, "READY=1") != NULL)
            fail_msg("READY=1 before the startup order completed: %s", buf);

    bt_exec(holder, "SELECT pg_advisory_unlock(%d, 1)", MIGRATION_LOCK_KEY);
    char seen[8192] = "";
    notify_expect("READY=1", seen, sizeof seen);
    long long registered = bt_int(pg, "SELECT count(*) FROM buzz_backfill.backfill");
    assert_true(registered > 0);
    PQfinish(holder);

    /* 2. the watchdog keeps coming */
    notify_expect("WATCHDOG=1", NULL, 0);
    notify_expect("WATCHDOG=1", NULL, 0);

    /* 3. a reload */
    bd_reload(&d);
    seen[0] = '\0';
    notify_expect("READY=1", seen, sizeof seen);
    assert_non_null(strstr(seen, "RELOADING=1"));
    assert_true(strstr(seen, "RELOADING=1") < strstr(seen, "READY=1"));

    /* 4. the stop */
    assert_int_equal(kill(d.pid, SIGTERM), 0);
    notify_expect("STOPPING=1", NULL, 0);
    assert_int_equal(bd_signal_wait(&d, 0), 0);
    passed = true;
}

/* 5. A manager that does not read (its queue full before the daemon starts) holds neither the
 * daemon's SIGHUP nor its SIGTERM. Guard: notify.c sends keep-alives without waiting and state
 * changes with a bounded wait; with libsystemd's blocking sd_notify the signal loop's first
 * keep-alive waited for as long as the manager did not read, and the reload below never came. */
static void test_stalled_manager_holds_no_signal(void **state)
{
    (void)state;
    passed = false;
    char path[200];
    snprintf(path, sizeof path, "%s/stalled.sock", bd_dir());
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    assert_true(strlen(path) < sizeof sa.sun_path);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int rx = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int tx = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(rx >= 0 && tx >= 0);
    assert_int_equal(bind(rx, (struct sockaddr *)&sa, sizeof sa), 0);
    int queued = 0;
    while (sendto(tx, "X=1", 3, MSG_DONTWAIT, (struct sockaddr *)&sa, sizeof sa) == 3)
        queued++;
    assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
    assert_true(queued > 0);

    const char *manager = getenv("NOTIFY_SOCKET");
    char saved[200];
    snprintf(saved, sizeof saved, "%s", manager ? manager : "");
    setenv("NOTIFY_SOCKET", path, 1);
    bd_options o = bd_defaults();
    o.definitions = "c11";
    o.auto_migrate = true;
    bd_start(&stalled_, &o);
    setenv("NOTIFY_SOCKET", saved, 1);
    bd_reload(&stalled_); /* fails after 60 s when the signal loop is stuck */
    assert_int_equal(bd_signal_wait(&stalled_, SIGTERM), 0);
    stalled_.pid = 0;
    close(tx);
    close(rx);
    passed = true;
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_notify_lifecycle),
                                       cmocka_unit_test(test_stalled_manager_holds_no_signal)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
