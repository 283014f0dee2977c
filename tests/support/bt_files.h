/*
 * bt_files.h - the files variant of the conformance suites (prefix bt_files_): definition files
 * (docs/definitions.md, parsed by the daemon's own parser, server/src/configuration/deffile.c)
 * standing in for the suites' C definitions.
 *
 * BUZZ_CONFORMANCE_DEFINITIONS=files switches it on (ctest runs every conformance suite that
 * defines backfills a second time so, as <suite>_files). Then bt_registry() and the daemons of
 * bd_start() take, for each C definition, the file tests/conformance/definitions/<id>.def
 * instead, after checking that it is the same definition: every field of bf_definition
 * compares equal (the table, the key's columns and types, the four SQL fragments and the
 * callback flags are what the engine's definition digest is made of, compile.c
 * definition_digest; the metadata, batch size, validation chunk, retry policy, required and
 * watch_writers are compared too), and the file's fields and mutate statements are those of a file
 * written from the C definition (srv_deffile_differs, the comparison SIGHUP uses). A drift between
 * the two fails the suite before it runs, naming the field.
 *
 * A C definition whose callbacks are C (anything but bt_sql_mutate: an injected fault, a
 * verdict chosen by the test, a diagnostic no file can state) stays C and must have no file;
 * one whose mutation is bt_sql_mutate (statements only) or that is declarative must have one.
 *
 * Not thread-safe; stand-ins are loaded once per process and kept until it exits. Never calls
 * cmocka: usable in forked children.
 */
#ifndef BUZZ_TEST_BT_FILES_H
#define BUZZ_TEST_BT_FILES_H

#include <stdbool.h>
#include <stddef.h>

#include "buzz/definition.h"

/* The switch: true when BUZZ_CONFORMANCE_DEFINITIONS is "files"; false when it is unset or
 * empty. Any other value is an error (BF_ERR_INVALID_ARGUMENT, reason in why). */
bf_err bt_files_mode(bool *on, char *why, size_t why_len);

/* True when def stays C: a callback other than bt_sql_mutate. */
bool bt_files_stays_c(const bf_definition *def);

/*
 * The definition to run for def: def itself when it stays C (and no file claims its ID), else
 * the file definition of its ID, checked to be the same definition. revision, when not NULL,
 * replaces the file's informational revision (as BUZZ_TEST_REVISION replaces the test module's)
 * before the check. On error (no file, a file for a definition that stays C, a file that does
 * not parse, a field that differs): BF_ERR_DEFINITION with the file and the field in why.
 */
bf_err bt_files_standin(const bf_definition **out, const bf_definition *def, const char *revision,
                        char *why, size_t why_len);

/* Write the text of def's stand-in (bt_files_standin with the same revision first) to
 * dir/<id>.def, mode 0600, for a daemon's definitions_dir. */
bf_err bt_files_write(const bf_definition *def, const char *revision, const char *dir, char *why,
                      size_t why_len);

#endif
