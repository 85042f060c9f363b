/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The mount count of an ext2/3/4 filesystem, as evidence of read-write mounts
 * made while the pool was not there to arm the snapshots.
 */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/sysmacros.h>

#include "dm.h"
#include "evidence.h"
#include "macro.h"

#define EXT_SUPERBLOCK_OFFSET 1024
#define EXT_MNT_COUNT 0x34      /* le16, in the superblock */
#define EXT_MAGIC_AT 0x38       /* le16 */
#define EXT_MAGIC 0xef53

static unsigned le16_at(const uint8_t *p) {
        return p[0] | (unsigned) p[1] << 8;
}

int ext_mount_count(int fd, unsigned *ret) {
        uint8_t sb[EXT_MAGIC_AT + 2];
        ssize_t n;

        n = pread(fd, sb, sizeof(sb), EXT_SUPERBLOCK_OFFSET);
        if (n < 0)
                return -errno;
        if ((size_t) n < sizeof(sb) || le16_at(sb + EXT_MAGIC_AT) != EXT_MAGIC)
                return -ENOMEDIUM;
        *ret = le16_at(sb + EXT_MNT_COUNT);
        return 0;
}

int devnum_mount_count(dev_t devnum, unsigned *ret) {
        _cleanup_close_ int fd = -1;
        char link[PATH_MAX], path[PATH_MAX];
        const char *kname;
        ssize_t n;

        /* The devtmpfs node ("dm-3"): it is there whether or not udev has made its links yet. */
        snprintf(path, sizeof(path), "/sys/dev/block/%u:%u", major(devnum), minor(devnum));
        n = readlink(path, link, sizeof(link) - 1);
        if (n < 0)
                return -errno;
        link[n] = 0;
        kname = strrchr(link, '/');
        kname = kname ? kname + 1 : link;
        if (rbdm_blocks_reads(kname))
                return -EAGAIN;
        if (strlen(kname) + strlen("/dev/") >= sizeof(path))
                return -ENAMETOOLONG;
        fd = open(strcat(strcpy(path, "/dev/"), kname), O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        return ext_mount_count(fd, ret);
}

int devnum_mounted_rw(dev_t devnum) {
        _cleanup_free_ char *line = NULL;
        size_t size = 0;
        FILE *f;
        int r = 0;

        f = fopen("/proc/self/mountinfo", "re");
        if (!f)
                return -errno;
        /* "id parent major:minor root mountpoint options [optional...] - fstype source superoptions" */
        while (getline(&line, &size, f) > 0) {
                unsigned ma, mi;
                const char *super;
                char *sep;

                if (sscanf(line, "%*u %*u %u:%u", &ma, &mi) != 2 || makedev(ma, mi) != devnum)
                        continue;
                sep = strstr(line, " - ");
                if (!sep)
                        continue;
                /* Skip fstype and source to the superblock's options: a bind mount may be ro on a rw filesystem. */
                super = sep + 3;
                for (int k = 0; k < 2 && super; k++) {
                        super = strchr(super, ' ');
                        if (super)
                                super++;
                }
                if (super && strncmp(super, "rw", 2) == 0 && strchr(",\n", super[2])) {
                        r = 1;
                        break;
                }
        }
        fclose(f);
        return r;
}

int volume_record_mount_count(struct volume *v, dev_t devnum) {
        bool known = false;
        uint64_t max = 0;
        unsigned count;
        int r;

        r = devnum_mount_count(devnum, &count);
        /* Suspended for a moment (LVM at work): the next refresh reads it. */
        if (r == -EAGAIN)
                return 0;
        if (r >= 0) {
                r = devnum_mounted_rw(devnum);
                /* Not knowing whether it is mounted, count the mount that may come. */
                known = true;
                max = count + (r > 0 ? 0 : 1);
        }
        if (known == v->mount_count_known && max == v->mount_count_max)
                return 0;
        v->mount_count_known = known;
        v->mount_count_max = max;
        return 1;
}
