/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crash-point.h"

void rb_crash_point(const char *name) {
        const char *at = secure_getenv("ROLLBACK_CRASH_AT"), *cut = secure_getenv("ROLLBACK_CUT_AT");

        if (at && strcmp(at, name) == 0)
                (void) raise(SIGKILL);
        if (cut && strcmp(cut, name) == 0) {
                /* Nothing synced: the host sees the line and kills the machine while we wait. */
                (void) dprintf(STDERR_FILENO, "\nCUT-HERE at %s\n", name);
                for (;;)
                        (void) pause();
        }
}
