/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * What a pool may say.  rollback-boot reads any block device that carries
 * the magic, as root, before root is mounted: every number and name read
 * from disk is checked here before anything allocates, maps or merges by it.
 */
#include <stdio.h>
#include <string.h>

#include "evidence.h"
#include "pool.h"

static bool ranges_overlap(uint64_t a, uint64_t b, uint64_t len) {
        return a < b ? b - a < len : a - b < len;
}

/* The header's layout fits in the device and in itself; sizes are bounded. */
int pool_geometry_verify(const struct pool_geometry *g, uint64_t device_bytes) {
        uint64_t sectors = device_bytes / 512, slots_end = 0;

        if (g->extent_sectors == 0 || g->extent_sectors % 8 != 0 || g->extent_sectors > POOL_EXTENT_SECTORS_MAX)
                return -EUCLEAN;
        if (g->slot_size < POOL_SLOT_SIZE_MIN || g->slot_size > POOL_SLOT_SIZE_MAX || g->slot_size % 512 != 0)
                return -EUCLEAN;
        for (unsigned i = 0; i < 2; i++) {
                if (g->slot_offset[i] < POOL_HEADER_SIZE || g->slot_offset[i] % 512 != 0 ||
                    g->slot_offset[i] > device_bytes || device_bytes - g->slot_offset[i] < g->slot_size)
                        return -EUCLEAN;
                if (g->slot_offset[i] + g->slot_size > slots_end)
                        slots_end = g->slot_offset[i] + g->slot_size;
        }
        if (ranges_overlap(g->slot_offset[0], g->slot_offset[1], g->slot_size))
                return -EUCLEAN;
        if (g->data_offset > sectors || g->data_offset * 512 < slots_end)
                return -EUCLEAN;
        if (g->extent_count == 0 || g->extent_count > POOL_EXTENT_COUNT_MAX ||
            g->extent_count > (sectors - g->data_offset) / g->extent_sectors)
                return -EUCLEAN;
        return 0;
}

/* A device-mapper name: what DM_NAME_LEN allows, and nothing a path could misread. */
bool dm_name_is_valid(const char *name) {
        size_t n = strlen(name);

        if (n == 0 || n >= 128 || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
                return false;
        for (const char *c = name; *c; c++)
                if (*c == '/' || (unsigned char) *c <= ' ' || (unsigned char) *c >= 0x7f)
                        return false;
        return true;
}

static bool id_is_valid(const char *id) {
        if (strlen(id) != 32)
                return false;
        for (const char *c = id; *c; c++)
                if (!strchr("0123456789abcdef", *c))
                        return false;
        return true;
}

/* Lines "start length target args", as the volume's own table was read. */
static bool table_is_valid(const char *table) {
        size_t n = strlen(table);

        if (n == 0 || n > POOL_TABLE_MAX)
                return false;
        for (const char *line = table; *line;) {
                const char *end = strchrnul(line, '\n');
                unsigned long long start, len;
                int used = 0;

                if (sscanf(line, "%llu %llu %*s%n", &start, &len, &used) != 2 || used == 0 ||
                    line + used > end || len == 0)
                        return false;
                line = *end ? end + 1 : end;
        }
        return true;
}

static const struct snapshot *find_snapshot(const struct pool_meta *m, const char *name) {
        for (size_t i = 0; i < m->n_snapshots; i++)
                if (strcmp(m->snapshots[i].name, name) == 0)
                        return &m->snapshots[i];
        return NULL;
}

static bool volume_exists(const struct pool_meta *m, const char *name) {
        for (size_t i = 0; i < m->n_volumes; i++)
                if (strcmp(m->volumes[i].name, name) == 0)
                        return true;
        return false;
}

/* A snapshot named by a volume's revert, merging or trial must be one of its own. */
static bool names_own_snapshot(const struct pool_meta *m, const struct volume *v, const char *name) {
        const struct snapshot *s;

        if (!name)
                return true;
        s = find_snapshot(m, name);
        return s && strcmp(s->volume, v->name) == 0;
}

static int settings_verify(const struct pool_settings *s) {
        for (size_t i = 0; i < pool_settings_table_size; i++)
                if (!pool_setting_value_is_valid(&pool_settings_table[i],
                                                 pool_setting_value(s, &pool_settings_table[i])))
                        return -EUCLEAN;
        return s->backend >= 0 && s->backend < _BACKEND_MAX ? 0 : -EUCLEAN;
}

static int volumes_verify(const struct pool_meta *m) {
        for (size_t i = 0; i < m->n_volumes; i++) {
                const struct volume *v = &m->volumes[i];

                if (!dm_name_is_valid(v->name) || !table_is_valid(v->table) ||
                    (v->dm_uuid && strlen(v->dm_uuid) >= 129) ||
                    (v->mount_count_known && v->mount_count_max > EXT_MOUNT_COUNT_MAX + 1))
                        return -EUCLEAN;
                for (size_t k = 0; k < i; k++)
                        if (strcmp(m->volumes[k].name, v->name) == 0)
                                return -EUCLEAN;
                if (!names_own_snapshot(m, v, v->revert) || !names_own_snapshot(m, v, v->merging) ||
                    !names_own_snapshot(m, v, v->trial))
                        return -EUCLEAN;
                /* Counting stops at the limit, which is at most AUTO_REVERT_AFTER_MAX. */
                if (v->trial_boots > AUTO_REVERT_AFTER_MAX || (!v->trial && v->trial_boots > 0) ||
                    v->auto_reverted_boots > AUTO_REVERT_AFTER_MAX)
                        return -EUCLEAN;
        }
        return 0;
}

/* Every run inside the pool, no extent in two runs: no COW over another or over the metadata. */
static int extents_verify(const struct pool_meta *m, uint64_t extent_count) {
        _cleanup_free_ uint8_t *used = calloc(extent_count ? extent_count : 1, 1);

        if (!used)
                return -ENOMEM;
        for (size_t i = 0; i < m->n_snapshots; i++) {
                const struct snapshot *s = &m->snapshots[i];

                for (size_t k = 0; k < s->n_extents; k++) {
                        const struct extent_run *run = &s->extents[k];

                        if (run->count == 0 || run->start >= extent_count || run->count > extent_count - run->start)
                                return -EUCLEAN;
                        for (uint64_t e = run->start; e < run->start + run->count; e++) {
                                if (used[e])
                                        return -EUCLEAN;
                                used[e] = 1;
                        }
                }
        }
        return 0;
}

static int snapshots_verify(const struct pool_meta *m) {
        for (size_t i = 0; i < m->n_snapshots; i++) {
                const struct snapshot *s = &m->snapshots[i];

                if (!snapshot_name_is_valid(s->name) || !id_is_valid(s->id) || !volume_exists(m, s->volume) ||
                    !pool_chunk_sectors_is_valid(s->chunk_sectors) || s->n_extents == 0 ||
                    s->state < 0 || s->state >= _SNAPSHOT_STATE_MAX)
                        return -EUCLEAN;
                for (size_t k = 0; k < i; k++)
                        if (strcmp(m->snapshots[k].name, s->name) == 0 || strcmp(m->snapshots[k].id, s->id) == 0)
                                return -EUCLEAN;
        }
        return 0;
}

/* The document means something we can act on; -EUCLEAN when it does not. */
int pool_meta_verify(const struct pool_meta *m, uint64_t extent_count) {
        int r;

        r = settings_verify(&m->settings);
        if (r < 0)
                return r;
        r = volumes_verify(m);
        if (r < 0)
                return r;
        r = snapshots_verify(m);
        if (r < 0)
                return r;
        return extents_verify(m, extent_count);
}
