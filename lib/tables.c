/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/sysmacros.h>

#include "dm.h"
#include "tables.h"

static const struct backend_targets targets[_BACKEND_MAX] = {
        [BACKEND_ROLLBACK] = { "dm-rollback", "rollback-origin", "rollback-snap", "rollback-merge" },
        [BACKEND_UPSTREAM] = { "dm-snapshot", "snapshot-origin", "snapshot", "snapshot-merge" },
};

const struct backend_targets *backend_targets(enum backend b) {
        if (b != BACKEND_ROLLBACK && b != BACKEND_UPSTREAM)
                return NULL;
        return &targets[b];
}

enum backend backend_of_target(const char *target, bool *ret_merge) {
        for (enum backend b = BACKEND_ROLLBACK; b <= BACKEND_UPSTREAM; b++) {
                if (strcmp(target, targets[b].origin) == 0) {
                        *ret_merge = false;
                        return b;
                }
                if (strcmp(target, targets[b].merge) == 0) {
                        *ret_merge = true;
                        return b;
                }
        }
        *ret_merge = false;
        return _BACKEND_INVALID;
}

static int format(char **ret, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int format(char **ret, const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = vasprintf(ret, fmt, ap);
        va_end(ap);
        return r < 0 ? -ENOMEM : 0;
}

int name_real(const char *volume, char **ret) {
        return format(ret, RB_DM_NAME_PREFIX "%s-real", volume);
}

int uuid_real(const struct volume *v, char **ret) {
        return format(ret, RB_DM_UUID_PREFIX "REAL-%s", v->dm_uuid ? v->dm_uuid : v->name);
}

int name_snapshot(const struct snapshot *s, char **ret) {
        return format(ret, RB_DM_NAME_PREFIX "%s", s->name);
}

int uuid_snapshot(const struct snapshot *s, char **ret) {
        return format(ret, RB_DM_UUID_PREFIX "SNAP-%s", s->id);
}

int name_cow(const struct snapshot *s, char **ret) {
        return format(ret, RB_DM_NAME_PREFIX "%s-cow", s->name);
}

int uuid_cow(const struct snapshot *s, char **ret) {
        return format(ret, RB_DM_UUID_PREFIX "COW-%s", s->id);
}

int name_view(const struct snapshot *s, char **ret) {
        return format(ret, RB_DM_NAME_PREFIX "%s-view", s->name);
}

int uuid_view(const struct snapshot *s, char **ret) {
        return format(ret, VIEW_UUID_PREFIX "%s", s->id);
}

int table_view(uint64_t sectors, const char *snapshot_devt, const char *cow_devt, char **ret) {
        return format(ret, "0 %" PRIu64 " %s %s %s N 8\n", sectors, targets[BACKEND_UPSTREAM].snapshot,
                      snapshot_devt, cow_devt);
}

int table_cow(const struct pool_geometry *g, dev_t pool, const struct snapshot *s, char **ret) {
        _cleanup_free_ char *t = strdup("");
        uint64_t start = 0;

        if (!t)
                return -ENOMEM;
        for (size_t i = 0; i < s->n_extents; i++) {
                const struct extent_run *e = &s->extents[i];
                uint64_t len = e->count * g->extent_sectors;
                char *n;

                if (e->start + e->count > g->extent_count)
                        return -ERANGE;
                if (asprintf(&n, "%s%" PRIu64 " %" PRIu64 " linear %u:%u %" PRIu64 "\n", t, start, len,
                             major(pool), minor(pool), g->data_offset + e->start * g->extent_sectors) < 0)
                        return -ENOMEM;
                free(t);
                t = n;
                start += len;
        }
        if (start == 0)
                return -EINVAL;
        *ret = TAKE_PTR(t);
        return 0;
}

int table_origin(enum backend b, uint64_t sectors, const char *real_devt, char **ret) {
        const struct backend_targets *t = backend_targets(b);

        if (!t)
                return -EINVAL;
        return format(ret, "0 %" PRIu64 " %s %s\n", sectors, t->origin, real_devt);
}

static int table_cow_user(enum backend b, bool merge, uint64_t sectors, const char *real_devt,
                          const char *cow_devt, uint32_t chunk_sectors, const struct cow_features *f,
                          char **ret) {
        const struct backend_targets *t = backend_targets(b);
        char features[96] = "";
        unsigned words = 0;
        int n = 0;

        if (!t)
                return -EINVAL;
        /* Upstream's targets take none of these: the table stays theirs. */
        if (f && b == BACKEND_ROLLBACK) {
                if (f->low_water_chunks > 0) {
                        n += snprintf(features + n, sizeof(features) - n, " low_water_mark %" PRIu64,
                                      f->low_water_chunks);
                        words += 2;
                }
                if (f->wait_ms > 0) {
                        n += snprintf(features + n, sizeof(features) - n, " no_space queue %u", f->wait_ms);
                        words += 3;
                }
        }
        if (words == 0)
                return format(ret, "0 %" PRIu64 " %s %s %s P %" PRIu32 "\n", sectors,
                              merge ? t->merge : t->snapshot, real_devt, cow_devt, chunk_sectors);
        return format(ret, "0 %" PRIu64 " %s %s %s P %" PRIu32 " %u%s\n", sectors, merge ? t->merge : t->snapshot,
                      real_devt, cow_devt, chunk_sectors, words, features);
}

int table_snapshot(enum backend b, uint64_t sectors, const char *real_devt, const char *cow_devt,
                   uint32_t chunk_sectors, const struct cow_features *f, char **ret) {
        return table_cow_user(b, false, sectors, real_devt, cow_devt, chunk_sectors, f, ret);
}

int table_merge(enum backend b, uint64_t sectors, const char *real_devt, const char *cow_devt,
                uint32_t chunk_sectors, const struct cow_features *f, char **ret) {
        return table_cow_user(b, true, sectors, real_devt, cow_devt, chunk_sectors, f, ret);
}
