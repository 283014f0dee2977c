/*
 * notify.c - readiness, reload, stop and watchdog notifications to the service manager (the
 * sd_notify protocol: one datagram to the AF_UNIX socket $NOTIFY_SOCKET names; nothing without
 * it). The socket stays in the environment so every thread may notify.
 *
 * Design notes: why not libsystemd's sd_notify. It sends with a blocking sendmsg(), and a
 * datagram socket whose reader is behind (net.unix.max_dgram_qlen datagrams queued, 10 by
 * default) blocks the sender until the reader reads. The keep-alives come from the signal loop
 * (startup.c srv_signals_serve), so a manager that stopped reading for a second would hold
 * SIGHUP and SIGTERM with them, for as long as it does not read (seen: a test's manager read
 * late, and a SIGHUP waited 60 s). Here a keep-alive is never waited for (dropped when the
 * queue is full: the next comes within half the watchdog interval), and a state change (READY,
 * RELOADING, STOPPING, STATUS) waits at most NOTIFY_SEND_WAIT_MS for room. Only the path forms
 * ("/..." and the abstract "@...") are sent here; any other form (a newer manager's vsock)
 * goes through sd_notify as before.
 */
#include "notify.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#define NOTIFY_SEND_WAIT_MS 1000

/* One datagram to $NOTIFY_SOCKET; wait: for room in the manager's queue, at most
 * NOTIFY_SEND_WAIT_MS. Failures are not reported: the manager's view is advisory. */
static void notify_send(const char *msg, bool wait)
{
    const char *e = getenv("NOTIFY_SOCKET");
    if (e == NULL || e[0] == '\0')
        return;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(e);
    if ((e[0] != '/' && e[0] != '@') || n >= sizeof sa.sun_path) {
        (void)sd_notify(0, msg);
        return;
    }
    memcpy(sa.sun_path, e, n);
    if (e[0] == '@')
        sa.sun_path[0] = '\0'; /* the abstract namespace */
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (e[0] == '/'));
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    struct timeval tv = {.tv_sec = NOTIFY_SEND_WAIT_MS / 1000,
                         .tv_usec = (NOTIFY_SEND_WAIT_MS % 1000) * 1000};
    if (wait)
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    (void)sendto(fd, msg, strlen(msg), MSG_NOSIGNAL | (wait ? 0 : MSG_DONTWAIT),
                 (const struct sockaddr *)&sa, len);
    close(fd);
}

static void notify_sendf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void notify_sendf(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    notify_send(msg, true);
}

/* READY=1 was sent: the startup order completed. A reload before that must not claim it. */
static atomic_bool notify_started;

void srv_notify_ready(const char *status)
{
    atomic_store(&notify_started, true);
    notify_sendf("READY=1\nSTATUS=%s", status != NULL ? status : "serving");
}

void srv_notify_reloaded(const char *status)
{
    if (atomic_load(&notify_started))
        notify_sendf("READY=1\nSTATUS=%s", status != NULL ? status : "serving");
    else
        srv_notify_status(status);
}

void srv_notify_status(const char *status)
{
    notify_sendf("STATUS=%s", status != NULL ? status : "");
}

void srv_notify_reloading(void)
{
    if (!atomic_load(&notify_started))
        return; /* nothing to reload from the manager's view: it still waits for READY=1 */
    /* MONOTONIC_USEC lets newer managers match the reload with the READY=1 that ends it */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    notify_sendf("RELOADING=1\nMONOTONIC_USEC=%llu", (unsigned long long)ts.tv_sec * 1000000ull +
                                                         (unsigned long long)ts.tv_nsec / 1000);
}

void srv_notify_stopping(void)
{
    notify_send("STOPPING=1\nSTATUS=stopping", true);
}

uint64_t srv_notify_watchdog_interval_us(void)
{
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) <= 0)
        return 0;
    return usec / 2 > 0 ? usec / 2 : 1;
}

void srv_notify_watchdog(void)
{
    notify_send("WATCHDOG=1", false);
}
