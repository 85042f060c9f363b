/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The operations on snapshots of volumes: what rollbackctl asks for and
 * rollbackd does.  Each takes the pool locked and loaded, changes the
 * device-mapper stack and the metadata together, and on failure undoes its
 * dm changes and leaves the metadata as it was.
 */

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "pool.h"
#include "trial.h"

#define RB_LOCK_PATH "/run/rollback.lock"
/* Why a snapshot can be invalid, for every message that says it is. */
#define RB_INVALID_WHY "its COW overflowed or failed, a crash caught it being created or deleted, or its " \
        "volume was written without it (booted without rollback, or its table replaced, as by lvextend)"

/* An exclusive lock over the pool for one operation; -1 is "not held". */
int rb_lock(int *ret_fd);

/*
 * The pool's identity: init records its UUID here, the dracut module copies
 * it into the initramfs, and every program opens only that pool.
 */
#define RB_POOL_ID_DIR "/etc/rollback"
#define RB_POOL_ID_PATH RB_POOL_ID_DIR "/pool-uuid"
int rb_pool_recorded(uint8_t ret_uuid[16]);
int rb_pool_record(const uint8_t uuid[16]);

/*
 * Finds the pool among the block devices: the one whose UUID is want, or when
 * want is NULL the one recorded by init, or with nothing recorded the only
 * device with the magic.  Other devices with the magic are ignored and
 * counted.  -ENXIO when the pool asked for is not there, -ENOMEDIUM when no
 * pool is, -ENOTUNIQ when two devices match.
 */
int rb_pool_find(const uint8_t *want, char **ret_path, unsigned *ret_foreign);
/* 1 and the type (libblkid's name) when the device carries a filesystem, RAID, LVM or partition signature. */
int rb_device_signature(int fd, char **ret_type);
/* Opens path, a pool by "UUID=<32 hex digits>", or with NULL the one rb_pool_find() finds. */
int rb_pool_open(const char *path, struct pool **ret);
int rb_pool_reload(struct pool *p);

/* The dm name of a volume given as NULL (the root filesystem), a path, or a dm name. */
int rb_volume_resolve(const char *arg, char **ret_name);

/*
 * The backend to use: want, or for auto dm-rollback when its targets load and
 * upstream dm-snapshot otherwise.  A merge falls back to upstream's
 * snapshot-merge when dm-rollback has no merge target.
 */
int rb_backend_resolve(enum backend want, bool need_merge, enum backend *ret);

struct rb_create {
        const char *name;         /* NULL: made from the time */
        const char *description;
        uint64_t size;            /* bytes of COW; 0: settings.snapshot_percent of the volume */
        uint64_t expected_writes; /* bytes the change is expected to write, 0 unknown: see rb_initial_cow_extents() */
        bool upgrade;             /* taken by a package-manager hook: subject to retention */
};

int rb_snapshot_create(struct pool *p, const char *volume, const struct rb_create *c, char **ret_name);
int rb_snapshot_delete(struct pool *p, const char *name);
/* keep_boot: leave the volume's /boot as it is instead of putting back the snapshot's copy (boot-copy.h). */
int rb_revert(struct pool *p, const char *name, bool now, bool keep_boot);
/* keep_boot: leave /boot as the revert made it instead of putting back the one it replaced. */
int rb_cancel_revert(struct pool *p, const char *volume, bool keep_boot);

/* Grows a snapshot's COW by count extents. */
int rb_snapshot_extend(struct pool *p, const char *name, uint64_t count);

struct rb_usage {
        bool present;             /* the dm device exists */
        bool invalid;             /* the kernel says Invalid / Overflow / Merge failed */
        bool stopped;             /* a merge that is not moving: its device suspended, or the target says "stopped" */
        uint64_t allocated;       /* sectors */
        uint64_t total;
        uint64_t metadata;
        uint64_t exceptions;      /* chunks copied (to merge, under a merge) */
        uint64_t volume_sectors;  /* the size of the volume it is of (its device's) */
};

int rb_snapshot_usage(struct pool *p, const struct snapshot *s, struct rb_usage *ret);

/*
 * A COW grows by what RB_GROWTH_HORIZON_SEC of writes at the rate seen need, when more than autoextend_percent:
 * the mark is not crossed again before the growth is done.
 */
#define RB_GROWTH_HORIZON_SEC 5
/* Added to an expected-writes estimate: what a package change writes beyond its packages' installed size. */
#define RB_EXPECTED_WRITES_SLACK (UINT64_C(64) << 20)
/* The extents a new snapshot's COW starts with; -ENOSPC if the pool cannot hold c->expected_writes. */
int rb_initial_cow_extents(struct pool *p, const char *volume, uint64_t volume_sectors, const struct rb_create *c,
                           uint64_t *ret);
/* Whether s is past autoextend_threshold (and may grow); by how many extents (0: the pool is full), rate in sectors/s. */
bool rb_autoextend_due(const struct pool *p, const struct snapshot *s, const struct rb_usage *u);
uint64_t rb_autoextend_step(const struct pool *p, const struct snapshot *s, const struct rb_usage *u, uint64_t rate);

