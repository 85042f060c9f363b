/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <stdarg.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

static enum log_level max_level = LOG_LEVEL_INFO;
static int kmsg_fd = -1;
static const char *program = "rollback";
static int to_journal = -1;     /* -1: not looked at yet */

/* syslog priorities: err, warning, info, debug */
static const int syslog_priority[] = { 3, 4, 6, 7 };

/*
 * Under systemd stderr is a stream to the journal (JOURNAL_STREAM names it):
 * a "<N>" prefix gives each line its priority there, as sd-daemon(3) says.
 */
static bool stderr_is_journal(void) {
        unsigned long long dev, ino;
        const char *e;
        struct stat st;

        if (to_journal >= 0)
                return to_journal;
        e = getenv("JOURNAL_STREAM");
        to_journal = e && sscanf(e, "%llu:%llu", &dev, &ino) == 2 && fstat(STDERR_FILENO, &st) == 0 &&
                     st.st_dev == dev && st.st_ino == ino;
        return to_journal;
}

void log_set_max_level(enum log_level level) {
        max_level = level;
}

void log_set_program(const char *name) {
        program = name;
}

void log_open_kmsg(void) {
        if (kmsg_fd < 0)
                kmsg_fd = open("/dev/kmsg", O_WRONLY | O_CLOEXEC | O_NOCTTY);
}

int log_internal(enum log_level level, int error, const char *format, ...) {
        va_list ap;

        if (error < 0)
                error = -error;
        if (level <= max_level) {
                /* %m in the format must mean our error, not whatever errno is now. */
                errno = error;
                if (stderr_is_journal())
                        fprintf(stderr, "<%d>", syslog_priority[level]);
                else
                        fprintf(stderr, "%s: ", program);
                va_start(ap, format);
                vfprintf(stderr, format, ap);
                va_end(ap);
                fputc('\n', stderr);
                if (kmsg_fd >= 0) {
                        char buf[1024];
                        int n;

                        n = snprintf(buf, sizeof(buf), "<%d>%s: ", syslog_priority[level], program);
                        errno = error;
                        va_start(ap, format);
                        vsnprintf(buf + n, sizeof(buf) - n, format, ap);
                        va_end(ap);
                        (void) !write(kmsg_fd, buf, strlen(buf));
                }
        }
        return -error;
}
