/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The pool: a block device holding rollback's metadata and the COW space of
 * every snapshot, handed out in extents.
 *
 * On disk (all integers little endian):
 *   bytes 0..4095       header: magic, geometry, uuid, CRC32
 *   two metadata slots  each a 32-byte slot header (magic, sequence number,
 *                       length, CRC32 of the document, CRC32 of the slot
 *                       header) followed by the JSON document
 *   data_offset..       extent 0, extent 1, ...
 * An update writes the slot not holding the newest valid document, so a torn
 * write leaves the older slot as the one that is read.
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "macro.h"

#define POOL_MAGIC "RBPOOL01"
#define POOL_SLOT_MAGIC "RBMETA01"
#define POOL_HEADER_SIZE 4096u
#define POOL_SLOT_HEADER_SIZE 32u
/* No pool counts that far: a slot at or past it is damaged, a commit that would reach it refused. */
#define POOL_SEQ_LIMIT (UINT64_C(1) << 63)
#define POOL_SLOT_SIZE_DEFAULT (1024u * 1024u)
#define POOL_EXTENT_SECTORS_DEFAULT 8192u /* 4 MiB, as LVM */
#define POOL_NAME_MAX 64
#define AUTO_REVERT_AFTER_MAX 100u

enum backend {
        BACKEND_AUTO,
        BACKEND_ROLLBACK,
        BACKEND_UPSTREAM,
        _BACKEND_MAX,
        _BACKEND_INVALID = -EINVAL,
};

enum snapshot_state {
        SNAPSHOT_ACTIVE,    /* tracking writes, can be reverted to */
        SNAPSHOT_INVALID,   /* overflowed or failed: never offered for revert */
        SNAPSHOT_MERGING,   /* being merged back into its volume */
        SNAPSHOT_CREATING,  /* recorded, owning its extents, not yet live: see docs/states.md */
        _SNAPSHOT_STATE_MAX,
        _SNAPSHOT_STATE_INVALID = -EINVAL,
};

const char *backend_to_string(enum backend b);
enum backend backend_from_string(const char *s);
const char *snapshot_state_to_string(enum snapshot_state s);
enum snapshot_state snapshot_state_from_string(const char *s);

struct extent_run {
        uint64_t start;
        uint64_t count;
};

struct snapshot {
        char *name;
        char *id;               /* 32 hex digits, used in dm names and UUIDs */
        char *volume;           /* dm name of the volume */
        char *description;
        uint64_t created_usec;  /* CLOCK_REALTIME */
        uint32_t chunk_sectors;
        enum snapshot_state state;
        bool upgrade;           /* taken before a package upgrade: retention applies */
        char *boot_digest;      /* SHA-256 of the manifest of the /boot copy it holds, or NULL: boot-copy.h */
        struct extent_run *extents;
        size_t n_extents;
};

struct volume {
        char *name;             /* dm name of the volume, e.g. "vg0-root" */
        char *dm_uuid;
        char *table;            /* the volume's own table, lines "start len target args" */
        char *revert;           /* snapshot to merge at the next boot, or NULL */
        char *merging;          /* snapshot being merged now, or NULL */
        char *boot_replaced;    /* digest of the /boot a pending revert replaced, kept for cancel-revert, or NULL */
        uint64_t merge_start_usec;
        uint64_t merge_start_chunks;    /* exceptions to merge when it started */
        /*
         * The highest ext mount count (s_mnt_count) its filesystem may show
         * at the next arming if only boots that armed it mounted it; a higher
         * one means writes its snapshots missed (lib/evidence.h).  Not known
         * for other filesystems and for pools of older versions.
         */
        bool mount_count_known;
        uint64_t mount_count_max;
        /*
         * The upgrade snapshot whose following boots are on trial (boot
         * assessment, lib/trial.c), or NULL: the boots counted since, none of
         * them marked good yet, and when the trial started.
         */
        char *trial;
        uint64_t trial_boots;
        uint64_t trial_start_usec;
        /* The pending revert or the merge under way was automatic, after this many trial boots; 0: it was not. */
        uint64_t auto_reverted_boots;
};

struct pool_settings {
        unsigned autoextend_threshold;  /* percent full that triggers an extension */
        unsigned autoextend_percent;    /* grow by this percent of the COW size */
        unsigned pool_warn_percent;     /* warn when the pool is this full */
        unsigned retain;                /* upgrade snapshots to keep, 0 = all */
        unsigned snapshot_percent;      /* initial COW size, percent of the volume */
        unsigned full_wait_seconds;     /* writes wait for a full COW to grow (rollback targets), 0 = not */
        unsigned auto_revert_after;     /* trial boots not marked good before the next one reverts, 0 = never */
        unsigned failed_check_reboot;   /* 1: a failed health check reboots a trial boot into the next one */
        uint32_t chunk_sectors;
        enum backend backend;
};

