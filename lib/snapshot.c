/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Snapshot operations: create, delete, usage, extend, retention.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <time.h>

#include "boot-copy.h"
#include "crash-point.h"
#include "dm.h"
#include "evidence.h"
#include "macro.h"
#include "rollback.h"
#include "stack.h"
#include "tables.h"
#include "trial.h"

static int make_snapshot_name(struct pool *p, char **ret) {
        char buf[64];
        time_t t = time(NULL);
        struct tm tm;

        localtime_r(&t, &tm);
        strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
        for (int i = 0; i < 100; i++) {
                char name[80];

                if (i == 0)
                        snprintf(name, sizeof(name), "%s", buf);
                else
                        snprintf(name, sizeof(name), "%s-%d", buf, i);
                if (!pool_find_snapshot(p, name)) {
                        *ret = strdup(name);
                        return *ret ? 0 : -ENOMEM;
                }
        }
        return -EEXIST;
}

static bool name_is_reserved(const char *name) {
        size_t n = strlen(name);

        return (n >= 5 && strcmp(name + n - 5, "-real") == 0) || (n >= 4 && strcmp(name + n - 4, "-cow") == 0) ||
               (n >= 5 && strcmp(name + n - 5, "-view") == 0);
}

/* The volume as create finds it, read before anything changes. */
struct create_target {
        struct stack st;
        enum backend backend;
        bool armed;             /* already on an origin table: only the snapshot is new */
        bool volume_added;      /* its pool record comes with this snapshot */
        bool real_created, cow_created, snap_created;
        char *snap_name;
        dev_t devnum;
};

static void create_target_done(struct create_target *t) {
        stack_done(&t->st);
        free(t->snap_name);
}

static int create_name(struct pool *p, const struct rb_create *c, char **ret) {
        if (!c->name)
                return make_snapshot_name(p, ret);
        if (!snapshot_name_is_valid(c->name) || name_is_reserved(c->name))
                return -EINVAL;
        if (pool_find_snapshot(p, c->name))
                return -EEXIST;
        *ret = strdup(c->name);
        return *ret ? 0 : -ENOMEM;
}

static int create_read_volume(struct pool *p, const char *volume, struct create_target *t) {
        struct rbdm_info info;
        struct volume *v;
        int r;

        /* The pool refuses a document naming a volume it could not name itself. */
        if (!dm_name_is_valid(volume))
                return -EINVAL;
        r = rbdm_info(volume, &info);
        if (r < 0)
                return r;
        if (!info.exists)
                return -ENODEV;
        t->devnum = makedev(info.major, info.minor);
        r = stack_read(volume, &t->st);
        if (r < 0)
                return r;
        if (t->st.merging)
                return -EINPROGRESS;
        t->armed = t->st.backend >= 0;
        if (t->armed)
                t->backend = t->st.backend;
        else {
                r = rb_backend_resolve(p->meta.settings.backend, false, &t->backend);
                if (r < 0)
                        return r;
        }

        v = pool_find_volume(p, volume);
        if (!v) {
                v = pool_add_volume(p, volume, info.uuid[0] ? info.uuid : NULL, t->st.real_table);
                if (!v)
                        return -ENOMEM;
                t->volume_added = true;
        } else if (!t->armed) {
                free(v->table);
                v->table = strdup(t->st.real_table);
                if (!v->table)
                        return -ENOMEM;
        }
        return 0;
}

/*
 * Step 1: the snapshot recorded `creating`, owning its extents, its COW
 * header zeroed, committed.  Nothing live yet: a failure leaves the pool as
 * committed before.
 */
static int create_record(struct pool *p, const char *volume, const struct rb_create *c, char *name,
                         const struct create_target *t, struct snapshot **ret) {
        uint64_t extents;
        struct snapshot *s;
        int r;

        r = rb_initial_cow_extents(p, volume, t->st.sectors, c, &extents);
        if (r < 0) {
                free(name);
                return r;
        }

        s = pool_add_snapshot(p);
        if (!s) {
                free(name);
                return -ENOMEM;
        }
        s->name = name;
        s->volume = strdup(volume);
        s->description = c->description ? strdup(c->description) : NULL;
        s->created_usec = now_usec(CLOCK_REALTIME);
        s->chunk_sectors = p->meta.settings.chunk_sectors;
        s->state = SNAPSHOT_CREATING;
        s->upgrade = c->upgrade;
        if (!s->volume || (c->description && !s->description))
                return -ENOMEM;
        r = snapshot_id_new(&s->id);
        if (r < 0)
                return r;
        r = pool_allocate_extents(p, extents, &s->extents, &s->n_extents);
        if (r < 0)
                return r;
        r = zero_cow_header(p, s);
        if (r < 0)
                return r;
        /* Owns its extents before it is live: a crash now leaves no COW on free extents. */
        r = pool_commit(p);
        if (r < 0)
                return r;
        *ret = s;
        return 0;
}

