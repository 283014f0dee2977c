/*
 * watch_impl.h - what the old-writer watchdog's files share inside the engine (watch.c installs
 * and removes the trigger, watch_heal.c reads a SET list for heal, watch_report.c reads what the
 * trigger counted and runs the preflight's probe). Not installed, not part of the engine's API.
 */
#ifndef BUZZ_ENGINE_WATCH_IMPL_H
#define BUZZ_ENGINE_WATCH_IMPL_H

#include <stddef.h>

#include "internal.h"

#define BF_HEAL_MAX_COLUMNS 32

/* One "column = expression" of a SET list; expr points into the definition's text. */
typedef struct bf_heal_item {
    char column[64];
    const char *expr;
    size_t expr_len;
} bf_heal_item;

/* Length of the quoted string or identifier starting at s (quote q), or 0 when unterminated. */
size_t bf__heal_quoted(const char *s, char q);
/* BF_OK when heal can serve d, its SET list in items[0..*nitems) (at most
 * BF_HEAL_MAX_COLUMNS); else BF_ERR_DEFINITION with the reason in the engine's diagnostic. */
bf_err bf__heal_check(bf_engine *e, const bf_definition *d, bf_heal_item *items, int *nitems);

/* Install d's watch in mode, counted under key (the stable ID, or a probe's key), in the
 * caller's transaction. */
bf_err bf__watch_install_key(bf_engine *e, const bf_definition *d, bf_watch_mode mode,
                             const char *key);
/* In the caller's transaction: drop what the watch row of key names; *removed: it was there. */
bf_err bf__watch_drop(bf_engine *e, const char *key, bool *removed);

#endif /* BUZZ_ENGINE_WATCH_IMPL_H */
