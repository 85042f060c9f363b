/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Early boot: arming a volume's snapshots, and starting a pending merge.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

#include "crash-point.h"
#include "dm.h"
#include "evidence.h"
#include "macro.h"
#include "rollback.h"
#include "stack.h"
#include "tables.h"

struct arm {
        struct pool *pool;
        bool *live;
        struct rb_boot_report *report;
};

/* With the volume suspended: its snapshots start; one that does not is invalid. */
static int arm_step(void *userdata) {
        struct arm *a = userdata;
        struct pool *p = a->pool;

        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                _cleanup_free_ char *name = NULL;

                if (!a->live[i] || name_snapshot(&p->meta.snapshots[i], &name) < 0)
                        continue;
                if (rbdm_resume(name) < 0) {
                        (void) rbdm_remove(name);
                        remove_named(name_cow, &p->meta.snapshots[i]);
                        a->live[i] = false;
                        p->meta.snapshots[i].state = SNAPSHOT_INVALID;
                        a->report->invalidated++;
                } else
                        a->report->armed++;
        }
        return 0;
}

/*
 * The volume was mounted read-write while its snapshots were not armed (a
 * boot without the pool): they missed those writes.  A pending revert would
 * merge a mix of both and is refused; a merge under way goes on, as stopping
 * it would leave the volume half merged.
 */
static void refuse_untracked(struct pool *p, struct volume *v, unsigned count, struct rb_boot_report *ret) {
        ret->written_unarmed = true;
        ret->mount_count = count;
        ret->mount_count_max = v->mount_count_max;
        ret->revert_refused = TAKE_PTR(v->revert);
        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                struct snapshot *s = &p->meta.snapshots[i];

                if (strcmp(s->volume, v->name) == 0 && s->state == SNAPSHOT_ACTIVE) {
                        s->state = SNAPSHOT_INVALID;
                        ret->untracked++;
                }
        }
}

