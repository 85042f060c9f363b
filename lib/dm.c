/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libdevmapper.h>
#include <limits.h>
#include <linux/dm-ioctl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <sys/sysmacros.h>

#include "dm.h"
#include "fileio.h"
#include "macro.h"

static void dm_task_destroyp(struct dm_task **t) {
        if (*t)
                dm_task_destroy(*t);
}
#define _cleanup_dm_task_ _cleanup_(dm_task_destroyp)

/* libdevmapper says 1/0 and sets no errno we can rely on. */
static int dm_errno(int fallback) {
        return errno > 0 && errno != EINTR ? -errno : -fallback;
}

/* Library code does not print: libdevmapper's own messages are dropped, its errors returned. */
static void dm_log_silent(int level, const char *file, int line, int dm_errno_or_class, const char *f, ...) {
}

static int task_new(int type, const char *name, struct dm_task **ret) {
        static bool log_set;
        struct dm_task *t;

        if (!log_set) {
                dm_log_with_errno_init(dm_log_silent);
                log_set = true;
        }
        t = dm_task_create(type);
        if (!t)
                return -ENOMEM;
        if (name && !dm_task_set_name(t, name)) {
                dm_task_destroy(t);
                return -EINVAL;
        }
        *ret = t;
        return 0;
}

/* Runs a task with a udev cookie; waits for udev unless the caller collects the cookie. */
static int task_run_cookie(struct dm_task *t, uint32_t *cookie) {
        uint32_t own = 0;
        int ok, r;

        if (!dm_task_set_cookie(t, cookie ?: &own, 0))
                return -EIO;
        errno = 0;
        ok = dm_task_run(t);
        r = ok ? 0 : dm_errno(EIO);
        if (!cookie)
                (void) rbdm_udev_wait(own);
        return r;
}

static int task_run(struct dm_task *t, bool udev) {
        int ok;

        if (udev)
                return task_run_cookie(t, NULL);
        errno = 0;
        ok = dm_task_run(t);
        return ok ? 0 : dm_errno(EIO);
}

int rbdm_info(const char *name, struct rbdm_info *ret) {
        _cleanup_dm_task_ struct dm_task *t = NULL;
        struct dm_info info;
        const char *uuid;
        int r;

        r = task_new(DM_DEVICE_INFO, name, &t);
        if (r < 0)
                return r;
        r = task_run(t, false);
        if (r < 0)
                return r;
        if (!dm_task_get_info(t, &info))
                return -EIO;
        *ret = (struct rbdm_info) {
                .exists = info.exists,
                .suspended = info.suspended,
                .live_table = info.live_table,
                .inactive_table = info.inactive_table,
                .open_count = info.open_count,
                .major = info.major,
                .minor = info.minor,
        };
        uuid = info.exists ? dm_task_get_uuid(t) : NULL;
        if (uuid)
                snprintf(ret->uuid, sizeof(ret->uuid), "%s", uuid);
        return 0;
}

int rbdm_name_from_devnum(dev_t devnum, char **ret_name) {
        _cleanup_dm_task_ struct dm_task *t = NULL;
        struct dm_info info;
        const char *name;
        int r;

        r = task_new(DM_DEVICE_INFO, NULL, &t);
        if (r < 0)
                return r;
        if (!dm_task_set_major(t, major(devnum)) || !dm_task_set_minor(t, minor(devnum)))
                return -EINVAL;
        r = task_run(t, false);
        if (r < 0)
                return r;
        if (!dm_task_get_info(t, &info) || !info.exists)
                return -ENODEV;
        name = dm_task_get_name(t);
        if (!name)
                return -ENODEV;
        *ret_name = strdup(name);
        return *ret_name ? 0 : -ENOMEM;
}

int rbdm_create(const char *name, const char *uuid) {
        _cleanup_dm_task_ struct dm_task *t = NULL;
        int r;

        r = task_new(DM_DEVICE_CREATE, name, &t);
        if (r < 0)
                return r;
        if (uuid && !dm_task_set_uuid(t, uuid))
                return -EINVAL;
        /* No table, no uevent that would carry a udev cookie: the node comes with the first resume. */
        return task_run(t, false);
}

static int add_targets(struct dm_task *t, const char *table) {
        const char *line = table;

        while (line && *line) {
                unsigned long long start, length;
                char target[64];
                int off = 0;
                const char *end = strchrnul(line, '\n');
                _cleanup_free_ char *copy = strndup(line, end - line);

                if (!copy)
                        return -ENOMEM;
                if (copy[0] != 0) {
                        if (sscanf(copy, "%llu %llu %63s %n", &start, &length, target, &off) < 3 || off == 0)
                                return -EINVAL;
                        if (!dm_task_add_target(t, start, length, target, copy + off))
                                return -ENOMEM;
                }
                line = *end ? end + 1 : NULL;
        }
        return 0;
}

