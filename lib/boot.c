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

/*
 * A pending revert becomes a running merge, recorded (by the caller's
 * commit) before it starts; one whose snapshot cannot be merged is dropped.
 * Returns the snapshot to merge, or NULL.
 */
static struct snapshot *boot_pick_merge(struct pool *p, struct volume *v, struct rb_boot_report *ret) {
        struct snapshot *s;

        if (v->merging)
                return pool_find_snapshot(p, v->merging);
        if (!v->revert)
                return NULL;
        s = pool_find_snapshot(p, v->revert);
        if (!s || s->state != SNAPSHOT_ACTIVE) {
                free(TAKE_PTR(v->revert));
                return NULL;
        }
        v->merging = TAKE_PTR(v->revert);
        v->merge_start_usec = now_usec(CLOCK_REALTIME);
        s->state = SNAPSHOT_MERGING;
        ret->merge_started = true;
        return s;
}

/* Every device boot_create_devices() may have made for the volume. */
static void boot_remove_devices(struct pool *p, const char *volume, const struct stack *st, const bool *live) {
        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                struct snapshot *s = &p->meta.snapshots[i];

                if (strcmp(s->volume, volume) != 0)
                        continue;
                if (live[i])
                        remove_named(name_snapshot, s);
                remove_named(name_cow, s);
        }
        (void) rbdm_remove(st->real_name);
}

/*
 * The devices under the volume's new table: -real with the volume's own
 * table, the COWs, and each active snapshot's device, loaded but not
 * resumed (arm_step resumes them while the volume is suspended).  A snapshot
 * that cannot be set up is invalid; the one to merge must be set up.
 */
static int boot_create_devices(struct pool *p, struct volume *v, struct stack *st, struct snapshot *merging,
                               bool *live, struct rb_boot_report *ret) {
        _cleanup_free_ char *real_uuid = NULL;
        int r;

        r = uuid_real(v, &real_uuid);
        if (r < 0)
                return r;
        r = device_create(st->real_name, real_uuid, st->real_table, true);
        if (r < 0)
                return r;
        r = rbdm_devt(st->real_name, st->real_devt);
        if (r < 0)
                goto remove_devices;

        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                struct snapshot *s = &p->meta.snapshots[i];
                _cleanup_free_ char *name = NULL, *uuid = NULL, *table = NULL;
                bool created;

                if (strcmp(s->volume, v->name) != 0 || (s->state != SNAPSHOT_ACTIVE && s != merging))
                        continue;
                if (cow_device_create(p, s, &created) >= 0) {
                        if (s == merging)
                                continue;
                        if (name_snapshot(s, &name) >= 0 && uuid_snapshot(s, &uuid) >= 0 &&
                            snapshot_table(p, st, ret->backend, s, false, &table) >= 0 &&
                            device_create(name, uuid, table, false) >= 0) {
                                live[i] = true;
                                continue;
                        }
                        remove_named(name_cow, s);
                }
                if (s == merging) {
                        r = -EIO;
                        goto remove_devices;
                }
                s->state = SNAPSHOT_INVALID;
                ret->invalidated++;
        }
        return 0;

remove_devices:
        boot_remove_devices(p, v->name, st, live);
        return r;
}

/*
 * Armed: the mount count the next boot compares with, and the merge's
 * starting size: what revert saw, or more if the volume was written since
 * (a merge may be over before its size is read here).
 */
static void boot_record_armed(struct pool *p, struct volume *v, struct snapshot *merging,
                              dev_t devnum, bool has_count, unsigned count) {
        struct rb_usage u;

        if (has_count && merging) {
                unsigned now;

                /* Root is mounted from the merged view: the snapshot's count, higher if it was mounted itself. */
                if (devnum_mount_count(devnum, &now) >= 0 && now > count)
                        count = now;
        }
        /* Root is mounted in this boot once more (read-only, then read-write). */
        v->mount_count_known = has_count;
        v->mount_count_max = has_count ? count + 1 : 0;
        if (merging && rb_snapshot_usage(p, merging, &u) >= 0 && u.exceptions > v->merge_start_chunks)
                v->merge_start_chunks = u.exceptions;
}

/*
 * The volume cannot be armed.  Mounted now, it would be half merged (a
 * merge under way) or written untracked, losing the revert asked for: the
 * merge is left to the next boot, pending as it was, and the caller stops
 * this one.  Otherwise nothing tracks writes to the volume now: none of its
 * snapshots may be reverted to.
 */
static int boot_give_up(struct pool *p, struct volume *v, struct snapshot *merging, struct rb_boot_report *ret,
                        int error) {
        ret->armed = 0;
        if (merging) {
                ret->merge_blocked = true;
                if (ret->merge_started) {
                        v->revert = TAKE_PTR(v->merging);
                        merging->state = SNAPSHOT_ACTIVE;
                }
        } else
                ret->invalidated += invalidate_volume_snapshots(p, v->name);
        (void) pool_commit(p);
        return error;
}

int rb_boot_volume(struct pool *p, const char *volume, bool count_trial, struct rb_boot_report *ret) {
        _cleanup_(stack_done) struct stack st = {};
        _cleanup_free_ char *top = NULL;
        _cleanup_free_ bool *live = NULL;
        struct snapshot *merging;
        struct rbdm_info info;
        struct volume *v;
        bool has_count;
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
        if (!v->revert && !v->merging && count_trial) {
                ret->trial = rb_trial_count(p, v);
                if (ret->trial != TRIAL_NONE) {
                        ret->trial_snapshot = strdup(v->trial);
                        if (!ret->trial_snapshot)
                                return -ENOMEM;
                        ret->trial_boots = v->trial_boots;
                        ret->trial_limit = p->meta.settings.auto_revert_after;
                }
        }
        merging = boot_pick_merge(p, v, ret);
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
                return boot_give_up(p, v, merging, ret, r);
        r = pool_commit(p);
        if (r < 0)
                return r;
        rb_crash_point("boot-recorded");

        live = calloc(p->meta.n_snapshots + 1, sizeof(bool));
        if (!live)
                return boot_give_up(p, v, merging, ret, -ENOMEM);
        r = boot_create_devices(p, v, &st, merging, live, ret);
        if (r < 0)
                return boot_give_up(p, v, merging, ret, r);
        if (merging)
                r = snapshot_table(p, &st, ret->backend, merging, true, &top);
        else
                r = table_origin(ret->backend, st.sectors, st.real_devt, &top);
        if (r >= 0)
                r = rbdm_swap(volume, &(const struct rbdm_swap) {
                        .table = top,
                        .step = arm_step,
                        .userdata = &(struct arm) { p, live, ret },
                });
        if (r < 0) {
                boot_remove_devices(p, volume, &st, live);
                return boot_give_up(p, v, merging, ret, r);
        }
        rb_crash_point("boot-swapped");
        boot_record_armed(p, v, merging, devnum, has_count, count);
        return pool_commit(p);
}
