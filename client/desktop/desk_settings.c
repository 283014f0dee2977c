/*
 * desk_settings.c - the desktop client's saved connection: the server URL, the path of the
 * token file and the TLS options, in $XDG_CONFIG_HOME/buzz-backfill/desktop.conf (a GKeyFile,
 * mode 0600). The token itself is never written: only where to read it from.
 */
#include <stdio.h>
#include <string.h>

#include <glib.h>
#include <glib/gstdio.h>

#include "desk_app.h"

#define DESK_GROUP "connection"

static char *desk_settings_path(void)
{
    return g_build_filename(g_get_user_config_dir(), "buzz-backfill", "desktop.conf", NULL);
}

static void desk_settings_get(GKeyFile *kf, const char *key, char *buf, size_t cap)
{
    char *v = g_key_file_get_string(kf, DESK_GROUP, key, NULL);
    if (v != NULL)
        snprintf(buf, cap, "%s", v);
    g_free(v);
}

void desk_settings_load(desk_conn *c)
{
    char *path = desk_settings_path();
    GKeyFile *kf = g_key_file_new();
    if (g_key_file_load_from_file(kf, path, G_KEY_FILE_NONE, NULL)) {
        desk_settings_get(kf, "url", c->url, sizeof c->url);
        desk_settings_get(kf, "token_file", c->token_file, sizeof c->token_file);
        desk_settings_get(kf, "tls_ca", c->tls_ca, sizeof c->tls_ca);
        desk_settings_get(kf, "tls_server_name", c->tls_server_name, sizeof c->tls_server_name);
    }
    g_key_file_free(kf);
    g_free(path);
}

bool desk_settings_save(const desk_conn *c, char *why, size_t cap)
{
    char *path = desk_settings_path();
    char *dir = g_path_get_dirname(path);
    GKeyFile *kf = g_key_file_new();
    g_key_file_set_string(kf, DESK_GROUP, "url", c->url);
    g_key_file_set_string(kf, DESK_GROUP, "token_file", c->token_file);
    g_key_file_set_string(kf, DESK_GROUP, "tls_ca", c->tls_ca);
    g_key_file_set_string(kf, DESK_GROUP, "tls_server_name", c->tls_server_name);
    gsize len = 0;
    char *text = g_key_file_to_data(kf, &len, NULL);
    GError *e = NULL;
    bool ok =
        g_mkdir_with_parents(dir, 0700) == 0 &&
        g_file_set_contents_full(path, text, (gssize)len, G_FILE_SET_CONTENTS_CONSISTENT, 0600, &e);
    if (!ok)
        snprintf(why, cap, "%s", e ? e->message : "could not make its directory");
    g_clear_error(&e);
    g_free(text);
    g_key_file_free(kf);
    g_free(dir);
    g_free(path);
    return ok;
}