/*
 * Step 2: the snapshot's devices, and the volume swapped onto the origin
 * table with the snapshot resumed while it is suspended, so that the
 * snapshot's first state is a clean one.  What it made is noted in t for
 * create_take_down().
 */
static int create_live(struct pool *p, const char *volume, struct create_target *t, struct snapshot *s) {
        _cleanup_free_ char *snap_uuid = NULL, *snap_table = NULL, *origin = NULL, *real_uuid = NULL;
        uint32_t cookie = 0;
        int r;

        if (!t->armed) {
                r = uuid_real(pool_find_volume(p, volume), &real_uuid);
                if (r < 0)
                        return r;
                r = device_create(t->st.real_name, real_uuid, t->st.real_table, true);
                if (r < 0)
                        return r;
                t->real_created = true;
                r = rbdm_devt(t->st.real_name, t->st.real_devt);
                if (r < 0)
                        return r;
                r = table_origin(t->backend, t->st.sectors, t->st.real_devt, &origin);
                if (r < 0)
                        return r;
        }
        r = cow_device_create(p, s, &t->cow_created);
        if (r < 0)
                return r;
        if ((r = name_snapshot(s, &t->snap_name)) < 0 || (r = uuid_snapshot(s, &snap_uuid)) < 0 ||
            (r = snapshot_table(p, &t->st, t->backend, s, false, &snap_table)) < 0)
                return r;
        r = device_create(t->snap_name, snap_uuid, snap_table, false);
        if (r < 0)
                return r;
        t->snap_created = true;

        r = rbdm_swap(volume, &(const struct rbdm_swap) {
                .table = origin,
                .step = resume_deferred_step,
                .userdata = &(struct deferred) { t->snap_name, &cookie },
                .cookie = &cookie,
        });
        (void) rbdm_udev_wait(cookie);
        return r;
}

/* Undoes create_live(): live or not, the volume ends as it was and the devices made are gone. */
static void create_take_down(const char *volume, struct create_target *t, struct snapshot *s, bool live) {
        if (live) {
                if (!t->armed)
                        (void) rbdm_replace(volume, t->st.real_table);
                (void) remove_snapshot_device(volume, t->armed, t->snap_name);
        } else if (t->snap_created)
                (void) rbdm_remove(t->snap_name);
        if (t->cow_created)
                remove_named(name_cow, s);
        if (t->real_created)
                (void) rbdm_remove(t->st.real_name);
}

/* Undoes create_record(): the record forgotten (if this commit fails too, the next command marks it invalid). */
static void create_forget(struct pool *p, const char *volume, const struct create_target *t, struct snapshot *s) {
        pool_remove_snapshot(p, s);
        if (t->volume_added)
                pool_remove_volume(p, pool_find_volume(p, volume));
        if (pool_commit(p) < 0)
                (void) rb_pool_reload(p);
}

