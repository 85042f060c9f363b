/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Small files read whole: sysfs attributes, the release and title of a
 * snapshot's GRUB entry.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fileio.h"

int read_first_line(const char *path, char *buf, size_t size) {
        FILE *f;

        f = fopen(path, "re");
        if (!f)
                return -errno;
        if (!fgets(buf, size, f))
                buf[0] = 0;
        fclose(f);
        buf[strcspn(buf, "\n")] = 0;
        return 0;
}
