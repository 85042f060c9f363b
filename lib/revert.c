/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Revert and merge: recording a revert, merging now, following a merge and
 * finishing it.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "boot-copy.h"
#include "crash-point.h"
#include "dm.h"
#include "macro.h"
#include "rollback.h"
#include "stack.h"
#include "strv.h"
#include "tables.h"

static const char *const merge_state_table[_MERGE_STATE_MAX] = {
        [MERGE_NONE] = "none",
        [MERGE_RUNNING] = "running",
        [MERGE_FAILED] = "failed",
        [MERGE_DONE] = "done",
        [MERGE_PENDING] = "pending",
        [MERGE_STOPPED] = "stopped",
};

DEFINE_STRING_TABLE(merge_state, enum merge_state, _MERGE_STATE_MAX);

int rb_cancel_revert(struct pool *p, const char *volume, bool keep_boot) {
        unsigned n = 0;

        for (size_t i = 0; i < p->meta.n_volumes; i++) {
                struct volume *v = &p->meta.volumes[i];
                int r = 0;

                if ((volume && strcmp(v->name, volume) != 0) || !v->revert)
                        continue;
                /*
                 * The /boot the revert replaced goes back first: the next boot
                 * starts the kernel it had.  Not mounted, it is kept for later.
                 */
                if (!keep_boot && v->boot_replaced) {
                        r = boot_copy_put_back_replaced(v->name, v->boot_replaced);
                        if (r < 0)
                                return r;
                }
                if (keep_boot || r > 0) {
                        free(v->boot_replaced);
                        v->boot_replaced = NULL;
                }
                free(v->revert);
                v->revert = NULL;
                v->merge_start_chunks = 0;
                v->auto_reverted_boots = 0;
                n++;
        }
        if (n == 0)
                return -ENOENT;
        return pool_commit(p);
}

struct merge_swap {
        struct pool *pool;
        struct volume *volume;
        struct snapshot *snapshot;
        const struct stack *stack;
        enum backend backend;
        const char *table;
        bool untracked;         /* out: the snapshot's device is gone */
};

/* With the volume suspended: its snapshot device goes, the merge table comes. */
static int merge_swap_step(void *userdata) {
        struct merge_swap *m = userdata;
        struct pool *p = m->pool;

        remove_named(name_snapshot, m->snapshot);
        m->untracked = true;
        if (m->backend != m->stack->backend)
                for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                        struct snapshot *o = &p->meta.snapshots[i];
                        _cleanup_free_ char *n = NULL, *t = NULL;

                        if (o == m->snapshot || strcmp(o->volume, m->volume->name) != 0 ||
                            o->state != SNAPSHOT_ACTIVE)
                                continue;
                        if (name_snapshot(o, &n) < 0 || snapshot_table(p, m->stack, m->backend, o, false, &t) < 0)
                                continue;
                        /* Same COW, the other implementation: the format is the same. */
                        (void) rbdm_remove(n);
                        if (rbdm_create(n, NULL) < 0)
                                continue;
                        if (rbdm_load(n, t) < 0 || rbdm_resume(n) < 0)
                                (void) rbdm_remove(n);
                }
        return rbdm_load(m->volume->name, m->table);
}

/*
 * Loads the merge table: the volume is not in use, so the stack can be
 * rebuilt freely.  On failure, ret_untracked says whether the snapshot
 * stopped tracking the volume's writes on the way.
 */
static int merge_now(struct pool *p, struct volume *v, struct snapshot *s, bool *ret_untracked) {
        struct merge_swap m = {};
        _cleanup_(stack_done) struct stack st = {};
        _cleanup_free_ char *merge = NULL;
        struct rbdm_info info;
        enum backend b;
        int r;

        r = rb_backend_resolve(p->meta.settings.backend, true, &b);
        if (r < 0)
                return r;
        r = stack_read(v->name, &st);
        if (r < 0)
                return r;
        if (st.backend < 0 || st.merging)
                return -EBUSY;

        /* Other snapshots must be of the merging backend to see the merge's writes. */
        if (b != st.backend) {
                for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                        struct snapshot *o = &p->meta.snapshots[i];
                        _cleanup_free_ char *n = NULL;

                        if (o == s || strcmp(o->volume, v->name) != 0 || name_snapshot(o, &n) < 0)
                                continue;
                        if (rbdm_info(n, &info) >= 0 && info.exists && info.open_count > 0)
                                return -EADDRINUSE;
                }
        }

        r = snapshot_table(p, &st, b, s, true, &merge);
        if (r < 0)
                return r;
        m = (struct merge_swap) { .pool = p, .volume = v, .snapshot = s, .stack = &st, .backend = b, .table = merge };
        r = rbdm_swap(v->name, &(const struct rbdm_swap) { .step = merge_swap_step, .userdata = &m });
        *ret_untracked = m.untracked;
        return r;
}

