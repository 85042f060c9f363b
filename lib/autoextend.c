/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * How much a COW past autoextend_threshold grows: the policy rollbackd
 * follows when a COW fills, and the library before it suspends a volume.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "rollback.h"
#include "stack.h"

static uint64_t sectors_to_extents(const struct pool *p, uint64_t sectors) {
        return DIV_ROUND_UP(sectors, p->geo.extent_sectors);
}

/* Extents of a COW that holds the whole volume: header, chunks, their metadata (16 bytes each). */
static uint64_t whole_volume_extents(const struct pool *p, uint64_t chunk_sectors, uint64_t volume_sectors) {
        uint64_t chunks = DIV_ROUND_UP(volume_sectors, chunk_sectors);
        uint64_t per_metadata_chunk = chunk_sectors * 512 / 16;

        return sectors_to_extents(p, (2 + chunks + chunks / per_metadata_chunk) * chunk_sectors);
}

static uint64_t bytes_to_extents(const struct pool *p, uint64_t bytes) {
        return DIV_ROUND_UP(bytes, p->geo.extent_sectors * 512);
}

/*
 * Whether s is an active, valid snapshot of volume whose COW is present,
 * and not the one named except: then *ret is the room left in its COW.
 */
static bool cow_room(struct pool *p, const struct snapshot *s, const char *volume, const char *except,
                     uint64_t *ret) {
        struct rb_usage u;

        if (s->state != SNAPSHOT_ACTIVE || strcmp(s->volume, volume) != 0 ||
            (except && strcmp(s->name, except) == 0) || rb_snapshot_usage(p, s, &u) < 0 || !u.present ||
            u.invalid)
                return false;
        *ret = u.total > u.allocated ? u.total - u.allocated : 0;
        return true;
}

/* The extents that expected_writes bytes fill in a COW, with the margin, at most a copy of the volume. */
static uint64_t expected_extents(const struct pool *p, uint64_t expected_writes, uint64_t volume_sectors) {
        uint64_t whole = whole_volume_extents(p, p->meta.settings.chunk_sectors, volume_sectors), extents;

        /* Compared first: the margin below cannot wrap. */
        if (expected_writes >= volume_sectors * 512)
                return whole;
        extents = bytes_to_extents(p, expected_writes + expected_writes / 2 + RB_EXPECTED_WRITES_SLACK);
        return extents < whole ? extents : whole;
}

/*
 * The COW a new snapshot of volume starts with: the size asked for, or
 * snapshot_percent of the volume.  Given what the change is expected to
 * write (a package manager's sum of installed sizes), at least that and
 * half again plus RB_EXPECTED_WRITES_SLACK (the files unpacked beside the
 * old ones, the journal, an initramfs rebuilt), but never more than a copy
 * of the whole volume.  Every other active snapshot of the volume copies
 * the same chunks, so the pool must also hold what they lack of that, with
 * an extent to spare for rollbackd.  -ENOSPC when it cannot: better said
 * before the change starts than found when a snapshot overflows.
 */
int rb_initial_cow_extents(struct pool *p, const char *volume, uint64_t volume_sectors, const struct rb_create *c,
                           uint64_t *ret) {
        uint64_t asked = c->size ?: volume_sectors * 512 / 100 * p->meta.settings.snapshot_percent;
        uint64_t extents = bytes_to_extents(p, asked), expected, needed;

        if (c->expected_writes > 0) {
                expected = expected_extents(p, c->expected_writes, volume_sectors);
                needed = expected;
                for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                        uint64_t room, have;

                        if (!cow_room(p, &p->meta.snapshots[i], volume, NULL, &room))
                                continue;
                        have = room / p->geo.extent_sectors;
                        needed += expected > have ? expected - have : 0;
                }
                if (needed >= pool_free_extents(p))
                        return -ENOSPC;
                if (expected > extents)
                        extents = expected;
        }
        *ret = extents ?: 1;
        return 0;
}

