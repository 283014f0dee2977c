/*
 * config_check.c - validation of a loaded configuration per command (listeners, URLs, the settings
 * a command needs), and the checks against the environment that run before the daemon starts: files
 * and directories readable, ipc socket paths usable, listener hosts resolvable.
 */
#include <ctype.h>
#include <errno.h>
#include <libgen.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <libpq-fe.h>

#include "buzz/token.h"
#include "config_impl.h"

/* ---- validation ---------------------------------------------------------------------------- */

static bool config_has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0 && s[strlen(prefix)] != '\0';
}

/* Where the effective value of key came from ("file x.conf:3", "flag --listen", "default"). */
const char *config_origin(const srv_config *cfg, const char *key)
{
    int k = config_key_index(key);
    return k >= 0 && cfg->origin[k][0] != '\0' ? cfg->origin[k] : "default";
}

/* A decimal port 1..65535 spanning exactly [s, s + len). */
static bool config_port_valid(const char *s, size_t len)
{
    if (len == 0 || len > 5)
        return false;
    long port = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return false;
        port = port * 10 + (s[i] - '0');
    }
    return port >= 1 && port <= 65535;
}

/* The host and port of a tcp:// or tls+tcp:// listener ("host:port", "[v6]:port", ":port" or
 * "*:port" for every address). host gets "" for every address. false when malformed. */
static bool config_host_port(const char *rest, char *host, size_t host_cap, const char **port,
                             size_t *port_len)
{
    const char *colon;
    size_t host_len;
    const char *h = rest;
    if (rest[0] == '[') {
        const char *close = strchr(rest, ']');
        if (close == NULL || close[1] != ':')
            return false;
        h = rest + 1;
        host_len = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(rest, ':');
        if (colon == NULL || memchr(rest, ':', (size_t)(colon - rest)) != NULL)
            return false; /* no port, or an IPv6 address without brackets */
        host_len = (size_t)(colon - rest);
    }
    if (host_len >= host_cap)
        return false;
    if (host_len == 1 && h[0] == '*')
        host_len = 0;
    memcpy(host, h, host_len);
    host[host_len] = '\0';
    *port = colon + 1;
    *port_len = strlen(colon + 1);
    return true;
}

/* Every port the conninfo names (libpq takes a comma-separated list) is a number 1..65535, or
 * empty (the default). The conninfo must parse; libpq's error text is not kept (it can quote
 * the value). */
static bf_err config_check_database_url(const srv_config *cfg, char *diag, size_t cap)
{
    const char *origin = config_origin(cfg, "database_url");
    char *why = NULL;
    PQconninfoOption *opts = PQconninfoParse(cfg->database_url, &why);
    PQfreemem(why);
    if (opts == NULL)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: database_url is not a valid libpq URL or conninfo", origin);
    bool ok = true;
    for (const PQconninfoOption *o = opts; ok && o->keyword != NULL; o++) {
        if (strcmp(o->keyword, "port") != 0 || o->val == NULL)
            continue;
        for (const char *p = o->val; ok;) {
            size_t len = strcspn(p, ",");
            ok = len == 0 || config_port_valid(p, len);
            if (p[len] == '\0')
                break;
            p += len + 1;
        }
    }
    PQconninfoFree(opts);
    if (!ok)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: database_url: each port must be a number from 1 to 65535", origin);
    return BF_OK;
}

/* One listen entry's form: ipc:// with a path that fits a socket address, tcp:// and
 * tls+tcp:// with a host and a port 1..65535. */
static bf_err config_check_listen_entry(const srv_config *cfg, size_t i, char *diag, size_t cap)
{
    const char *origin = config_origin(cfg, "listen");
    const char *u = cfg->listen[i];
    if (strncmp(u, "ipc://", 6) == 0) {
        struct sockaddr_un sun;
        if (strlen(u + 6) >= sizeof sun.sun_path)
            return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                               "%s: listen entry %zu: the ipc path is longer than %zu bytes",
                               origin, i + 1, sizeof sun.sun_path - 1);
        return BF_OK;
    }
    const char *rest = u + (strncmp(u, "tcp://", 6) == 0 ? 6 : 10);
    char host[256];
    const char *port = NULL;
    size_t port_len = 0;
    if (!config_host_port(rest, host, sizeof host, &port, &port_len))
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: listen entry %zu: expected host:port", origin, i + 1);
    if (!config_port_valid(port, port_len))
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: listen entry %zu: port must be a number from 1 to 65535", origin,
                           i + 1);
    return BF_OK;
}

/* http_listen: http://host:port with a port 1..65535 (no path: the endpoints are fixed). */
static bf_err config_check_http_listen(const srv_config *cfg, char *diag, size_t cap)
{
    const char *origin = config_origin(cfg, "http_listen");
    const char *u = cfg->http_listen;
    if (!config_has_prefix(u, "http://"))
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: http_listen: expected http://host:port", origin);
    char host[256];
    const char *port = NULL;
    size_t port_len = 0;
    if (!config_host_port(u + 7, host, sizeof host, &port, &port_len))
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: http_listen: expected http://host:port", origin);
    if (!config_port_valid(port, port_len))
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: http_listen: port must be a number from 1 to 65535", origin);
    return BF_OK;
}

