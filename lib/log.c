/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "log.h"

static enum log_level max_level = LOG_LEVEL_INFO;
static const char *program = "rollback";

void log_set_max_level(enum log_level level) {
        max_level = level;
}

void log_set_program(const char *name) {
        program = name;
}

int log_internal(enum log_level level, int error, const char *format, ...) {
        va_list ap;

        if (error < 0)
                error = -error;
        if (level <= max_level) {
                /* %m in the format must mean our error, not whatever errno is now. */
                errno = error;
                fprintf(stderr, "%s: ", program);
                va_start(ap, format);
                vfprintf(stderr, format, ap);
                va_end(ap);
                fputc('\n', stderr);
        }
        return -error;
}
