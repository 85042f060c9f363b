/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The automatic revert of an upgrade whose trial boots failed, in early
 * boot.  GRUB has started the upgrade's kernel already, so the revert is
 * made as `rollbackctl revert` makes it on a running system, with the volume
 * and its /boot mounted aside: /boot gets the pre-upgrade kernel back, and
 * the reboot that follows starts it into the merge.
 */
#include <blkid.h>
#include <mntent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include "macro.h"
#include "rollback.h"

static int mount_probed(const char *device, const char *dir, const char *type) {
        _cleanup_free_ char *probed = NULL;

        if (!type || strcmp(type, "auto") == 0) {
                probed = blkid_get_tag_value(NULL, "TYPE", device);
                if (!probed)
                        return -EMEDIUMTYPE;
                type = probed;
        }
        return mount(device, dir, type, 0, NULL) < 0 ? -errno : 0;
}

/* UUID=, LABEL=, PARTUUID= or a path, as mount(8) takes it: udev's links first, then every device probed. */
static char *resolve_spec(const char *spec) {
        blkid_cache cache = NULL;
        char *device = blkid_evaluate_spec(spec, NULL);

        /* Early boot may have no /dev/disk links yet, nor a cache file. */
        if (device || blkid_get_cache(&cache, "/dev/null") < 0)
                return device;
        if (blkid_probe_all(cache) >= 0)
                device = blkid_evaluate_spec(spec, &cache);
        blkid_put_cache(cache);
        return device;
}

/* The device and type of the volume's own /boot filesystem, from its fstab: 0 when /boot is a directory. */
static int boot_from_fstab(const char *root, char **ret_device, char **ret_type) {
        _cleanup_free_ char *fstab = NULL;
        struct mntent *m;
        FILE *f;
        int r = 0;

        if (asprintf(&fstab, "%s/etc/fstab", root) < 0)
                return -ENOMEM;
        f = setmntent(fstab, "re");
        if (!f)
                return errno == ENOENT ? 0 : -errno;
        while ((m = getmntent(f))) {
                if (strcmp(m->mnt_dir, "/boot") != 0)
                        continue;
                *ret_device = resolve_spec(m->mnt_fsname);
                *ret_type = strdup(m->mnt_type);
                r = *ret_device ? 1 : -ENODEV;
                if (r > 0 && !*ret_type)
                        r = -ENOMEM;
                break;
        }
        endmntent(f);
        return r;
}

int rb_auto_revert(struct pool *p, const char *volume, const char *dir, char **ret_snapshot) {
        _cleanup_free_ char *device = NULL, *boot = NULL, *boot_device = NULL, *boot_type = NULL, *name = NULL;
        bool boot_mounted = false;
        struct volume *v;
        uint64_t boots;
        int r, k;

        v = pool_find_volume(p, volume);
        if (!v || !v->trial)
                return -ENOENT;
        name = strdup(v->trial);
        boots = v->trial_boots;
        if (!name || asprintf(&device, "/dev/mapper/%s", volume) < 0 || asprintf(&boot, "%s/boot", dir) < 0)
                return -ENOMEM;
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return -errno;
        r = mount_probed(device, dir, NULL);
        if (r < 0)
                return r;
        r = boot_from_fstab(dir, &boot_device, &boot_type);
        if (r > 0) {
                r = mount_probed(boot_device, boot, boot_type);
                boot_mounted = r >= 0;
        }
        if (r >= 0) {
                /* Recorded by the revert's own commit, with it. */
                v->auto_reverted_boots = boots;
                r = rb_revert(p, name, false, false);
                v = pool_find_volume(p, volume);
                if (r < 0 && v)
                        v->auto_reverted_boots = 0;
        }
        /* A root that stays mounted would be mounted twice this boot: its snapshots would count it as untracked. */
        if (boot_mounted && umount(boot) < 0 && r >= 0)
                r = -errno;
        k = umount(dir) < 0 ? -errno : 0;
        if (r < 0)
                return r;
        if (k < 0)
                return k;
        if (ret_snapshot)
                *ret_snapshot = TAKE_PTR(name);
        return 0;
}