uint64_t rb_autoextend_step(const struct pool *p, const struct snapshot *s, const struct rb_usage *u,
                            uint64_t rate) {
        const struct pool_settings *set = &p->meta.settings;
        uint64_t extents = snapshot_extent_count(s), free_extents = pool_free_extents(p);
        uint64_t add = (extents * set->autoextend_percent + 99) / 100;
        uint64_t by_rate = sectors_to_extents(p, rate * RB_GROWTH_HORIZON_SEC);
        uint64_t whole = whole_volume_extents(p, s->chunk_sectors, u->volume_sectors);
        uint64_t room = whole > extents ? whole - extents : 0;

        if (by_rate > free_extents / 2)
                by_rate = free_extents / 2;
        if (by_rate > room)
                by_rate = room;
        if (by_rate > add)
                add = by_rate;
        if (add == 0)
                add = 1;
        return add < free_extents ? add : free_extents;
}

bool rb_autoextend_due(const struct pool *p, const struct snapshot *s, const struct rb_usage *u) {
        return pool_autoextend_enabled(&p->meta.settings) && s->state == SNAPSHOT_ACTIVE && u->present &&
               !u->invalid && u->total > 0 &&
               u->allocated * 100 >= u->total * p->meta.settings.autoextend_threshold;
}

/*
 * Before a suspend of volume (but for the snapshot named except): a suspend ends the waits of writes for a
 * full COW (the kernel invalidates instead, as a suspend must end in
 * bounded time), so each of its snapshots past the threshold grows first,
 * by one step.  Best effort: what cannot grow is left as it is.
 */
void make_room_before_suspend(struct pool *p, const char *volume, const char *except) {
        /* p->meta.snapshots is read again each time: a failed extension reloads the pool. */
        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                const struct snapshot *s = &p->meta.snapshots[i];
                struct rb_usage u;
                uint64_t add;

                if (strcmp(s->volume, volume) != 0 || (except && strcmp(s->name, except) == 0) ||
                    rb_snapshot_usage(p, s, &u) < 0 || !rb_autoextend_due(p, s, &u))
                        continue;
                add = rb_autoextend_step(p, s, &u, 0);
                if (add > 0)
                        (void) rb_snapshot_extend(p, s->name, add);
        }
}

/*
 * Grows each active snapshot of volume (but the one named except) to hold
 * sectors more of writes to the volume: the chunks they copy and their
 * metadata (16 bytes each).  Best effort, while the pool has room.
 */
void make_room_for_writes(struct pool *p, const char *volume, const char *except, uint64_t sectors) {
        _cleanup_free_ char *vol = strdup(volume);

        if (!vol)
                return;
        /* p->meta.snapshots is read again each time: a failed extension reloads the pool. */
        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                const struct snapshot *s = &p->meta.snapshots[i];
                uint64_t chunks, need, room, add;

                if (!cow_room(p, s, vol, except, &room))
                        continue;
                chunks = DIV_ROUND_UP(sectors, s->chunk_sectors);
                need = (chunks + chunks / (s->chunk_sectors * 512 / 16) + 1) * s->chunk_sectors;
                if (room >= need)
                        continue;
                add = sectors_to_extents(p, need - room);
                if (add > pool_free_extents(p))
                        add = pool_free_extents(p);
                if (add > 0)
                        (void) rb_snapshot_extend(p, s->name, add);
        }
}

/*
 * A merge of the snapshot named merging writes each of its chunks into the
 * volume, and every other snapshot of the volume copies what that
 * overwrites.  The merge may run at boot, before rollbackd can grow
 * anything: before a revert, each other snapshot grows to hold it.
 */
void make_room_for_merge(struct pool *p, const char *merging) {
        const struct snapshot *m = pool_find_snapshot(p, merging);
        _cleanup_free_ char *volume = NULL;
        struct rb_usage mu;

        if (!m || rb_snapshot_usage(p, m, &mu) < 0 || !mu.present || mu.invalid)
                return;
        volume = strdup(m->volume);
        if (volume)
                make_room_for_writes(p, volume, merging, mu.exceptions * m->chunk_sectors);
}