bf_err config_validate(const srv_config *cfg, char *diag, size_t cap)
{
    bf_err bad = BF_ERR_INVALID_ARGUMENT;
    if (cfg->command == SRV_CMD_HELP || cfg->command == SRV_CMD_VERSION)
        return BF_OK;
    if (cfg->database_url == NULL)
        return config_fail(diag, cap, bad,
                           "database_url is not set (configuration file, "
                           "BUZZ_BACKFILL_DATABASE_URL or --database-url)");
    bf_err err = config_check_database_url(cfg, diag, cap);
    if (err != BF_OK || cfg->command == SRV_CMD_MIGRATE || cfg->command == SRV_CMD_PREFLIGHT)
        return err;
    if (cfg->n_listen == 0)
        return config_fail(diag, cap, bad,
                           "listen is not set: give at least one ipc://, tcp:// or tls+tcp:// URL");
    if (cfg->n_listen > SRV_CONFIG_LISTEN_MAX)
        return config_fail(diag, cap, bad, "listen has %zu entries; at most %d are supported",
                           cfg->n_listen, SRV_CONFIG_LISTEN_MAX);
    bool network = false;
    for (size_t i = 0; i < cfg->n_listen; i++) {
        const char *u = cfg->listen[i];
        if (config_has_prefix(u, "tls+tcp://")) {
            network = true;
            if (cfg->tls_cert_key_file == NULL)
                return config_fail(
                    diag, cap, bad,
                    "listen entry %zu is tls+tcp:// but tls_cert_key_file is not set", i + 1);
        } else if (config_has_prefix(u, "tcp://")) {
            network = true;
        } else if (!config_has_prefix(u, "ipc://")) {
            return config_fail(diag, cap, bad,
                               "listen entry %zu: expected ipc://, tcp:// or tls+tcp://", i + 1);
        }
        if ((err = config_check_listen_entry(cfg, i, diag, cap)) != BF_OK)
            return err;
    }
    if (cfg->http_listen != NULL && (err = config_check_http_listen(cfg, diag, cap)) != BF_OK)
        return err;
    if (network && cfg->trusted_keys_file == NULL)
        return config_fail(diag, cap, bad,
                           "tcp:// and tls+tcp:// listeners need trusted_keys_file: only tokens "
                           "authorize requests there");
    if (cfg->trusted_keys_file == NULL && !cfg->ipc_boundary)
        return config_fail(diag, cap, bad,
                           "no request can be authorized: set trusted_keys_file or "
                           "ipc_boundary = on");
    if (cfg->trusted_keys_file != NULL && cfg->token_audience == NULL)
        return config_fail(diag, cap, bad, "token_audience is required with trusted_keys_file");
    if (cfg->token_audience != NULL && !bft_name_valid(cfg->token_audience))
        return config_fail(diag, cap, bad,
                           "%s: token_audience must be 1 to %d bytes without control characters",
                           config_origin(cfg, "token_audience"), BFT_NAME_MAX - 1);
    /* a lease that a working owner can outlast would be taken over (and its attempt counted)
     * while the owner still works within its timeouts */
    bf_config lease = {.lease_ms = cfg->lease_ms,
                       .statement_timeout_ms = cfg->statement_timeout_ms,
                       .lock_timeout_ms = cfg->lock_timeout_ms,
                       .step_ms = cfg->step_ms};
    char why[192];
    if (bf_config_check(&lease, why, sizeof why) != BF_OK)
        return config_fail(diag, cap, bad, "%s: %s", config_origin(cfg, "lease_ms"), why);
    /* the throttle settings as the workers will take them (batch_min <= batch_max ...) */
    bf_throttle *probe = NULL;
    if (bf_throttle_new(&probe) != BF_OK)
        return BF_ERR_NOMEM;
    err = srv_config_throttle(cfg, probe, why, sizeof why);
    bf_throttle_free(probe);
    if (err != BF_OK)
        return config_fail(diag, cap, err, "%s", why);
    return BF_OK;
}

/* ---- the environment ------------------------------------------------------------------------ */

/* An existing regular file without the mode bits in forbidden. */
static bf_err config_check_file(const srv_config *cfg, const char *key, const char *path,
                                mode_t forbidden, const char *forbidden_text, char *diag,
                                size_t cap)
{
    struct stat st;
    const char *origin = config_origin(cfg, key);
    if (stat(path, &st) != 0)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT, "%s: %s: cannot access the file: %s",
                           origin, key, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT, "%s: %s: not a regular file", origin,
                           key);
    if ((st.st_mode & forbidden) != 0)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT, "%s: %s: the file is %s", origin,
                           key, forbidden_text);
    return BF_OK;
}

