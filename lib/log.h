/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Logging for the programs; library code returns -errno and does not print. */

#include <errno.h>

enum log_level {
        LOG_LEVEL_ERROR,
        LOG_LEVEL_WARNING,
        LOG_LEVEL_INFO,
        LOG_LEVEL_DEBUG,
};

void log_set_max_level(enum log_level level);
void log_set_program(const char *name);
/* Early boot: also write each message to the kernel log. */
void log_open_kmsg(void);

/* Prints the message; %m means strerror(-error).  Returns -abs(error). */
int log_internal(enum log_level level, int error, const char *format, ...)
        __attribute__((format(printf, 3, 4)));

#define log_error_errno(error, ...) log_internal(LOG_LEVEL_ERROR, (error), __VA_ARGS__)
#define log_warning_errno(error, ...) log_internal(LOG_LEVEL_WARNING, (error), __VA_ARGS__)
#define log_error(...) log_internal(LOG_LEVEL_ERROR, 0, __VA_ARGS__)
#define log_warning(...) log_internal(LOG_LEVEL_WARNING, 0, __VA_ARGS__)
#define log_info(...) log_internal(LOG_LEVEL_INFO, 0, __VA_ARGS__)
#define log_debug(...) log_internal(LOG_LEVEL_DEBUG, 0, __VA_ARGS__)
