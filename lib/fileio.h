/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

#include <stddef.h>

/* The first line of the file at path, without its newline, cut to size - 1 bytes ("" when empty). */
int read_first_line(const char *path, char *buf, size_t size);