int rb_boot_volume(struct pool *p, const char *volume, struct rb_boot_report *ret) {
        _cleanup_(stack_done) struct stack st = {};
        _cleanup_free_ char *top = NULL, *real_uuid = NULL;
        struct snapshot *merging = NULL;
        struct rbdm_info info;
        struct volume *v;
        bool *live = NULL, has_count;
        unsigned count;
        dev_t devnum;
        int r;

        *ret = (struct rb_boot_report) { .backend = _BACKEND_INVALID };
        v = pool_find_volume(p, volume);
        if (!v)
                return -ENOENT;
        r = rbdm_info(volume, &info);
        if (r < 0)
                return r;
        if (!info.exists || !info.live_table)
                return -ENODEV;
        r = stack_read(volume, &st);
        if (r < 0)
                return r;
        if (st.backend >= 0) {
                ret->already = true;
                return 0;
        }

        devnum = makedev(info.major, info.minor);
        has_count = devnum_mount_count(devnum, &count) >= 0;
        if (has_count && v->mount_count_known && count > v->mount_count_max)
                refuse_untracked(p, v, count, ret);

        /* A pending revert becomes a running merge, recorded before it starts. */
        if (v->merging)
                merging = pool_find_snapshot(p, v->merging);
        else if (v->revert) {
                merging = pool_find_snapshot(p, v->revert);
                if (merging && merging->state == SNAPSHOT_ACTIVE) {
                        v->merging = v->revert;
                        v->revert = NULL;
                        v->merge_start_usec = now_usec(CLOCK_REALTIME);
                        v->merge_start_chunks = 0;
                        merging->state = SNAPSHOT_MERGING;
                        ret->merge_started = true;
                } else {
                        free(v->revert);
                        v->revert = NULL;
                        merging = NULL;
                }
        }
        if (merging) {
                ret->merging = strdup(merging->name);
                if (!ret->merging)
                        return -ENOMEM;
        }
        /* LVM may have moved or grown the LV: its table now is the truth. */
        free(v->table);
        v->table = strdup(st.real_table);
        if (!v->table)
                return -ENOMEM;

        r = rb_backend_resolve(p->meta.settings.backend, merging != NULL, &ret->backend);
        if (r < 0)
                goto invalidate;
        r = pool_commit(p);
        if (r < 0)
                return r;
        rb_crash_point("boot-recorded");

        r = uuid_real(v, &real_uuid);
        if (r < 0)
                goto invalidate;
        r = device_create(st.real_name, real_uuid, st.real_table, true);
        if (r < 0)
                goto invalidate;
        r = rbdm_devt(st.real_name, st.real_devt);
        if (r < 0)
                goto remove_real;

        live = calloc(p->meta.n_snapshots + 1, sizeof(bool));
        if (!live) {
                r = -ENOMEM;
                goto remove_real;
        }
        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                struct snapshot *s = &p->meta.snapshots[i];
                _cleanup_free_ char *name = NULL, *uuid = NULL, *table = NULL;
                bool created;

                if (strcmp(s->volume, volume) != 0 || (s->state != SNAPSHOT_ACTIVE && s != merging))
                        continue;
                if (cow_device_create(p, s, &created) < 0)
                        goto bad_snapshot;
                if (s == merging)
                        continue;
                if (name_snapshot(s, &name) < 0 || uuid_snapshot(s, &uuid) < 0 ||
                    snapshot_table(&st, ret->backend, s, false, &table) < 0 ||
                    device_create(name, uuid, table, false) < 0) {
                        remove_named(name_cow, s);
                        goto bad_snapshot;
                }
                live[i] = true;
                continue;
bad_snapshot:
                if (s == merging) {
                        r = -EIO;
                        goto remove_snapshots;
                }
                s->state = SNAPSHOT_INVALID;
                ret->invalidated++;
        }

        if (merging)
                r = snapshot_table(&st, ret->backend, merging, true, &top);
        else
                r = table_origin(ret->backend, st.sectors, st.real_devt, &top);
        if (r < 0)
                goto remove_snapshots;
        r = rbdm_swap(volume, &(const struct rbdm_swap) {
                .table = top,
                .step = arm_step,
                .userdata = &(struct arm) { p, live, ret },
        });
        if (r < 0)
                goto remove_snapshots;
        free(live);
        rb_crash_point("boot-swapped");
        if (has_count && merging) {
                unsigned now;

                /* Root is mounted from the merged view: the snapshot's count, higher if it was mounted itself. */
                if (devnum_mount_count(devnum, &now) >= 0 && now > count)
                        count = now;
        }
        /* Root is mounted in this boot once more (read-only, then read-write). */
        v->mount_count_known = has_count;
        v->mount_count_max = has_count ? count + 1 : 0;
        if (ret->merge_started) {
                struct rb_usage u;

                if (rb_snapshot_usage(p, merging, &u) >= 0 && u.allocated > u.metadata)
                        v->merge_start_chunks = (u.allocated - u.metadata) / merging->chunk_sectors;
        }
        return pool_commit(p);

remove_snapshots:
        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                struct snapshot *s = &p->meta.snapshots[i];

                if (strcmp(s->volume, volume) != 0)
                        continue;
                if (live[i])
                        remove_named(name_snapshot, s);
                remove_named(name_cow, s);
        }
remove_real:
        (void) rbdm_remove(st.real_name);
invalidate:
        free(live);
        ret->armed = 0;
        if (merging) {
                /*
                 * Mounted now, the volume would be half merged (a merge under
                 * way) or written untracked, losing the revert asked for.
                 * Leave the merge to the next boot, pending as it was; the
                 * caller stops this one.
                 */
                ret->merge_blocked = true;
                if (ret->merge_started) {
                        v->revert = v->merging;
                        v->merging = NULL;
                        merging->state = SNAPSHOT_ACTIVE;
                }
                (void) pool_commit(p);
                return r;
        }
        /* Nothing tracks writes to the volume now: none of its snapshots may be reverted to. */
        ret->invalidated += invalidate_volume_snapshots(p, volume);
        (void) pool_commit(p);
        return r;
}
