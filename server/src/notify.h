/*
 * notify.h - the service manager's view of the daemon (systemd's sd_notify protocol).
 *
 * READY=1 once the startup order of startup.h has completed (listeners answer, the schema is
 * current, every definition is registered, the workers run); RELOADING=1 then READY=1 around a
 * SIGHUP reload; STOPPING=1 when a stop begins; WATCHDOG=1 keep-alives when the unit enables
 * the watchdog. Every call is a no-op when the daemon was not started by a service manager
 * (no $NOTIFY_SOCKET). Thread-safe.
 */
#ifndef BUZZ_SRV_NOTIFY_H
#define BUZZ_SRV_NOTIFY_H

#include <stdint.h>

/* READY=1 with a status line. */
void srv_notify_ready(const char *status);
/* STATUS= only (a startup phase, "waiting for the database"). */
void srv_notify_status(const char *status);
/* RELOADING=1, once READY=1 was sent (before that, nothing). */
void srv_notify_reloading(void);
/* The end of a reload: READY=1 with status once the startup order has completed (READY=1 was
 * sent), else only the status: a SIGHUP during startup must not announce readiness. */
void srv_notify_reloaded(const char *status);
void srv_notify_stopping(void);
/* Microseconds between keep-alives the manager expects (half its WATCHDOG_USEC), 0 when the
 * watchdog is off for this process. */
uint64_t srv_notify_watchdog_interval_us(void);
void srv_notify_watchdog(void);

#endif /* BUZZ_SRV_NOTIFY_H */