/* Steps and crash points: docs/states.md, "create". */
int rb_snapshot_create(struct pool *p, const char *volume, const struct rb_create *c, char **ret_name) {
        _cleanup_(create_target_done) struct create_target t = {};
        _cleanup_free_ char *name = NULL, *boot_digest = NULL, *entry = NULL;
        struct snapshot *s = NULL;
        int r;

        if (p->devnum == 0)
                return -ENOTBLK;
        make_room_before_suspend(p, volume, NULL);
        r = create_name(p, c, &name);
        if (r < 0)
                return r;
        r = create_read_volume(p, volume, &t);
        /* Taken into the volume before the snapshot, which then holds it. */
        if (r >= 0)
                r = boot_copy_take(volume, &boot_digest);
        /*
         * The GRUB entry's files too, a convenience, so not having one fails
         * nothing: where /boot is on the volume, the new snapshot's first
         * small COW would otherwise take a copy of the initramfs while the
         * daemon that grows it is busy right here.
         */
        if (r >= 0 && boot_entry_keep(p, volume, name, c->description) > 0)
                entry = strdup(name);
        if (r >= 0)
                r = create_record(p, volume, c, TAKE_PTR(name), &t, &s);
        if (r < 0) {
                /* Nothing committed: drop what was added in memory. */
                (void) rb_pool_reload(p);
                if (entry)
                        boot_entry_forget(entry);
                return r;
        }
        rb_crash_point("create-recorded");

        r = create_live(p, volume, &t, s);
        if (r < 0) {
                create_take_down(volume, &t, s, false);
                create_forget(p, volume, &t, s);
                if (entry)
                        boot_entry_forget(entry);
                return r;
        }
        rb_crash_point("create-live");

        /* Armed from here on: the mount count now is no sign of untracked writes at the next boot. */
        (void) volume_record_mount_count(pool_find_volume(p, volume), t.devnum);
        s->boot_digest = TAKE_PTR(boot_digest);
        s->state = SNAPSHOT_ACTIVE;
        /* The boots after an upgrade are on trial until one is good. */
        if (c->upgrade)
                r = rb_trial_open(p, pool_find_volume(p, volume), s->name);
        if (r >= 0)
                r = pool_commit(p);
        if (r < 0) {
                /* Live, but not recorded: take it all down again. */
                create_take_down(volume, &t, s, true);
                create_forget(p, volume, &t, s);
                if (entry)
                        boot_entry_forget(entry);
                return r;
        }
        if (entry)
                (void) rb_boot_menu_update();
        if (ret_name) {
                *ret_name = strdup(s->name);
                if (!*ret_name)
                        return -ENOMEM;
        }
        return 0;
}

int rb_snapshot_delete(struct pool *p, const char *name) {
        _cleanup_free_ char *snap_name = NULL, *volume = NULL;
        _cleanup_(stack_done) struct stack st = {};
        struct rbdm_info info, vinfo;
        struct snapshot *s;
        struct volume *v;
        bool last;
        int r;

        s = pool_find_snapshot(p, name);
        if (!s)
                return -ENOENT;
        if (s->state == SNAPSHOT_MERGING)
                return -EINPROGRESS;
        volume = strdup(s->volume);
        if (!volume)
                return -ENOMEM;
        make_room_before_suspend(p, volume, name);
        s = pool_find_snapshot(p, name);
        if (!s)
                return -ENOENT;
        r = name_snapshot(s, &snap_name);
        if (r < 0)
                return r;
        r = rbdm_info(snap_name, &info);
        if (r < 0)
                return r;
        if (info.exists && info.open_count > 0)
                return -EADDRINUSE;
        last = pool_count_snapshots(p, volume, false) == 1;

        r = rbdm_info(volume, &vinfo);
        if (r < 0)
                return r;
        if (vinfo.exists) {
                r = stack_read(volume, &st);
                if (r < 0)
                        return r;
        }
        /* Invalid before its device goes: a crash from here on never re-arms it as if it had seen every write. */
        if (s->state != SNAPSHOT_INVALID) {
                s->state = SNAPSHOT_INVALID;
                r = pool_commit(p);
                if (r < 0)
                        return r;
        }
        rb_crash_point("delete-invalidated");
        if (info.exists) {
                r = remove_snapshot_device(volume, vinfo.exists && st.backend >= 0, snap_name);
                if (r < 0)
                        return r;
        }
        if (last && vinfo.exists && st.backend >= 0 && !st.merging) {
                r = disarm(volume, &st);
                if (r < 0)
                        return r;
        }
        remove_named(name_cow, s);
        rb_crash_point("delete-removed");

        v = pool_find_volume(p, volume);
        if (v && v->revert && strcmp(v->revert, name) == 0) {
                free(v->revert);
                v->revert = NULL;
        }
        pool_remove_snapshot(p, s);
        if (last && v && !v->merging)
                pool_remove_volume(p, v);
        r = pool_commit(p);
        if (r >= 0)
                boot_entry_drop(name);
        return r;
}

