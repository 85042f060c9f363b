/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _fallthrough_ __attribute__((__fallthrough__))
#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))
#define DIV_ROUND_UP(n, d) (((n) + (d) - 1) / (d))

/* Hands ownership out of a _cleanup_ variable. */
#define TAKE_PTR(p)                             \
        ({                                      \
                typeof(p) _p = (p);             \
                (p) = NULL;                     \
                _p;                             \
        })

#define TAKE_FD(fd)                             \
        ({                                      \
                int _fd = (fd);                 \
                (fd) = -1;                      \
                _fd;                            \
        })

static inline void freep(void *p) {
        free(*(void **) p);
}
#define _cleanup_free_ _cleanup_(freep)

static inline void closep(int *fd) {
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
        }
}
#define _cleanup_close_ _cleanup_(closep)

static inline void closedirp(DIR **d) {
        if (*d)
                closedir(*d);
}
#define _cleanup_closedir_ _cleanup_(closedirp)

static inline uint64_t now_usec(clockid_t clock) {
        struct timespec ts;

        clock_gettime(clock, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A whole decimal number, nothing before or after it. */
static inline int safe_atou(const char *s, unsigned *ret) {
        char *end;
        unsigned long v;

        errno = 0;
        v = strtoul(s, &end, 10);
        if (errno || end == s || *end || s[0] == '-' || v > UINT_MAX)
                return -EINVAL;
        *ret = (unsigned) v;
        return 0;
}
