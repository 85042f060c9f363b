/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Finding things: the lock, the pool by its identity, the volume by name or
 * by what is mounted at /.
 */
#include <blkid/blkid.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "dm.h"
#include "macro.h"
#include "rollback.h"
#include "strv.h"
#include "tables.h"

int rb_lock(int *ret_fd) {
        int fd;

        fd = open(RB_LOCK_PATH, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        if (flock(fd, LOCK_EX) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        *ret_fd = fd;
        return 0;
}

static bool is_our_device(const char *kname) {
        char uuid[160];

        return rbdm_sysfs(kname, "uuid", uuid, sizeof(uuid)) >= 0 &&
               strncmp(uuid, RB_DM_UUID_PREFIX, strlen(RB_DM_UUID_PREFIX)) == 0;
}

int rb_pool_recorded(uint8_t ret_uuid[16]) {
        _cleanup_free_ char *line = NULL;
        size_t n = 0;
        FILE *f;
        int r;

        f = fopen(RB_POOL_ID_PATH, "re");
        if (!f)
                return -errno;
        r = getline(&line, &n, f) < 0 ? -EINVAL : 0;
        fclose(f);
        if (r < 0)
                return r;
        line[strcspn(line, "\n")] = 0;
        return pool_uuid_from_string(line, ret_uuid);
}

int rb_pool_record(const uint8_t uuid[16]) {
        char text[POOL_UUID_STRING_MAX], tmp[] = RB_POOL_ID_PATH ".XXXXXX";
        _cleanup_close_ int fd = -1;
        int r;

        if (mkdir(RB_POOL_ID_DIR, 0755) < 0 && errno != EEXIST)
                return -errno;
        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
                return -errno;
        pool_uuid_to_string(uuid, text);
        r = dprintf(fd, "%s\n", text) < 0 || fchmod(fd, 0644) < 0 || fsync(fd) < 0 ? -errno : 0;
        if (r == 0 && rename(tmp, RB_POOL_ID_PATH) < 0)
                r = -errno;
        if (r < 0)
                (void) unlink(tmp);
        return r;
}

int rb_device_signature(int fd, char **ret_type) {
        const char *type = NULL;
        blkid_probe pr;
        int r;

        pr = blkid_new_probe();
        if (!pr)
                return -ENOMEM;
        r = blkid_probe_set_device(pr, fd, 0, 0);
        if (r < 0) {
                blkid_free_probe(pr);
                return -EIO;
        }
        blkid_probe_enable_superblocks(pr, true);
        blkid_probe_set_superblocks_flags(pr, BLKID_SUBLKS_TYPE);
        blkid_probe_enable_partitions(pr, true);
        blkid_probe_set_partitions_flags(pr, BLKID_PARTS_MAGIC);
        r = blkid_do_safeprobe(pr);
        if (r == 0 && blkid_probe_lookup_value(pr, "TYPE", &type, NULL) < 0 &&
            blkid_probe_lookup_value(pr, "PTTYPE", &type, NULL) < 0)
                type = "unknown";
        /* -2: several signatures at once, which is a signature too. */
        if (r == -2)
                type = "ambivalent";
        if (type) {
                *ret_type = strdup(type);
                blkid_free_probe(pr);
                return *ret_type ? 1 : -ENOMEM;
        }
        blkid_free_probe(pr);
        return r < 0 ? -EIO : 0;
}

/* A block device that may hold a pool: not a loop, CD, RAM disk, one of our own, or one that blocks reads. */
static bool pool_candidate(const char *kname) {
        return kname[0] != '.' && strncmp(kname, "loop", 4) != 0 && strncmp(kname, "sr", 2) != 0 &&
               strncmp(kname, "ram", 3) != 0 && !is_our_device(kname) && !rbdm_blocks_reads(kname);
}

int rb_pool_find(const uint8_t *want, char **ret_path, unsigned *ret_foreign) {
        _cleanup_free_ char *found = NULL;
        uint8_t recorded[16];
        unsigned matches = 0, foreign = 0;
        struct dirent *de;
        DIR *d;

        if (!want && rb_pool_recorded(recorded) >= 0)
                want = recorded;
        d = opendir("/sys/class/block");
        if (!d)
                return -errno;
        while ((de = readdir(d))) {
                char path[PATH_MAX];
                uint8_t uuid[16];
                int fd, r;

                if (!pool_candidate(de->d_name))
                        continue;
                snprintf(path, sizeof(path), "/dev/%s", de->d_name);
                fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
                if (fd < 0)
                        continue;
                r = pool_probe(fd, uuid);
                close(fd);
                if (r == -ENOMEDIUM)
                        continue;
                if (want && (r < 0 || memcmp(uuid, want, 16) != 0)) {
                        foreign++;
                        continue;
                }
                matches++;
                free(found);
                found = strdup(path);
                if (!found) {
                        closedir(d);
                        return -ENOMEM;
                }
        }
        closedir(d);
        if (ret_foreign)
                *ret_foreign = foreign;
        if (matches == 0)
                return want ? -ENXIO : -ENOMEDIUM;
        /* Without an identity any of them could be the foreign one; with one, a clone. */
        if (matches > 1)
                return -ENOTUNIQ;
        *ret_path = TAKE_PTR(found);
        return 0;
}

int rb_pool_open(const char *path, struct pool **ret) {
        _cleanup_free_ char *found = NULL;
        uint8_t uuid[16];
        unsigned foreign = 0;
        struct pool *p;
        int r;

        if (!path || strncmp(path, "UUID=", 5) == 0) {
                if (path && pool_uuid_from_string(path + 5, uuid) < 0)
                        return -EINVAL;
                r = rb_pool_find(path ? uuid : NULL, &found, &foreign);
                if (r < 0)
                        return r;
                path = found;
        }
        r = pool_open(path, true, &p);
        if (r < 0)
                return r;
        p->foreign = foreign;
        *ret = p;
        return 0;
}

int rb_pool_reload(struct pool *p) {
        struct pool *fresh;
        int r;

        r = pool_load(p->fd, &fresh);
        if (r < 0)
                return r;
        pool_meta_done(&p->meta);
        p->meta = fresh->meta;
        p->geo = fresh->geo;
        p->seq = fresh->seq;
        p->slot = fresh->slot;
        fresh->meta = (struct pool_meta) {};
        pool_free(fresh);
        return 0;
}

int rb_pool_open_locked(const char *path, struct pool **ret_pool, int *ret_lock) {
        _cleanup_close_ int lock = -1;
        int r;

        r = rb_lock(&lock);
        if (r < 0)
                return r;
        r = rb_pool_open(path, ret_pool);
        if (r < 0)
                return r;
        *ret_lock = TAKE_FD(lock);
        return 0;
}

/* The device of the filesystem mounted at /, from the last matching mountinfo line. */
int root_devnum(dev_t *ret) {
        FILE *f;
        char line[4096];
        unsigned ma, mi;
        bool found = false;

        f = fopen("/proc/self/mountinfo", "re");
        if (!f)
                return -errno;
        while (fgets(line, sizeof(line), f)) {
                char root[PATH_MAX], mnt[PATH_MAX];

                if (sscanf(line, "%*u %*u %u:%u %4095s %4095s", &ma, &mi, root, mnt) == 4 &&
                    strcmp(mnt, "/") == 0) {
                        *ret = makedev(ma, mi);
                        found = true;
                }
        }
        fclose(f);
        return found ? 0 : -ENOENT;
}

int rb_volume_resolve(const char *arg, char **ret_name) {
        _cleanup_free_ char *name = NULL;
        struct rbdm_info info;
        dev_t devnum;
        int r;

        if (!arg || arg[0] == '/') {
                if (arg) {
                        struct stat st;

                        if (stat(arg, &st) < 0)
                                return -errno;
                        if (!S_ISBLK(st.st_mode))
                                return -ENOTBLK;
                        devnum = st.st_rdev;
                } else {
                        r = root_devnum(&devnum);
                        if (r < 0)
                                return r;
                }
                /* Not a block device's number (tmpfs, overlayfs; btrfs always says 0:N): give the volume by name. */
                if (major(devnum) == 0)
                        return -ENOTBLK;
                r = rbdm_name_from_devnum(devnum, &name);
                if (r < 0) {
                        /* Not a dm device: say which one it is. */
                        _cleanup_free_ char *dev = blkid_devno_to_devname(devnum);

                        return r == -ENODEV || dev ? -ENOTBLK : r;
                }
        } else {
                name = strdup(arg);
                if (!name)
                        return -ENOMEM;
        }
        r = rbdm_info(name, &info);
        if (r < 0)
                return r;
        if (!info.exists || !info.live_table)
                return -ENODEV;
        if (strncmp(info.uuid, RB_DM_UUID_PREFIX, strlen(RB_DM_UUID_PREFIX)) == 0)
                return -EISDIR; /* one of our own devices: not a volume */
        *ret_name = TAKE_PTR(name);
        return 0;
}