int rb_snapshot_usage(struct pool *p, const struct snapshot *s, struct rb_usage *ret) {
        _cleanup_free_ char *dev = NULL, *status = NULL;
        unsigned long long a, t, m, len;
        const char *params;
        struct rbdm_info info;
        char word[16];
        int r, skip = 0;

        *ret = (struct rb_usage) {};
        if (s->state == SNAPSHOT_MERGING)
                dev = strdup(s->volume);
        else
                r = name_snapshot(s, &dev);
        if (!dev)
                return -ENOMEM;
        r = rbdm_info(dev, &info);
        if (r < 0)
                return r;
        if (!info.exists || !info.live_table)
                return 0;
        r = rbdm_table(dev, true, &status);
        if (r < 0)
                return r;
        ret->present = true;
        /* A suspended merge does not move, in either implementation. */
        ret->stopped = info.suspended;
        /* "start len target <status>" */
        if (sscanf(status, "%*u %llu %*s %n", &len, &skip) < 1 || skip == 0)
                return -EIO;
        ret->volume_sectors = len;
        params = status + skip;
        if (sscanf(params, "%llu/%llu %llu", &a, &t, &m) == 3) {
                ret->allocated = a;
                ret->total = t;
                ret->metadata = m;
                ret->exceptions = a > m ? (a - m) / s->chunk_sectors : 0;
                /* rollback-merge appends its state; upstream's merge has none. */
                if (sscanf(params, "%*u/%*u %*u %*u %15s", word) == 1 && strcmp(word, "stopped") == 0)
                        ret->stopped = true;
        } else
                ret->invalid = true;    /* Invalid, Overflow, Merge failed */
        return 0;
}

int rb_snapshot_extend(struct pool *p, const char *name, uint64_t count) {
        _cleanup_free_ struct extent_run *runs = NULL;
        _cleanup_free_ char *cow = NULL, *table = NULL;
        struct extent_run *all;
        struct snapshot *s;
        size_t n;
        int r;

        s = pool_find_snapshot(p, name);
        if (!s)
                return -ENOENT;
        if (s->state != SNAPSHOT_ACTIVE)
                return -ESTALE;
        r = pool_allocate_extents(p, count, &runs, &n);
        if (r < 0)
                return r;
        all = reallocarray(s->extents, s->n_extents + n, sizeof(*all));
        if (!all)
                return -ENOMEM;
        s->extents = all;
        for (size_t i = 0; i < n; i++) {
                struct extent_run *last = &s->extents[s->n_extents - 1];

                if (last->start + last->count == runs[i].start)
                        last->count += runs[i].count;
                else
                        s->extents[s->n_extents++] = runs[i];
        }
        /* Reserved on disk before the COW can use them. */
        r = pool_commit(p);
        if (r < 0) {
                (void) rb_pool_reload(p);
                return r;
        }
        if ((r = name_cow(s, &cow)) < 0 || (r = table_cow(&p->geo, p->devnum, s, &table)) < 0)
                return r;
        return rbdm_replace(cow, table);
}

/*
 * The upgrade snapshot of a volume that retention deletes next, or NULL:
 * while more than settings.retain are kept, an invalid one (it can never be
 * reverted to) goes before any valid one, the oldest first.  A merging
 * snapshot is not counted, and the one pending revert is never deleted.
 */
struct snapshot *rb_retention_victim(struct pool *p, const char *volume) {
        struct volume *v = pool_find_volume(p, volume);
        struct snapshot *victim = NULL;
        size_t n = 0;

        if (p->meta.settings.retain == 0)
                return NULL;
        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                struct snapshot *s = &p->meta.snapshots[i];

                if (!s->upgrade || strcmp(s->volume, volume) != 0 || s->state == SNAPSHOT_MERGING)
                        continue;
                n++;
                if (v && v->revert && strcmp(v->revert, s->name) == 0)
                        continue;
                if (!victim ||
                    (s->state == SNAPSHOT_INVALID) > (victim->state == SNAPSHOT_INVALID) ||
                    ((s->state == SNAPSHOT_INVALID) == (victim->state == SNAPSHOT_INVALID) &&
                     s->created_usec < victim->created_usec))
                        victim = s;
        }
        return n > p->meta.settings.retain ? victim : NULL;
}

int rb_apply_retention(struct pool *p, const char *volume, unsigned *ret_deleted) {
        unsigned deleted = 0;
        struct snapshot *victim;

        if (ret_deleted)
                *ret_deleted = 0;
        while ((victim = rb_retention_victim(p, volume))) {
                _cleanup_free_ char *name = strdup(victim->name);
                int r;

                if (!name)
                        return -ENOMEM;
                r = rb_snapshot_delete(p, name);
                if (r < 0)
                        return r;
                deleted++;
                if (ret_deleted)
                        *ret_deleted = deleted;
        }
        return 0;
}
