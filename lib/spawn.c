/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Running another program (modprobe, update-grub, grub-reboot) and waiting
 * for it; and the keepalive that long work calls meanwhile.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "keepalive.h"
#include "rollback.h"

static void (*keepalive)(void);

void rb_set_keepalive(void (*fn)(void)) {
        keepalive = fn;
}

void rb_keepalive(void) {
        if (keepalive)
                keepalive();
}

int rb_run(const char *const argv[], bool quiet) {
        int status;
        pid_t pid;

        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                if (quiet) {
                        int null = open("/dev/null", O_RDWR | O_CLOEXEC);

                        if (null >= 0) {
                                dup2(null, STDIN_FILENO);
                                dup2(null, STDOUT_FILENO);
                                dup2(null, STDERR_FILENO);
                        }
                }
                execvp(argv[0], (char *const *) argv);
                _exit(127);
        }
        for (;;) {
                pid_t w = waitpid(pid, &status, WNOHANG);

                if (w == pid)
                        break;
                if (w < 0 && errno != EINTR)
                        return -errno;
                rb_keepalive();
                (void) usleep(100 * 1000);
        }
        if (!WIFEXITED(status))
                return -EINTR;
        return WEXITSTATUS(status) == 127 ? -ENOENT : WEXITSTATUS(status);
}