int rbdm_load(const char *name, const char *table) {
        _cleanup_dm_task_ struct dm_task *t = NULL;
        int r;

        r = task_new(DM_DEVICE_RELOAD, name, &t);
        if (r < 0)
                return r;
        r = add_targets(t, table);
        if (r < 0)
                return r;
        return task_run(t, false);
}

static int simple(int type, const char *name, bool udev) {
        _cleanup_dm_task_ struct dm_task *t = NULL;
        int r;

        r = task_new(type, name, &t);
        if (r < 0)
                return r;
        return task_run(t, udev);
}

int rbdm_clear(const char *name) {
        return simple(DM_DEVICE_CLEAR, name, false);
}

/* Suspends with the filesystem frozen, so a snapshot taken now is clean. */
int rbdm_suspend(const char *name) {
        return simple(DM_DEVICE_SUSPEND, name, false);
}

int rbdm_resume(const char *name) {
        return simple(DM_DEVICE_RESUME, name, true);
}

int rbdm_resume_deferred(const char *name, uint32_t *cookie) {
        _cleanup_dm_task_ struct dm_task *t = NULL;
        int r;

        r = task_new(DM_DEVICE_RESUME, name, &t);
        if (r < 0)
                return r;
        return task_run_cookie(t, cookie);
}

int rbdm_udev_wait(uint32_t cookie) {
        int ready = 0;

        /* Cookie 0 (no udev): dm_udev_wait() makes the nodes libdevmapper has queued; only
         * it or the process's exit does, and rollbackd does not exit. */
        if (!cookie)
                return dm_udev_wait(0) ? 0 : -EIO;
        /* udev may be gone or stuck: waiting for it must not hang us (its nodes we make ourselves). */
        for (unsigned i = 0; i < RBDM_UDEV_TIMEOUT_SEC * 10; i++) {
                if (!dm_udev_wait_immediate(cookie, &ready))
                        return -EIO;
                if (ready)
                        return 0;
                (void) usleep(100 * 1000);
        }
        /*
         * Given up: complete the cookie ourselves so that its semaphore goes
         * and does not stay behind in the system (udev's late completion of a
         * missing cookie is harmless).
         */
        if (dm_udev_complete(cookie))
                (void) dm_udev_wait_immediate(cookie, &ready);
        return -ETIMEDOUT;
}

int rbdm_remove_deferred(const char *name, uint32_t *cookie) {
        _cleanup_dm_task_ struct dm_task *t = NULL;
        int r;

        r = task_new(DM_DEVICE_REMOVE, name, &t);
        if (r < 0)
                return r;
        /* udev's probing can hold the device open for a moment. */
        dm_task_retry_remove(t);
        return task_run_cookie(t, cookie);
}

int rbdm_remove(const char *name) {
        return rbdm_remove_deferred(name, NULL);
}

int rbdm_swap(const char *name, const struct rbdm_swap *swap) {
        sigset_t stop, old;
        bool locked;
        int r;

        if (swap->table) {
                r = rbdm_load(name, swap->table);
                if (r < 0)
                        return r;
        }
        /* A page fault served from the suspended device would never return. */
        locked = mlockall(MCL_CURRENT | MCL_FUTURE) == 0;
        /* Nor may a signal end us with the device suspended: ^C, TERM, the watchdog's ABRT wait. */
        sigfillset(&stop);
        (void) sigprocmask(SIG_BLOCK, &stop, &old);
        r = rbdm_suspend(name);
        if (r < 0)
                goto clear;
        if (swap->step) {
                r = swap->step(swap->userdata);
                if (r < 0)
                        goto resume_old;
        }
        r = swap->cookie ? rbdm_resume_deferred(name, swap->cookie) : rbdm_resume(name);
        if (r >= 0)
                goto unlock;
resume_old:
        /* The new table did not come up: bring the old one back. */
        (void) rbdm_clear(name);
        (void) rbdm_resume(name);
        goto unlock;
clear:
        (void) rbdm_clear(name);
unlock:
        (void) sigprocmask(SIG_SETMASK, &old, NULL);
        if (locked)
                (void) munlockall();
        return r;
}

int rbdm_replace(const char *name, const char *table) {
        return rbdm_swap(name, &(const struct rbdm_swap) { .table = table });
}

