/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Booting a snapshot without merging it (docs/boot.md, "Booting a
 * snapshot"): the view such a boot mounts as root, a snapshot with a
 * transient store over the snapshot's device whose writes stay in RAM (a
 * brd RAM disk) and are gone at shutdown, so the snapshot stays exactly as it was
 * and the volume is not written.
 */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "boot-copy.h"
#include "dm.h"
#include "fileio.h"
#include "macro.h"
#include "rollback.h"
#include "stack.h"
#include "tables.h"

static int dir_is_empty(const char *path) {
        _cleanup_closedir_ DIR *d = opendir(path);
        struct dirent *de;

        if (!d)
                return -errno;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                        return 0;
        return 1;
}

/*
 * The RAM disk that keeps the view's writes: brd, loaded for one disk of
 * kib (pages are taken only as they are written).  Not zram: its 4 KiB
 * logical blocks would keep a filesystem of smaller ones (XFS's 512-byte
 * sectors, ext4's 1 KiB blocks) from mounting.  Early boot has no other
 * user of it; *ret: its "major:minor".
 */
static int ramdisk_add(uint64_t kib, char ret[32]) {
        char size[48];
        int r;

        if (access("/sys/module/brd", F_OK) < 0) {
                snprintf(size, sizeof(size), "rd_size=%" PRIu64, kib);
                (void) rb_run((const char *const[]) { "modprobe", "-q", "brd", "rd_nr=1", size, "max_part=0", NULL },
                              true);
        }
        if (access("/sys/block/ram0", F_OK) < 0)
                return -ENOPKG;
        /* brd loaded before us (built in, or by someone else): its first disk only if nobody holds it. */
        r = dir_is_empty("/sys/block/ram0/holders");
        if (r <= 0)
                return r < 0 ? r : -EBUSY;
        return read_first_line("/sys/block/ram0/dev", ret, 32);
}

int rb_view_create(struct pool *p, const char *name) {
        _cleanup_free_ char *snap = NULL, *table = NULL, *view = NULL, *uuid = NULL, *view_table = NULL;
        char snap_devt[32], cow_devt[32];
        const struct snapshot *s;
        struct rbdm_info info;
        struct sysinfo si;
        uint64_t sectors;
        int r;

        s = pool_find_snapshot(p, name);
        if (!s)
                return -ENOENT;
        if (s->state == SNAPSHOT_MERGING)
                return -EINPROGRESS;
        if (s->state != SNAPSHOT_ACTIVE)
                return -ESTALE;
        if ((r = name_snapshot(s, &snap)) < 0 || (r = name_view(s, &view)) < 0 || (r = uuid_view(s, &uuid)) < 0)
                return r;
        r = rbdm_info(view, &info);
        if (r < 0)
                return r;
        /* Made by an earlier run of the hook in this boot. */
        if (info.exists)
                return strcmp(info.uuid, uuid) == 0 && info.live_table ? 0 : -EEXIST;
        r = rbdm_info(snap, &info);
        if (r < 0)
                return r;
        if (!info.exists || !info.live_table)
                return -ENODEV;
        if ((r = rbdm_devt(snap, snap_devt)) < 0 || (r = rbdm_table(snap, false, &table)) < 0)
                return r;
        sectors = rbdm_table_sectors(table);
        if (sectors == 0)
                return -EINVAL;
        /*
         * Half of RAM: brd's pages are never reclaimed, so with all of it the
         * OOM killer would come before the view fills and fails its writes.
         */
        if (sysinfo(&si) < 0)
                return -errno;
        r = ramdisk_add((uint64_t) si.totalram * si.mem_unit / 2 / 1024, cow_devt);
        if (r < 0)
                return r;
        load_module("dm-snapshot");
        r = table_view(sectors, snap_devt, cow_devt, &view_table);
        if (r < 0)
                return r;
        return device_create(view, uuid, view_table, true);
}

int rb_view_booted(char **ret_snapshot) {
        _cleanup_free_ char *name = NULL;
        struct rbdm_info info;
        dev_t devnum;
        size_t n;
        int r;

        if (root_devnum(&devnum) < 0 || major(devnum) == 0)
                return 0;
        r = rbdm_name_from_devnum(devnum, &name);
        if (r < 0)
                return r == -ENODEV ? 0 : r;
        r = rbdm_info(name, &info);
        if (r < 0)
                return r;
        n = strlen(name);
        if (strncmp(info.uuid, VIEW_UUID_PREFIX, strlen(VIEW_UUID_PREFIX)) != 0 ||
            n <= strlen(RB_DM_NAME_PREFIX "-view"))
                return 0;
        if (ret_snapshot) {
                *ret_snapshot = strndup(name + strlen(RB_DM_NAME_PREFIX), n - strlen(RB_DM_NAME_PREFIX "-view"));
                if (!*ret_snapshot)
                        return -ENOMEM;
        }
        return 1;
}
