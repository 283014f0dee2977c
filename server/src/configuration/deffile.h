/*
 * deffile.h - definition files: backfill definitions written as plain text instead of C, one per
 * file, in the definitions directory of buzz-backfilld (definitions_dir). The format is in
 * docs/definitions.md; in short:
 *
 *   # a comment
 *   id = relay.events.d_tag_v1
 *   table = relay.events
 *   key = id uuid                       (or: created_at timestamptz, event_id bytea)
 *   batch_size = 1000
 *   needs_repair = t.d_tag IS NULL
 *   update_set = d_tag = t.tags->0->>1
 *   mutate = <<SQL                      (a value over several lines, up to a line "SQL")
 *   UPDATE relay.events t SET ... FROM bf_batch b WHERE t.id = b.id
 *   SQL
 *
 * Every field of bf_definition's declarative form has a line of the same name (retry.* for the
 * retry policy). The SQL callback form: `mutate` (repeatable: statements run in file order),
 * `invariant` (a count of rows in bf_batch the mutation cannot repair: more than 0 blocks the
 * backfill before it writes) and `validate` (a count of bad rows in bf_batch). They become C
 * callbacks that run each statement through bf_txn_exec()/bf_txn_query_int(), so the engine's
 * transaction, fences and batch bound apply to them exactly as to a C module's.
 *
 * Ownership: a srv_deffile owns its bf_definition and every string it points to; the
 * definition's callbacks take the srv_deffile as arg. A srv_defdir owns the files it loaded and
 * must outlive the registry they were added to. Errors name the file, the line and the field:
 * "/etc/buzz-backfill/definitions.d/d_tag.def:7: batch_size: must be 1..100000".
 *
 * Thread safety: parse and load before threads start; a loaded srv_deffile is read-only and its
 * callbacks are reentrant. srv_defdir_reload() runs on one thread (the signal thread) and is the
 * only writer of the registry while sessions read it.
 */
#ifndef BUZZ_SRV_DEFFILE_H
#define BUZZ_SRV_DEFFILE_H

#include <stdbool.h>
#include <stddef.h>

#include "buzz/definition.h"
#include <sys/stat.h>

#include "buzz/engine.h"

#define SRV_DEFFILE_SUFFIX ".def"
#define SRV_DEFFILE_MAX    (1024 * 1024) /* bytes in one definition file */

typedef struct srv_deffile srv_deffile;
typedef struct srv_defdir srv_defdir;

/* Parse the text of one definition file; name (its path) is used in messages only. On error:
 * BF_ERR_DEFINITION (BF_ERR_NOMEM) with "<name>:<line>: <field>: <reason>" in diag. */
bf_err srv_deffile_parse(srv_deffile **out, const char *name, const char *text, size_t len,
                         char *diag, size_t diag_len);
/* Read (a regular file not writable by group or others, at most SRV_DEFFILE_MAX bytes) and
 * parse one definition file. */
bf_err srv_deffile_load(srv_deffile **out, const char *path, char *diag, size_t diag_len);
void srv_deffile_free(srv_deffile *f);

const bf_definition *srv_deffile_definition(const srv_deffile *f);
const char *srv_deffile_path(const srv_deffile *f);
/* The line of the file's id field (0: none). */
int srv_deffile_id_line(const srv_deffile *f);
/* A file (dir false) or directory that may hold SQL the daemon runs: of that type, and not
 * writable by group or others; BF_ERR_DEFINITION with the reason in diag otherwise. */
bf_err srv_deffile_check_mode(const char *path, const struct stat *st, bool dir, char *diag,
                              size_t cap);
/* The first field whose value differs between a and b (a line of a file's text that is not a
 * field's value, such as a comment, is no difference), or NULL when they define the same. */
const char *srv_deffile_differs(const srv_deffile *a, const srv_deffile *b);

/*
 * Read every "*.def" file of dir, in name order, and parse it. The directory and its files must
 * not be writable by group or others (they hold SQL the daemon runs). An error names the file
 * (and the line and field); nothing is loaded then.
 */
bf_err srv_defdir_read(srv_defdir **out, const char *dir, char *diag, size_t diag_len);
/*
 * Add the definitions read to reg, refusing a stable ID that another file or a module already
 * registered. On error reg may hold some of them: discard it (free it before d). d must outlive
 * reg either way.
 */
bf_err srv_defdir_register(srv_defdir *d, bf_registry *reg, char *diag, size_t diag_len);
size_t srv_defdir_count(const srv_defdir *d);

/*
 * SIGHUP: read the directory again. A new file joins the running daemon: parsed, compiled with
 * bf_registry_add's checks, registered in PostgreSQL with bf_register() through a short-lived
 * engine session opened with engine_cfg (its fences apply: a row of the same stable ID stored
 * by a materially different definition refuses the file), then added to the registry
 * srv_defdir_register() filled, which sessions may be reading (bf_registry is append-only), and
 * logged as definition.joined. A file refused at any step stays out (config.reload_failed names
 * it and why; a later SIGHUP tries it again) and the others go on. A file changed under a
 * loaded stable ID is refused (a material change needs a new ID; the loaded definition stays,
 * as a changed module would until a restart); a removed file's definition stays registered.
 * In automatic mode (auto_start) a required definition that joined is started, as startup
 * starts the pending required ones. Returns the number of files refused. d may be NULL (no
 * directory configured); engine_cfg NULL refuses every new file (no database).
 */
int srv_defdir_reload(srv_defdir *d, const bf_config *engine_cfg, bool auto_start);
void srv_defdir_free(srv_defdir *d);

#endif
