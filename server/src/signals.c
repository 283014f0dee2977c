/*
 * signals.c - the daemon's signals (declared in startup.h): SIGTERM and SIGINT stop it, SIGHUP
 * reloads what can change without a restart (the throttle settings, the definition files, the
 * trusted keys and revoked tokens), and a failure the process cannot serve through stops it as
 * SIGTERM would, with exit status 1. The main thread serves them with sigwait(); every other
 * thread has them blocked. Split from startup.c, the composition they belong to.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "notify.h"
#include "startup.h"

static void signals_set(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGHUP);
}

bf_err srv_signals_block(void)
{
    sigset_t set;
    signals_set(&set);
    signal(SIGPIPE, SIG_IGN);
    return pthread_sigmask(SIG_BLOCK, &set, NULL) == 0 ? BF_OK : BF_ERR_INTERNAL;
}

static _Atomic(const char *) signals_fatal;

void srv_signals_stop_fatal(const char *why)
{
    const char *none = NULL;
    if (atomic_compare_exchange_strong(&signals_fatal, &none, why))
        kill(getpid(), SIGTERM); /* the main thread's sigwait() takes it */
}

/* SIGHUP: the throttle settings of the configuration as it reads now. */
static void signals_reload_throttle(const srv_reload *r)
{
    if (r == NULL || r->throttle == NULL)
        return;
    srv_config fresh;
    char diag[512] = "";
    bf_err err = srv_config_load(&fresh, r->argc, r->argv, r->envp, diag, sizeof diag);
    if (err == BF_OK) {
        err = srv_config_throttle(&fresh, r->throttle, diag, sizeof diag);
        srv_config_fini(&fresh);
    }
    if (err == BF_OK)
        srv_log_event(BF_LOG_INFO, BF_EV_CONFIG_RELOAD,
                      "SIGHUP: throttle settings reloaded (other settings need a restart)");
    else
        srv_log_event(BF_LOG_ERROR, BF_EV_CONFIG_RELOAD_FAILED,
                      "SIGHUP: configuration refused, the previous throttle settings stay: %s",
                      diag);
}

bool srv_signals_serve(srv_auth *auth, const srv_reload *reload)
{
    sigset_t set;
    signals_set(&set);
    /* the watchdog's keep-alive comes from this loop: it stops when signals are no longer
     * served (the stop sequence then has its own bound, docs/service.md) */
    uint64_t watchdog_us = srv_notify_watchdog_interval_us();
    if (watchdog_us > 0)
        srv_notify_watchdog();
    for (;;) {
        int sig = 0;
        if (watchdog_us > 0) {
            struct timespec ts = {.tv_sec = (time_t)(watchdog_us / 1000000),
                                  .tv_nsec = (long)(watchdog_us % 1000000) * 1000};
            sig = sigtimedwait(&set, NULL, &ts);
            if (sig < 0) {
                srv_notify_watchdog();
                continue;
            }
        } else if (sigwait(&set, &sig) != 0) {
            continue;
        }
        if (sig != SIGHUP) {
            const char *why = atomic_load(&signals_fatal);
            if (why != NULL) {
                srv_log_event(BF_LOG_ERROR, BF_EV_SERVER_STOPPING, "shutting down: %s", why);
                return true;
            }
            srv_log_event(BF_LOG_INFO, BF_EV_SERVER_STOPPING, "received %s: shutting down",
                          sig == SIGTERM ? "SIGTERM" : "SIGINT");
            return false;
        }
        char diag[256] = "";
        srv_notify_reloading();
        signals_reload_throttle(reload);
        if (reload != NULL)
            (void)srv_defdir_reload(reload->definitions, reload->engine_cfg, reload->auto_backfill);
        bf_err err = auth ? srv_auth_reload(auth, diag, sizeof diag) : BF_OK;
        srv_notify_reloaded(err == BF_OK ? "serving" : "serving; the last reload failed");
        if (err == BF_OK)
            srv_log_event(BF_LOG_INFO, BF_EV_AUTH_RELOAD,
                          "SIGHUP: trusted keys and revoked tokens reloaded");
        else
            srv_log_event(BF_LOG_ERROR, BF_EV_AUTH_RELOAD_FAILED,
                          "SIGHUP: reload failed, previous keys stay in force: %s", diag);
    }
}