enum merge_state {
        MERGE_NONE,
        MERGE_RUNNING,
        MERGE_FAILED,
        MERGE_DONE,
        MERGE_PENDING,          /* recorded, not loaded: it goes on at the next boot */
        MERGE_STOPPED,          /* loaded, chunks left, but not moving (suspended, or stopped by the target) */
        _MERGE_STATE_MAX,
        _MERGE_STATE_INVALID = -EINVAL,
};
const char *merge_state_to_string(enum merge_state s);

struct rb_merge_progress {
        enum merge_state state;
        uint64_t chunks_total;
        uint64_t chunks_remaining;
        double percent;
        int64_t eta_seconds;      /* -1: unknown */
};

/* Reads a volume's merge progress; with finish, cleans up a finished merge. */
int rb_merge_poll(struct pool *p, const char *volume, bool finish, struct rb_merge_progress *ret);

/*
 * Checks every snapshot against the kernel: an invalid one is marked so in
 * the metadata (ret_changed counts them).
 */
int rb_refresh_states(struct pool *p, unsigned *ret_changed);

/* Applies retention: deletes upgrade snapshots beyond settings.retain, invalid ones first, then the oldest. */
int rb_apply_retention(struct pool *p, const char *volume, unsigned *ret_deleted);
struct snapshot *rb_retention_victim(struct pool *p, const char *volume);

/* The data model of list and status, as JSON with stable snake_case keys. */
int rb_list_json(struct pool *p, json_object **ret);
int rb_status_json(struct pool *p, json_object **ret);

/* Takes the lock, then opens and loads the pool (found when path is NULL). */
int rb_pool_open_locked(const char *path, struct pool **ret_pool, int *ret_lock);

struct rb_boot_report {
        enum backend backend;
        unsigned armed;                 /* snapshots tracking writes again */
        unsigned invalidated;           /* snapshots that could not be re-armed */
        char *merging;                  /* snapshot being merged, or NULL */
        bool merge_started;             /* the merge was a pending revert */
        bool already;                   /* the volume was armed already */
        bool merge_blocked;             /* a merge, pending or under way, could not be loaded: do not mount */
        /*
         * The volume's filesystem was mounted read-write while its snapshots
         * were not armed (its mount count is past the one recorded): its
         * active snapshots are marked invalid (untracked counts them) and a
         * pending revert is refused; a merge under way goes on.
         */
        bool written_unarmed;
        unsigned mount_count;
        unsigned mount_count_max;
        unsigned untracked;
        char *revert_refused;           /* the snapshot whose pending revert was refused, or NULL */
        /* Boot assessment: this boot's verdict, and the trial's snapshot, boots counted and limit. */
        enum trial_verdict trial;
        char *trial_snapshot;
        unsigned trial_boots;
        unsigned trial_limit;
};

/*
 * Early boot, before the volume is mounted: LVM has just activated it with
 * its own table.  Rebuilds origin, snapshots and COWs from the metadata and,
 * when a revert is pending or a merge was running, loads the merge table.
 * A snapshot that cannot be re-armed is marked invalid: writes to the volume
 * would no longer be tracked by it.  When a merge cannot be loaded, nothing
 * is invalidated and the merge stays for the next boot (a merge under way
 * as it was, a pending revert pending again); merge_blocked says the volume
 * must not be mounted.  Before that, a volume mounted read-write since it was
 * last armed (written_unarmed) has its snapshots invalidated; once armed, the
 * mount count it may show at the next boot is recorded.  With no revert
 * pending or merge under way, a boot of a volume on trial is counted
 * (trial) unless count_trial is false (a boot of a snapshot's view, which
 * is no boot of the upgrade): TRIAL_REVERT asks the caller for
 * rb_auto_revert().
 */
int rb_boot_volume(struct pool *p, const char *volume, bool count_trial, struct rb_boot_report *ret);

/*
 * Early boot, the volume armed and not mounted, its trial failed: mounts it
 * at dir (and its /boot, from its fstab), reverts to the trial's snapshot as
 * rb_revert() does, recorded as automatic, and unmounts.  The caller
 * reboots; *ret_snapshot: the snapshot reverted to.
 */
/*
 * Booting a snapshot without merging it (view.c).  rb_view_create: in early
 * boot, the view of snapshot name that root is mounted from (-ENODEV when
 * its device is not up, -ESTALE when not active, -EINPROGRESS when merging).
 * rb_view_booted: 1 and the snapshot's name when root is such a view.
 * rb_boot_menu_update: writes the menu that GRUB's "Rollback snapshots"
 * submenu sources (RB_BOOT_MENU), from the entries in /boot/rollback.
 */
int rb_view_create(struct pool *p, const char *name);
/* Runs argv[0] (from PATH) and waits: its exit status, or -errno (-ENOENT: not found); quiet: no output. */
int rb_run(const char *const argv[], bool quiet);
int rb_view_booted(char **ret_snapshot);
#define RB_BOOT_MENU "/boot/rollback/.grub.cfg"
int rb_boot_menu_update(void);

int rb_auto_revert(struct pool *p, const char *volume, const char *dir, char **ret_snapshot);
