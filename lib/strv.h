/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

#include <errno.h>
#include <string.h>

/*
 * One string table per enum is the single source of the words used in logs,
 * JSON and on the command line.
 */
#define DEFINE_STRING_TABLE(name, type, max)                            \
        const char *name##_to_string(type v) {                          \
                if ((int) v < 0 || (int) v >= (max))                    \
                        return NULL;                                    \
                return name##_table[v];                                 \
        }                                                               \
        type name##_from_string(const char *s) {                        \
                if (!s)                                                 \
                        return (type) -EINVAL;                          \
                for (int i = 0; i < (max); i++)                         \
                        if (name##_table[i] && strcmp(name##_table[i], s) == 0) \
                                return (type) i;                        \
                return (type) -EINVAL;                                  \
        }