/*
 * Puts back the /boot that the snapshot named holds.  The /boot it replaces,
 * the one that goes with the live volume, is kept and committed first, for
 * cancel-revert, unless an earlier revert since the last merge kept it:
 * whatever happens next, it is not lost.  The snapshots grow first to hold
 * what the two copies write to the volume.
 */
static int revert_boot(struct pool *p, const char *name) {
        _cleanup_free_ char *kept = NULL, *volume = NULL;
        const struct snapshot *s = pool_find_snapshot(p, name);
        struct volume *v;
        uint64_t bytes;
        int r;

        volume = strdup(s->volume);
        if (!volume)
                return -ENOMEM;
        v = pool_find_volume(p, volume);
        if (!v->boot_replaced) {
                r = boot_copy_keep_replaced(volume, &kept, &bytes);
                if (r < 0)
                        return r;
                make_room_for_writes(p, volume, NULL, 2 * bytes / 512);
                v = pool_find_volume(p, volume);
                if (kept) {
                        v->boot_replaced = TAKE_PTR(kept);
                        r = pool_commit(p);
                        if (r < 0) {
                                (void) rb_pool_reload(p);
                                return r;
                        }
                }
        }
        return boot_copy_put_back(pool_find_snapshot(p, name), &bytes);
}

int rb_revert(struct pool *p, const char *name, bool now, bool keep_boot) {
        bool untracked = false;
        struct snapshot *s;
        struct volume *v;
        struct rb_usage u;
        struct rbdm_info info;
        int r;

        s = pool_find_snapshot(p, name);
        if (!s)
                return -ENOENT;
        if (s->state != SNAPSHOT_ACTIVE)
                return s->state == SNAPSHOT_MERGING ? -EALREADY : -ESTALE;
        /*
         * In a boot of a snapshot's view the volume is not mounted, so /boot
         * would not be put back (and on root's /boot could not be: the view
         * discards it): GRUB would start the upgrade's kernel into the merge.
         */
        if (!keep_boot && rb_view_booted(NULL) > 0)
                return -EROFS;
        r = rb_snapshot_usage(p, s, &u);
        if (r < 0)
                return r;
        if (u.invalid) {
                s->state = SNAPSHOT_INVALID;
                (void) pool_commit(p);
                return -ESTALE;
        }
        make_room_for_merge(p, name);
        s = pool_find_snapshot(p, name);
        if (!s)
                return -ENOENT;
        v = pool_find_volume(p, s->volume);
        if (!v)
                return -EBADMSG;
        if (v->merging)
                return -EINPROGRESS;

        if (!now) {
                /* Before it is recorded: the next boot's kernel must be one the reverted root has. */
                if (!keep_boot) {
                        r = revert_boot(p, name);
                        if (r < 0)
                                return r;
                        rb_crash_point("revert-boot");
                        s = pool_find_snapshot(p, name);
                        v = pool_find_volume(p, s->volume);
                }
                free(v->revert);
                v->revert = strdup(name);
                if (!v->revert)
                        return -ENOMEM;
                /* Reverted, the upgrade on trial is gone. */
                volume_end_trial(v);
                /* The size known now: the boot may find the merge already over. */
                v->merge_start_chunks = u.exceptions;
                return pool_commit(p);
        }

        r = rbdm_info(v->name, &info);
        if (r < 0)
                return r;
        if (!info.exists)
                return -ENODEV;
        if (info.open_count > 0)
                return -EADDRINUSE;

        /* Recorded first: a crash from here on resumes the merge at boot. */
        free(v->revert);
        v->revert = NULL;
        v->merging = strdup(name);
        if (!v->merging)
                return -ENOMEM;
        v->merge_start_usec = now_usec(CLOCK_REALTIME);
        v->merge_start_chunks = u.exceptions;
        volume_end_trial(v);
        s->state = SNAPSHOT_MERGING;
        r = pool_commit(p);
        if (r < 0)
                goto fail;
        rb_crash_point("revert-recorded");
        r = merge_now(p, v, s, &untracked);
        if (r < 0) {
                /* Nothing merged; but once its device went, the volume was written past it. */
                s = pool_find_snapshot(p, name);
                v = pool_find_volume(p, s->volume);
                s->state = untracked ? SNAPSHOT_INVALID : SNAPSHOT_ACTIVE;
                free(v->merging);
                v->merging = NULL;
                (void) pool_commit(p);
                return r;
        }
        return 0;
fail:
        (void) rb_pool_reload(p);
        return r;
}

