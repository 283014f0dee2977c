/*
 * hold_close.c - an LD_PRELOAD stand-in for nng 1.5.2's wedged pipe reaper: nng_close() never
 * returns. It first creates the file named by BUZZ_TEST_HOLD_MARK, so a test knows the hold
 * was reached. Used by test_buzzctl_fixes test_close_is_bounded (a child buzzctl only: the
 * test process itself never loads it).
 */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <nng/nng.h>

int nng_close(nng_socket s)
{
    (void)s;
    const char *mark = getenv("BUZZ_TEST_HOLD_MARK");
    if (mark != NULL) {
        int fd = open(mark, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0)
            close(fd);
    }
    for (;;)
        pause();
}
