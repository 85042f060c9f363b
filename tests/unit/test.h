/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

#include <stdio.h>
#include <stdlib.h>

#define CHECK(expr)                                                             \
        do {                                                                    \
                if (!(expr)) {                                                  \
                        fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #expr); \
                        exit(1);                                                \
                }                                                               \
        } while (0)

#define CHECK_R(expr)                                                           \
        do {                                                                    \
                int _r = (expr);                                                \
                if (_r < 0) {                                                   \
                        fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #expr, _r); \
                        exit(1);                                                \
                }                                                               \
        } while (0)
