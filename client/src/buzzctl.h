/*
 * buzzctl.h - buzzctl's commands, the entries of main's command table (buzzctl.c), each
 * defined in its command file: buzzctl_cmds.c (list, get, controls), buzzctl_ops.c (validate,
 * audit, whoami, ready), buzzctl_dash.c (dash), buzzctl_preflight.c (preflight),
 * buzzctl_token.c (token). The command files build on buzzctl_common.h and buzzctl_json.h;
 * only buzzctl.c includes this header for what it calls, so nothing points back at main.
 */
#ifndef BUZZ_BUZZCTL_H
#define BUZZ_BUZZCTL_H

#include "buzzctl_common.h"

/* Each parses its own options from argv[1] on (argv[0] is the command's name) and returns
 * the exit code. */
int ctl_cmd_list(ctl *c, int argc, char **argv);
int ctl_cmd_get(ctl *c, int argc, char **argv);
int ctl_cmd_control(ctl *c, int argc, char **argv, bfc_action action);
int ctl_cmd_validate(ctl *c, int argc, char **argv);
int ctl_cmd_audit(ctl *c, int argc, char **argv);
int ctl_cmd_whoami(ctl *c, int argc, char **argv);
int ctl_cmd_ready(ctl *c, int argc, char **argv);
int ctl_cmd_dash(ctl *c, int argc, char **argv);
int ctl_cmd_preflight(ctl *c, int argc, char **argv);
int ctl_cmd_watch(ctl *c, int argc, char **argv);
/* `buzzctl token ...`, self-contained: argv[0] == "token". */
int buzzctl_token_main(int argc, char **argv);

#endif