static bool cow_device_exists(const struct snapshot *s) {
        _cleanup_free_ char *name = NULL;
        struct rbdm_info info;

        /* When in doubt, it exists: the merge is then left for the next boot. */
        if (name_cow(s, &name) < 0 || rbdm_info(name, &info) < 0)
                return true;
        return info.exists;
}

/* The merge is over and its devices gone: the snapshot's record goes, and the volume's with its last one. */
static int merge_finish_record(struct pool *p, struct volume *v, struct snapshot *s) {
        _cleanup_free_ char *volume = strdup(v->name), *name = strdup(s->name);
        bool others = pool_count_snapshots(p, v->name, false) > 1;
        int r;

        if (!volume || !name)
                return -ENOMEM;
        pool_remove_snapshot(p, s);
        v = pool_find_volume(p, volume);
        free(v->merging);
        v->merging = NULL;
        /* The root is the snapshot's now, and so is /boot: what the revert replaced goes with neither. */
        free(v->boot_replaced);
        v->boot_replaced = NULL;
        /* The journal keeps why; status shows an automatic revert until its merge is over. */
        v->auto_reverted_boots = 0;
        if (!others)
                pool_remove_volume(p, v);
        r = pool_commit(p);
        if (r >= 0)
                boot_entry_drop(name);
        return r;
}

/* After a merge: the volume becomes an origin again (other snapshots) or plain. */
static int merge_finish(struct pool *p, struct volume *v, struct snapshot *s, const struct stack *st) {
        _cleanup_free_ char *origin = NULL;
        int r;

        if (pool_count_snapshots(p, v->name, false) > 1) {
                r = table_origin(st->backend, st->sectors, st->real_devt, &origin);
                if (r < 0)
                        return r;
                r = rbdm_replace(v->name, origin);
        } else
                r = disarm(v->name, st);
        if (r < 0)
                return r;
        remove_named(name_cow, s);
        rb_crash_point("merge-finish-swapped");
        return merge_finish_record(p, v, s);
}

int rb_merge_poll(struct pool *p, const char *volume, bool finish, struct rb_merge_progress *ret) {
        _cleanup_(stack_done) struct stack st = {};
        struct snapshot *s;
        struct volume *v;
        struct rb_usage u;
        uint64_t remaining, elapsed;
        int r;

        *ret = (struct rb_merge_progress) { .state = MERGE_NONE, .eta_seconds = -1 };
        v = pool_find_volume(p, volume);
        if (!v || !v->merging)
                return 0;
        s = pool_find_snapshot(p, v->merging);
        if (!s)
                return -EBADMSG;
        r = stack_read(volume, &st);
        if (r < 0)
                return r;
        if (!st.merging && st.backend >= 0 && !cow_device_exists(s)) {
                /*
                 * Back on the origin table with the COW device gone: only a
                 * merge finish cut off before its commit leaves that.
                 */
                ret->state = MERGE_DONE;
                ret->chunks_total = v->merge_start_chunks;
                ret->percent = 100.0;
                ret->eta_seconds = 0;
                return finish ? merge_finish_record(p, v, s) : 0;
        }
        if (!st.merging) {
                /* Recorded, but not loaded (yet): at the next boot it will be. */
                ret->state = MERGE_PENDING;
                ret->chunks_total = ret->chunks_remaining = v->merge_start_chunks;
                return 0;
        }
        r = rb_snapshot_usage(p, s, &u);
        if (r < 0)
                return r;
        if (u.invalid) {
                ret->state = MERGE_FAILED;
                return 0;
        }
        remaining = u.exceptions;
        ret->chunks_total = v->merge_start_chunks > remaining ? v->merge_start_chunks : remaining;
        ret->chunks_remaining = remaining;
        ret->percent = ret->chunks_total ? 100.0 * (ret->chunks_total - remaining) / ret->chunks_total : 100.0;
        elapsed = now_usec(CLOCK_REALTIME) - v->merge_start_usec;
        if (remaining < ret->chunks_total && elapsed > 0)
                ret->eta_seconds = (int64_t) ((double) remaining * elapsed / 1e6 /
                                              (ret->chunks_total - remaining));
        if (remaining > 0) {
                ret->state = u.stopped ? MERGE_STOPPED : MERGE_RUNNING;
                return 0;
        }
        ret->state = MERGE_DONE;
        ret->percent = 100.0;
        ret->eta_seconds = 0;
        if (!finish)
                return 0;
        return merge_finish(p, v, s, &st);
}
