/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The dm stack of a volume and its snapshots: reading what is there now,
 * and the devices and tables that make it up.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dm.h"
#include "macro.h"
#include "rollback.h"
#include "stack.h"
#include "tables.h"

void stack_done(struct stack *st) {
        free(st->table);
        free(st->real_name);
        free(st->real_table);
}

int stack_read(const char *volume, struct stack *st) {
        char target[32];
        int r;

        *st = (struct stack) { .backend = _BACKEND_INVALID };
        r = rbdm_table(volume, false, &st->table);
        if (r < 0)
                return r;
        r = rbdm_table_target(st->table, target);
        if (r < 0)
                return r;
        st->backend = backend_of_target(target, &st->merging);
        r = name_real(volume, &st->real_name);
        if (r < 0)
                return r;
        if (st->backend < 0) {
                st->real_table = strdup(st->table);
                if (!st->real_table)
                        return -ENOMEM;
        } else {
                r = rbdm_table(st->real_name, false, &st->real_table);
                if (r < 0)
                        return r;
                r = rbdm_devt(st->real_name, st->real_devt);
                if (r < 0)
                        return r;
        }
        st->sectors = rbdm_table_sectors(st->real_table);
        return st->sectors > 0 ? 0 : -EINVAL;
}

int zero_cow_header(struct pool *p, const struct snapshot *s) {
        size_t len = 2 * 512 * (size_t) s->chunk_sectors;
        _cleanup_free_ void *zero = calloc(1, len);
        uint64_t off = (p->geo.data_offset + s->extents[0].start * p->geo.extent_sectors) * 512;

        if (!zero)
                return -ENOMEM;
        /* A zeroed header makes the kernel start a new store, never adopt an old one. */
        if (pwrite(p->fd, zero, len, off) != (ssize_t) len)
                return errno > 0 ? -errno : -EIO;
        if (fdatasync(p->fd) < 0)
                return -errno;
        return 0;
}

/* Creates (inactive or live) one of our devices with a table. */
int device_create(const char *name, const char *uuid, const char *table, bool resume) {
        int r;

        r = rbdm_create(name, uuid);
        if (r < 0)
                return r;
        r = rbdm_load(name, table);
        if (r >= 0 && resume)
                r = rbdm_resume(name);
        if (r < 0)
                (void) rbdm_remove(name);
        return r;
}

int cow_device_create(struct pool *p, const struct snapshot *s, bool *created) {
        _cleanup_free_ char *name = NULL, *uuid = NULL, *table = NULL;
        struct rbdm_info info;
        int r;

        *created = false;
        if ((r = name_cow(s, &name)) < 0 || (r = uuid_cow(s, &uuid)) < 0 ||
            (r = table_cow(&p->geo, p->devnum, s, &table)) < 0)
                return r;
        r = rbdm_info(name, &info);
        if (r < 0)
                return r;
        if (info.exists)
                return 0;
        r = device_create(name, uuid, table, true);
        if (r < 0)
                return r;
        *created = true;
        return 0;
}

/*
 * While rollbackd extends COWs, one that fills wakes it (the low-water mark
 * at autoextend_threshold) and writes wait for it to grow, rather than the
 * snapshot being lost at once.  The mark stays what it was at load: after
 * a growth, the daemon's poll sees the threshold crossed again.
 */
static struct cow_features cow_features_of(const struct pool *p, const struct snapshot *s) {
        const struct pool_settings *set = &p->meta.settings;
        uint64_t chunks = snapshot_extent_count(s) * p->geo.extent_sectors / s->chunk_sectors;
        uint64_t low = chunks * (100 - set->autoextend_threshold) / 100;

        if (!pool_autoextend_enabled(set))
                return (struct cow_features) {};
        return (struct cow_features) {
                .low_water_chunks = low > 0 ? low : 1,
                .wait_ms = set->full_wait_seconds * 1000,
        };
}

int snapshot_table(const struct pool *p, const struct stack *st, enum backend b, const struct snapshot *s,
                   bool merge, char **ret) {
        struct cow_features f = cow_features_of(p, s);
        _cleanup_free_ char *cow = NULL;
        char cow_devt[32];
        int r;

        r = name_cow(s, &cow);
        if (r < 0)
                return r;
        r = rbdm_devt(cow, cow_devt);
        if (r < 0)
                return r;
        return (merge ? table_merge : table_snapshot)(b, st->sectors, st->real_devt, cow_devt,
                                                      s->chunk_sectors, &f, ret);
}

void remove_named(int (*namer)(const struct snapshot *, char **), const struct snapshot *s) {
        _cleanup_free_ char *name = NULL;
        struct rbdm_info info;

        if (namer(s, &name) < 0 || rbdm_info(name, &info) < 0 || !info.exists)
                return;
        (void) rbdm_remove(name);
}

int resume_deferred_step(void *userdata) {
        struct deferred *d = userdata;

        return rbdm_resume_deferred(d->name, d->cookie);
}

static int remove_deferred_step(void *userdata) {
        struct deferred *d = userdata;

        return rbdm_remove_deferred(d->name, d->cookie);
}

/* With suspend, the volume is suspended meanwhile: no origin write is half-way through the snapshot. */
int remove_snapshot_device(const char *volume, bool suspend, const char *snap_name) {
        uint32_t cookie = 0;
        int r;

        if (suspend)
                r = rbdm_swap(volume, &(const struct rbdm_swap) {
                        .step = remove_deferred_step,
                        .userdata = &(struct deferred) { snap_name, &cookie },
                        .cookie = &cookie,
                });
        else
                r = rbdm_remove_deferred(snap_name, &cookie);
        (void) rbdm_udev_wait(cookie);
        return r;
}

/* Puts the volume back on its own table and removes the -real device. */
int disarm(const char *volume, const struct stack *st) {
        int r;

        r = rbdm_replace(volume, st->real_table);
        if (r < 0)
                return r;
        return rbdm_remove(st->real_name);
}

/* Removes a device of ours unless something (a mount, a device above) still holds it. */
static void remove_unused(const char *name) {
        struct rbdm_info info;

        if (rbdm_info(name, &info) >= 0 && info.exists && info.open_count == 0)
                (void) rbdm_remove(name);
}

/*
 * The devices left of a volume's stack once its table was replaced (LVM's
 * lvextend, lvchange --refresh, pvmove load their own): snapshots first,
 * then their COWs and the -real device beneath, so a new snapshot can arm
 * the volume again.  What is in use stays until it is not.
 */
void remove_stale_stack(struct pool *p, const char *volume, const struct stack *st) {
        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                struct snapshot *s = &p->meta.snapshots[i];
                _cleanup_free_ char *snap = NULL, *cow = NULL;

                if (strcmp(s->volume, volume) != 0)
                        continue;
                if (name_snapshot(s, &snap) >= 0)
                        remove_unused(snap);
                if (name_cow(s, &cow) >= 0)
                        remove_unused(cow);
        }
        remove_unused(st->real_name);
}
