/*
 * config_impl.h - what the parts of the configuration share (config.c: loading; config_keys.c:
 * the key table; config_check.c: validation per command and the environment checks;
 * config_print.c: check-config and --help). Private to them.
 */
#ifndef BUZZ_SRV_CONFIG_IMPL_H
#define BUZZ_SRV_CONFIG_IMPL_H

#include <stddef.h>

#include "config.h"

#define CONFIG_ENV_PREFIX "BUZZ_BACKFILL_"
#define CONFIG_LINE_MAX   65536
#define CONFIG_OPT_BASE   1000

typedef enum key_type {
    KT_STRING,
    KT_LIST,
    KT_INT,
    KT_BOOL,
    KT_LEVEL,
    KT_MODE,
    KT_FORMAT
} key_type;

typedef struct key_def {
    const char *name;
    key_type type;
    const char *def; /* default as text; NULL = not set */
    int min, max;    /* KT_INT */
    const char *metavar;
    const char *help;
    size_t off;       /* field in srv_config */
    size_t count_off; /* KT_LIST: the size_t count field */
} key_def;

#define SECRET_KEY "database_url"
#define NKEYS      SRV_CONFIG_KEYS

/* Every key: name, type, default, bounds, help (config_keys.c). */
extern const key_def config_keys[SRV_CONFIG_KEYS];

/* A key that may also be set per definition: one of the throttle settings. */
bool config_key_per_definition(const key_def *d);

/* The position of name in config_keys; -1 for an unknown name. */
int config_key_index(const char *name);

/* Format into diag (truncated with "..."), return err. */
bf_err config_fail(char *diag, size_t cap, bf_err err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* BUZZ_BACKFILL_<KEY> and --<key> of a key's name. */
void config_env_name(const char *key, char *out, size_t cap);
void config_flag_name(const char *key, char *out, size_t cap);

/* The settings of cfg make sense together for its command (config_check.c). */
bf_err config_validate(const srv_config *cfg, char *diag, size_t cap);

/* Where the effective value of key came from ("file x.conf:3", "flag --listen", "default"). */
const char *config_origin(const srv_config *cfg, const char *key);

#endif /* BUZZ_SRV_CONFIG_IMPL_H */