/* An existing directory not writable by group or others (it holds SQL the daemon runs). */
static bf_err config_check_dir(const srv_config *cfg, const char *key, const char *path, char *diag,
                               size_t cap)
{
    struct stat st;
    const char *origin = config_origin(cfg, key);
    if (stat(path, &st) != 0)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: %s: cannot access the directory: %s", origin, key, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT, "%s: %s: not a directory", origin,
                           key);
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: %s: the directory is writable by group or others (chmod go-w)",
                           origin, key);
    return BF_OK;
}

/* An ipc:// path must be absent in an existing directory, or be a socket. */
static bf_err config_check_ipc_path(const srv_config *cfg, size_t i, const char *path, char *diag,
                                    size_t cap)
{
    const char *origin = config_origin(cfg, "listen");
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (S_ISSOCK(st.st_mode))
            return BF_OK;
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: listen entry %zu: the ipc path exists and is not a socket", origin,
                           i + 1);
    }
    if (errno != ENOENT)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: listen entry %zu: cannot access the ipc path: %s", origin, i + 1,
                           strerror(errno));
    char *copy = strdup(path);
    if (copy == NULL)
        return BF_ERR_NOMEM;
    bool dir_ok = stat(dirname(copy), &st) == 0 && S_ISDIR(st.st_mode);
    free(copy);
    if (!dir_ok)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: listen entry %zu: the directory of the ipc path does not exist",
                           origin, i + 1);
    return BF_OK;
}

/* The host of a listener URL must resolve (an empty host means every address). i: the listen
 * entry, or SIZE_MAX for http_listen. */
static bf_err config_check_host(const srv_config *cfg, size_t i, char *diag, size_t cap)
{
    const char *u = i == SIZE_MAX ? cfg->http_listen : cfg->listen[i];
    const char *rest = u + (strncmp(u, "tcp://", 6) == 0    ? 6
                            : strncmp(u, "http://", 7) == 0 ? 7
                                                            : 10);
    char host[256], port[8];
    const char *p = NULL;
    size_t port_len = 0;
    if (!config_host_port(rest, host, sizeof host, &p, &port_len) || port_len >= sizeof port)
        return BF_ERR_INTERNAL; /* validated by config_check_listen_entry */
    memcpy(port, p, port_len);
    port[port_len] = '\0';
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int rv = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (res != NULL)
        freeaddrinfo(res);
    if (rv != 0 && i == SIZE_MAX)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: http_listen: the host does not resolve: %s",
                           config_origin(cfg, "http_listen"), gai_strerror(rv));
    if (rv != 0)
        return config_fail(diag, cap, BF_ERR_INVALID_ARGUMENT,
                           "%s: listen entry %zu: the host does not resolve: %s",
                           config_origin(cfg, "listen"), i + 1, gai_strerror(rv));
    return BF_OK;
}

bf_err srv_config_check_environment(const srv_config *cfg, char *diag, size_t diag_len)
{
    if (cfg == NULL || (cfg->command != SRV_CMD_RUN && cfg->command != SRV_CMD_CHECK_CONFIG))
        return BF_OK;
    bool tls = false;
    bf_err err = BF_OK;
    for (size_t i = 0; err == BF_OK && i < cfg->n_listen; i++) {
        const char *u = cfg->listen[i];
        if (strncmp(u, "ipc://", 6) == 0) {
            err = config_check_ipc_path(cfg, i, u + 6, diag, diag_len);
        } else {
            tls = tls || strncmp(u, "tls+tcp://", 10) == 0;
            err = config_check_host(cfg, i, diag, diag_len);
        }
    }
    if (err == BF_OK && cfg->http_listen != NULL)
        err = config_check_host(cfg, SIZE_MAX, diag, diag_len);
    if (err == BF_OK && cfg->trusted_keys_file != NULL)
        err = config_check_file(cfg, "trusted_keys_file", cfg->trusted_keys_file, S_IWGRP | S_IWOTH,
                                "writable by group or others (chmod go-w)", diag, diag_len);
    if (err == BF_OK && cfg->revoked_tokens_file != NULL)
        err = config_check_file(cfg, "revoked_tokens_file", cfg->revoked_tokens_file,
                                S_IWGRP | S_IWOTH, "writable by group or others (chmod go-w)", diag,
                                diag_len);
    if (err == BF_OK && cfg->definitions_dir != NULL)
        err = config_check_dir(cfg, "definitions_dir", cfg->definitions_dir, diag, diag_len);
    if (err == BF_OK && tls && cfg->tls_cert_key_file != NULL)
        err = config_check_file(cfg, "tls_cert_key_file", cfg->tls_cert_key_file, S_IRWXG | S_IRWXO,
                                "accessible by group or others: it holds the private key "
                                "(chmod go-rwx)",
                                diag, diag_len);
    if (err == BF_ERR_NOMEM)
        config_fail(diag, diag_len, err, "out of memory");
    return err;
}
