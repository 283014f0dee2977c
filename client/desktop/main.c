/*
 * main.c - buzz-backfill-desktop: the GTK 4 client of buzz-backfilld. main only composes: the
 * options (the same URL forms, token file and TLS options as buzzctl), the saved settings,
 * the window, the worker threads, the test hook; then the main loop; then the same in reverse.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "client_conn.h"
#include "desk_app.h"

#ifndef BUZZ_VERSION
#define BUZZ_VERSION "unknown"
#endif

static void main_usage(FILE *f)
{
    fputs("usage: buzz-backfill-desktop [--url URL] [--token-file FILE] [--tls-ca FILE]\n"
          "                             [--tls-server-name NAME] [--interval DURATION]\n"
          "\n"
          "The desktop client of buzz-backfilld: backfills with progress, rate and ETA, the\n"
          "detail and audit of one, readiness as the relay sees it, and the five supported\n"
          "controls (start, pause, resume, retry, validate), each confirmed before it is sent.\n"
          "\n"
          "  --url URL               ipc:///path, tcp://host:port or tls+tcp://host:port\n"
          "                          (default: BUZZ_BACKFILL_URL, the saved setting, or the\n"
          "                          packaged socket when it exists)\n"
          "  --token-file FILE       the capability token's file (default: the saved path, or\n"
          "                          BUZZ_BACKFILL_TOKEN / BUZZ_BACKFILL_TOKEN_FILE); the token\n"
          "                          is read when connecting and never saved\n"
          "  --tls-ca FILE           tls+tcp://: the CA or the server's certificate (PEM)\n"
          "  --tls-server-name NAME  tls+tcp://: the name to verify (default: the URL's host)\n"
          "  --interval DURATION     between refreshes, 500ms..1h (default 2s)\n"
          "  --help, --version\n"
          "\n"
          "Settings (URL, token file path, TLS options) are saved in\n"
          "$XDG_CONFIG_HOME/buzz-backfill/desktop.conf when you press Connect.\n",
          f);
}

/* "500ms", "2s", "1m" or a bare number of seconds; -1 otherwise. */
static int main_interval_ms(const char *s)
{
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (end == s || v < 0 || v > 3600000)
        return -1;
    long ms = strcmp(end, "ms") == 0                  ? v
              : strcmp(end, "s") == 0 || *end == '\0' ? v * 1000
              : strcmp(end, "m") == 0                 ? v * 60000
                                                      : -1;
    return ms >= 500 && ms <= 3600000 ? (int)ms : -1;
}

/* The connection from the command line, the environment and the saved settings; 0 or the exit
 * code of a usage error. */
static int main_options(desk_conn *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"url", required_argument, NULL, 'u'},
        {"token-file", required_argument, NULL, 'T'},
        {"tls-ca", required_argument, NULL, 'c'},
        {"tls-server-name", required_argument, NULL, 'n'},
        {"interval", required_argument, NULL, 'i'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {0},
    };
    desk_settings_load(c);
    const char *env_url = getenv("BUZZ_BACKFILL_URL");
    if (env_url != NULL && env_url[0] != '\0')
        snprintf(c->url, sizeof c->url, "%s", env_url);
    bool token_given = c->token_file[0] != '\0';
    int o;
    while ((o = getopt_long(argc, argv, "u:h", opts, NULL)) != -1) {
        switch (o) {
        case 'u':
            snprintf(c->url, sizeof c->url, "%s", optarg);
            break;
        case 'T':
            snprintf(c->token_file, sizeof c->token_file, "%s", optarg);
            token_given = true;
            break;
        case 'c':
            snprintf(c->tls_ca, sizeof c->tls_ca, "%s", optarg);
            break;
        case 'n':
            snprintf(c->tls_server_name, sizeof c->tls_server_name, "%s", optarg);
            break;
        case 'i':
            if ((c->interval_ms = main_interval_ms(optarg)) < 0) {
                fputs("buzz-backfill-desktop: --interval needs a duration of 500ms..1h (e.g. "
                      "2s)\n",
                      stderr);
                return 2;
            }
            break;
        case 'h':
            main_usage(stdout);
            return -1;
        case 'V':
            printf("buzz-backfill-desktop %s\n", BUZZ_VERSION);
            return -1;
        default:
            main_usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "buzz-backfill-desktop: unexpected argument '%.40s'\n", argv[optind]);
        return 2;
    }
    /* no token file named: the token variables, checked now so a mistake is said at once */
    if (!token_given) {
        char *token = NULL, why[256];
        if (bfc_conn_env_token(&token, why, sizeof why) != 0) {
            fprintf(stderr, "buzz-backfill-desktop: %s\n", why);
            return 2;
        }
        c->token_env = token != NULL;
        if (token != NULL) {
            sodium_memzero(token, strlen(token));
            free(token);
        }
    }
    if (c->url[0] == '\0')
        (void)bfc_conn_default_url(c->url, sizeof c->url);
    return 0;
}

static void main_on_snapshot(desk_snapshot *s, void *arg)
{
    desk_window_show_snapshot(arg, s);
}

static void main_on_outcome(desk_outcome *o, void *arg)
{
    desk_window_show_outcome(arg, o);
}

static gboolean main_on_close(GtkWindow *win, gpointer data)
{
    (void)win;
    g_main_loop_quit(data);
    return FALSE;
}

int main(int argc, char **argv)
{
    static desk_app app;
    int rc = main_options(&app.conn, argc, argv);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    if (sodium_init() < 0) {
        fputs("buzz-backfill-desktop: could not initialise libsodium\n", stderr);
        return 1;
    }
    g_set_application_name("buzz-backfill");
    if (!gtk_init_check()) {
        fputs("buzz-backfill-desktop: cannot open a display (is DISPLAY or WAYLAND_DISPLAY "
              "set?)\n",
              stderr);
        return 1;
    }
    GMainLoop *loop = g_main_loop_new(NULL, FALSE);
    GtkWidget *win = desk_window_new(&app);
    g_signal_connect(win, "close-request", G_CALLBACK(main_on_close), loop);
    app.w = desk_worker_new(&app.conn, main_on_snapshot, main_on_outcome, &app);
    gtk_window_present(GTK_WINDOW(win));
    desk_test_start(&app);
    g_main_loop_run(loop);
    desk_worker_free(app.w);
    desk_snapshot_free(app.snap);
    free(app.rows);
    g_main_loop_unref(loop);
    return 0;
}
