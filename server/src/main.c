/*
 * main.c - buzz-backfilld: composes the subsystems in order, serves until SIGTERM or SIGINT,
 * and takes them down in reverse. The order and its reasons are in startup.h; the metrics come
 * first (their observer sees every log record from then on) and the optional HTTP listener
 * (http_listen) right after the admin listeners, before the startup sequence.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "config.h"
#include "notify.h"
#include "http.h"
#include "metrics.h"
#include "startup.h"
#include "transport.h"

#ifndef BUZZ_VERSION
#error "BUZZ_VERSION comes from project(VERSION) (server/CMakeLists.txt)"
#endif

extern char **environ;

static int daemon_fail(const char *what, const char *diag)
{
    srv_log(BF_LOG_ERROR, "%s: %s", what, diag);
    return 1;
}

static int daemon_serve(const srv_config *cfg, srv_metrics *metrics, srv_reload *reload);

static int daemon_run(const srv_config *cfg, srv_reload *reload)
{
    srv_log_setup(cfg->log_level);
    srv_log_set_format(cfg->log_format);
    srv_metrics *metrics = NULL;
    const ProtobufCServiceDescriptor *services[] = {srv_admin_service()->descriptor,
                                                    srv_readiness_service()->descriptor};
    if (srv_metrics_new(&metrics, BUZZ_VERSION, services, 2) != BF_OK)
        return daemon_fail("metrics", "cannot allocate the metrics");
    srv_log_set_observer(srv_metrics_event, metrics); /* before any thread logs */
    int rc = daemon_serve(cfg, metrics, reload);
    srv_log_set_observer(NULL, NULL);
    srv_metrics_free(metrics);
    return rc;
}

static int daemon_serve(const srv_config *cfg, srv_metrics *metrics, srv_reload *reload)
{
    char diag[512] = "";
    if (srv_signals_block() != BF_OK)
        return daemon_fail("signals", "cannot block termination signals");
    srv_fd_limit_raise(cfg);

    bf_throttle *throttle = NULL;
    if (bf_throttle_new(&throttle) != BF_OK)
        return daemon_fail("throttle", "out of memory");
    if (srv_config_throttle(cfg, throttle, diag, sizeof diag) != BF_OK) {
        bf_throttle_free(throttle);
        return daemon_fail("throttle", diag);
    }
    reload->throttle = throttle;

    srv_auth *auth = NULL;
    srv_auth_config auth_cfg = srv_auth_config_from(cfg);
    if (srv_auth_new(&auth, &auth_cfg, diag, sizeof diag) != BF_OK) {
        bf_throttle_free(throttle);
        return daemon_fail("auth", diag);
    }
    bf_registry *registry = NULL;
    if (bf_registry_new(&registry) != BF_OK) {
        srv_auth_free(auth);
        bf_throttle_free(throttle);
        return daemon_fail("definitions", "cannot create the definitions registry");
    }

    srv_context ctx;
    srv_context_init(&ctx, cfg, registry, auth);
    ctx.metrics = metrics;
    ctx.engine_cfg.throttle = throttle; /* every engine of the process shares it */
    reload->engine_cfg = &ctx.engine_cfg;
    reload->auto_backfill = cfg->auto_backfill;

    int rc = 1;
    srv_defdir *definition_files = NULL;
    srv_dispatcher *dispatcher = NULL;
    srv_transport *transport = NULL;
    srv_startup *startup = NULL;
    srv_http *http = NULL;
    srv_transport_config tcfg = srv_transport_config_from(cfg);
    /* the sessions open while the definitions load (startup.h) */
    if (srv_startup_begin(&startup, &ctx, cfg) != BF_OK) {
        daemon_fail("startup", "cannot start the startup thread");
    } else if (srv_registry_fill(registry, &definition_files, cfg, diag, sizeof diag) != BF_OK) {
        daemon_fail("definitions", diag);
    } else if (srv_dispatcher_new(&dispatcher, &ctx) != BF_OK ||
               srv_dispatcher_add(dispatcher, srv_admin_service(), srv_admin_policies()) != BF_OK ||
               srv_dispatcher_add(dispatcher, srv_readiness_service(), srv_readiness_policies()) !=
                   BF_OK) {
        daemon_fail("dispatcher", "cannot register the services");
    } else if (srv_transport_new(&transport, dispatcher, &ctx, &tcfg, diag, sizeof diag) != BF_OK ||
               srv_transport_start(transport, diag, sizeof diag) != BF_OK) {
        daemon_fail("listeners", diag);
    } else if (cfg->http_listen != NULL &&
               srv_http_new(&http, cfg->http_listen, &ctx, metrics, diag, sizeof diag) != BF_OK) {
        daemon_fail("http_listen", diag);
    } else {
        reload->definitions = definition_files;
        srv_startup_proceed(startup);
        srv_log_event(BF_LOG_INFO, BF_EV_SERVER_STARTED,
                      "buzz-backfilld %s serving on %zu listener%s", BUZZ_VERSION, cfg->n_listen,
                      cfg->n_listen == 1 ? "" : "s");
        rc = srv_signals_serve(auth, reload) ? 1 : 0;
    }
    srv_notify_stopping();

    atomic_store(&ctx.shutting_down, true);
    srv_startup_stop(startup);
    srv_transport_stop(transport);
    srv_http_free(http);
    srv_startup_free(startup);
    srv_transport_free(transport);
    srv_dispatcher_free(dispatcher);
    srv_auth_free(auth);
    srv_registry_unload(registry, definition_files); /* after every engine reading it is gone */
    bf_throttle_free(throttle);                      /* the workers that used it are joined */
    if (rc == 0)
        srv_log_event(BF_LOG_INFO, BF_EV_SERVER_STOPPED, "stopped");
    return rc;
}

int main(int argc, char **argv)
{
    srv_config cfg;
    char diag[512] = "";
    if (srv_config_load(&cfg, argc, argv, environ, diag, sizeof diag) != BF_OK) {
        fprintf(stderr, "buzz-backfilld: %s\n", diag);
        return 1;
    }
    int rc = 0;
    if (srv_config_check_environment(&cfg, diag, sizeof diag) != BF_OK) {
        fprintf(stderr, "buzz-backfilld: %s\n", diag);
        srv_config_fini(&cfg);
        return 1;
    }
    switch (cfg.command) {
    case SRV_CMD_HELP:
        srv_config_usage(stdout, "buzz-backfilld");
        break;
    case SRV_CMD_VERSION:
        printf("buzz-backfilld %s\n", BUZZ_VERSION);
        break;
    case SRV_CMD_CHECK_CONFIG:
        srv_config_print(stdout, &cfg);
        break;
    case SRV_CMD_MIGRATE:
        srv_log_setup(cfg.log_level);
        srv_log_set_format(cfg.log_format);
        rc = srv_migrate_command(&cfg);
        break;
    case SRV_CMD_PREFLIGHT:
        srv_log_setup(cfg.log_level);
        srv_log_set_format(cfg.log_format);
        rc = srv_preflight_command(&cfg);
        break;
    case SRV_CMD_RUN: {
        srv_reload reload = {.argc = argc, .argv = argv, .envp = environ};
        rc = daemon_run(&cfg, &reload);
        break;
    }
    }
    srv_config_fini(&cfg);
    return rc;
}
