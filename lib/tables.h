/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Names and table lines of rollback's devices; pure functions, unit-tested. */

#include <stdint.h>
#include <sys/types.h>

#include "dm.h"
#include "pool.h"

struct backend_targets {
        const char *module;
        const char *origin;
        const char *snapshot;
        const char *merge;
};

const struct backend_targets *backend_targets(enum backend b);
/* Which backend a table's first target belongs to, and whether it merges. */
enum backend backend_of_target(const char *target, bool *ret_merge);

int name_real(const char *volume, char **ret);
int uuid_real(const struct volume *v, char **ret);
int name_snapshot(const struct snapshot *s, char **ret);
int uuid_snapshot(const struct snapshot *s, char **ret);
int name_cow(const struct snapshot *s, char **ret);
/* The view a boot of snapshot s mounts as root; its uuid has VIEW_UUID_PREFIX. */
int name_view(const struct snapshot *s, char **ret);
int uuid_view(const struct snapshot *s, char **ret);
#define VIEW_UUID_PREFIX RB_DM_UUID_PREFIX "VIEW-"
/* The view: upstream's snapshot target with a transient store (N), its writes kept in cow_devt. */
int table_view(uint64_t sectors, const char *snapshot_devt, const char *cow_devt, char **ret);
int uuid_cow(const struct snapshot *s, char **ret);

/* The COW: a linear map of the snapshot's extents on the pool. */
int table_cow(const struct pool_geometry *g, dev_t pool, const struct snapshot *s, char **ret);
int table_origin(enum backend b, uint64_t sectors, const char *real_devt, char **ret);
/*
 * The rollback targets' features (upstream's take none): a table event when
 * no more than low_water_chunks of the COW are free, and writes that wait
 * wait_ms for a full COW to grow.  0 leaves a feature out.
 */
struct cow_features {
        uint64_t low_water_chunks;
        unsigned wait_ms;
};
int table_snapshot(enum backend b, uint64_t sectors, const char *real_devt, const char *cow_devt,
                   uint32_t chunk_sectors, const struct cow_features *f, char **ret);
int table_merge(enum backend b, uint64_t sectors, const char *real_devt, const char *cow_devt,
                uint32_t chunk_sectors, const struct cow_features *f, char **ret);