struct pool_meta {
        struct pool_settings settings;
        struct volume *volumes;
        size_t n_volumes;
        struct snapshot *snapshots;
        size_t n_snapshots;
};

struct pool_geometry {
        uint8_t uuid[16];
        uint64_t extent_sectors;
        uint64_t extent_count;
        uint64_t data_offset;           /* sectors */
        uint64_t slot_offset[2];        /* bytes */
        uint64_t slot_size;             /* bytes */
};

struct pool {
        int fd;
        char *path;
        unsigned foreign;               /* other devices with the magic, ignored when it was found */
        dev_t devnum;                   /* 0 when the pool is a regular file (tests) */
        struct pool_geometry geo;
        uint64_t seq;                   /* sequence number of the loaded document */
        unsigned slot;                  /* slot it was read from */
        struct pool_meta meta;
};

void pool_settings_default(struct pool_settings *s);

/* The numeric settings: one table for the pool's document, the CLI and the daemon. */
struct pool_setting {
        const char *key;
        size_t offset;          /* of an unsigned in struct pool_settings */
        unsigned max;
        bool chunk_size;        /* a power of two, at least 8 sectors */
};
extern const struct pool_setting pool_settings_table[];
extern const size_t pool_settings_table_size;
bool pool_setting_value_is_valid(const struct pool_setting *s, uint64_t value);
bool pool_chunk_sectors_is_valid(uint64_t sectors);
static inline unsigned *pool_setting_field(struct pool_settings *settings, const struct pool_setting *s) {
        return (unsigned *) ((char *) settings + s->offset);
}
static inline unsigned pool_setting_value(const struct pool_settings *settings, const struct pool_setting *s) {
        return *(const unsigned *) ((const char *) settings + s->offset);
}

/*
 * Bounds of what a pool may say on disk.  Anything outside them is a damaged
 * or hostile pool, refused with -EUCLEAN before anything acts on it.
 */
#define POOL_SLOT_SIZE_MIN 4096u
#define POOL_SLOT_SIZE_MAX (64u << 20)
#define POOL_EXTENT_SECTORS_MAX (1u << 24)      /* 8 GiB */
#define POOL_EXTENT_COUNT_MAX (1u << 24)        /* 64 TiB of 4 MiB extents; the used map is a byte each */
#define POOL_TABLE_MAX 65536u

int pool_geometry_verify(const struct pool_geometry *g, uint64_t device_bytes);
int pool_meta_verify(const struct pool_meta *m, uint64_t extent_count);
bool dm_name_is_valid(const char *name);

/* Writes a new, empty pool over the whole of fd (size bytes). */
int pool_format(int fd, uint64_t size, uint64_t extent_sectors, const struct pool_settings *settings);

/* -ENOMEDIUM when fd holds no pool, -EBADMSG when no slot is valid. The pool keeps a dup of fd. */
int pool_load(int fd, struct pool **ret);
int pool_open(const char *path, bool writable, struct pool **ret);
/* The pool's UUID from its header alone: -ENOMEDIUM without the magic, -EBADMSG for a bad header. */
int pool_probe(int fd, uint8_t ret_uuid[16]);
#define POOL_UUID_STRING_MAX 37
void pool_uuid_to_string(const uint8_t uuid[16], char ret[POOL_UUID_STRING_MAX]);
int pool_uuid_from_string(const char *s, uint8_t ret[16]);
int pool_commit(struct pool *p);
struct pool *pool_free(struct pool *p);
static inline void pool_freep(struct pool **p) {
        pool_free(*p);
}
#define _cleanup_pool_ _cleanup_(pool_freep)

/* The document, exposed for tests and for rollbackctl --json. */
int pool_meta_to_json(const struct pool_meta *m, char **ret);
int pool_meta_from_json(const char *text, struct pool_meta *m);
void pool_meta_done(struct pool_meta *m);

/* Lookups; NULL when absent. */
struct snapshot *pool_find_snapshot(struct pool *p, const char *name);
struct volume *pool_find_volume(struct pool *p, const char *name);
struct volume *pool_add_volume(struct pool *p, const char *name, const char *dm_uuid, const char *table);
struct snapshot *pool_add_snapshot(struct pool *p);
void pool_remove_snapshot(struct pool *p, struct snapshot *s);
void pool_remove_volume(struct pool *p, struct volume *v);
void volume_end_trial(struct volume *v);
size_t pool_count_snapshots(struct pool *p, const char *volume, bool only_live);

/* Extents. */
uint64_t pool_free_extents(const struct pool *p);
int pool_allocate_extents(const struct pool *p, uint64_t count, struct extent_run **ret, size_t *ret_n);
uint64_t snapshot_extent_count(const struct snapshot *s);
/* rollbackd extends COWs past autoextend_threshold by autoextend_percent. */
bool pool_autoextend_enabled(const struct pool_settings *s);

bool snapshot_name_is_valid(const char *name);
int snapshot_id_new(char **ret);

uint32_t crc32_le(uint32_t crc, const void *data, size_t len);
