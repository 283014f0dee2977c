/*
 * notify.c - readiness, reload, stop and watchdog notifications to the service manager,
 * through libsystemd's sd_notify (which does nothing without $NOTIFY_SOCKET). The socket stays
 * in the environment (unset_environment 0) so every thread may notify.
 */
#include "notify.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>

#include <systemd/sd-daemon.h>

/* READY=1 was sent: the startup order completed. A reload before that must not claim it. */
static atomic_bool notify_started;

void srv_notify_ready(const char *status)
{
    atomic_store(&notify_started, true);
    sd_notifyf(0, "READY=1\nSTATUS=%s", status != NULL ? status : "serving");
}

void srv_notify_reloaded(const char *status)
{
    if (atomic_load(&notify_started))
        sd_notifyf(0, "READY=1\nSTATUS=%s", status != NULL ? status : "serving");
    else
        srv_notify_status(status);
}

void srv_notify_status(const char *status)
{
    sd_notifyf(0, "STATUS=%s", status != NULL ? status : "");
}

void srv_notify_reloading(void)
{
    if (!atomic_load(&notify_started))
        return; /* nothing to reload from the manager's view: it still waits for READY=1 */
    /* MONOTONIC_USEC lets newer managers match the reload with the READY=1 that ends it */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu",
               (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000);
}

void srv_notify_stopping(void)
{
    sd_notify(0, "STOPPING=1\nSTATUS=stopping");
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
    sd_notify(0, "WATCHDOG=1");
}