int rbdm_table(const char *name, bool status, char **ret) {
        _cleanup_dm_task_ struct dm_task *t = NULL;
        _cleanup_free_ char *out = NULL;
        void *next = NULL;
        int r;

        r = task_new(status ? DM_DEVICE_STATUS : DM_DEVICE_TABLE, name, &t);
        if (r < 0)
                return r;
        r = task_run(t, false);
        if (r < 0)
                return r;
        out = strdup("");
        if (!out)
                return -ENOMEM;
        do {
                uint64_t start, length;
                char *type = NULL, *params = NULL, *n;
                int k;

                next = dm_get_next_target(t, next, &start, &length, &type, &params);
                if (!type)
                        break;
                k = asprintf(&n, "%s%" PRIu64 " %" PRIu64 " %s %s\n", out, start, length, type,
                             params ? params : "");
                if (k < 0)
                        return -ENOMEM;
                free(out);
                out = n;
        } while (next);
        *ret = TAKE_PTR(out);
        return 0;
}

int rbdm_message(const char *name, const char *message) {
        _cleanup_dm_task_ struct dm_task *t = NULL;
        int r;

        r = task_new(DM_DEVICE_TARGET_MSG, name, &t);
        if (r < 0)
                return r;
        if (!dm_task_set_sector(t, 0) || !dm_task_set_message(t, message))
                return -ENOMEM;
        return task_run(t, false);
}

int rbdm_has_target(const char *target) {
        _cleanup_dm_task_ struct dm_task *t = NULL;
        struct dm_versions *v, *last;
        int r;

        r = task_new(DM_DEVICE_LIST_VERSIONS, NULL, &t);
        if (r < 0)
                return r;
        r = task_run(t, false);
        if (r < 0)
                return r;
        v = dm_task_get_versions(t);
        do {
                if (strcmp(v->name, target) == 0)
                        return 1;
                last = v;
                v = (struct dm_versions *) ((char *) v + v->next);
        } while (last != v);
        return 0;
}

int rbdm_devt(const char *name, char ret[32]) {
        struct rbdm_info info;
        int r;

        r = rbdm_info(name, &info);
        if (r < 0)
                return r;
        if (!info.exists)
                return -ENODEV;
        snprintf(ret, 32, "%u:%u", info.major, info.minor);
        return 0;
}

uint64_t rbdm_table_sectors(const char *table) {
        uint64_t end = 0;

        for (const char *line = table; line && *line;) {
                unsigned long long start, length;

                if (sscanf(line, "%llu %llu", &start, &length) == 2 && start + length > end)
                        end = start + length;
                line = strchr(line, '\n');
                if (line)
                        line++;
        }
        return end;
}

int rbdm_table_target(const char *table, char ret[32]) {
        unsigned long long start, length;

        ret[0] = 0;
        if (!table || !*table)
                return 0;
        if (sscanf(table, "%llu %llu %31s", &start, &length, ret) != 3)
                return -EINVAL;
        return 0;
}

int rbdm_sysfs(const char *kname, const char *attr, char *buf, size_t size) {
        char path[PATH_MAX];

        snprintf(path, sizeof(path), "/sys/class/block/%s/dm/%s", kname, attr);
        return read_first_line(path, buf, size);
}

static bool blocks_reads(const char *kname, unsigned depth) {
        char path[PATH_MAX], suspended[8];
        struct dirent *de;
        bool blocked = false;
        DIR *d;

        if (rbdm_sysfs(kname, "suspended", suspended, sizeof(suspended)) >= 0 && suspended[0] == '1')
                return true;
        /* Deeper than any real stack: better skipped than hung on. */
        if (depth >= 16)
                return true;
        snprintf(path, sizeof(path), "/sys/class/block/%s/slaves", kname);
        d = opendir(path);
        if (!d)
                return false;
        while (!blocked && (de = readdir(d)))
                blocked = de->d_name[0] != '.' && blocks_reads(de->d_name, depth + 1);
        closedir(d);
        return blocked;
}

/* A suspended dm device blocks every read until it is resumed, and so does one stacked on it (LVM looks down too). */
bool rbdm_blocks_reads(const char *kname) {
        return blocks_reads(kname, 0);
}

int rbdm_event_arm(int fd) {
        struct dm_ioctl dmi = {
                .version = { DM_VERSION_MAJOR, 0, 0 },
                .data_size = sizeof(dmi),
        };

        if (ioctl(fd, DM_DEV_ARM_POLL, &dmi) < 0)
                return -errno;
        return 0;
}

int rbdm_event_open(void) {
        _cleanup_close_ int fd = -1;
        int r;

        fd = open("/dev/mapper/control", O_RDWR | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
                return -errno;
        r = rbdm_event_arm(fd);
        if (r < 0)
                return r;
        return TAKE_FD(fd);
}
