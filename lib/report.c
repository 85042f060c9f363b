/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The JSON reports of list and status.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boot-copy.h"
#include "dm.h"
#include "macro.h"
#include "rollback.h"
#include "stack.h"
#include "tables.h"

int rb_list_json(struct pool *p, json_object **ret) {
        json_object *a = json_object_new_array();

        if (!a)
                return -ENOMEM;
        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                const struct snapshot *s = &p->meta.snapshots[i];
                const struct volume *v = pool_find_volume(p, s->volume);
                json_object *o = json_object_new_object();
                uint64_t size = snapshot_extent_count(s) * p->geo.extent_sectors * 512;
                struct rb_usage u;
                _cleanup_free_ char *dev = NULL, *kernel = NULL;
                const char *state = snapshot_state_to_string(s->state);

                if (rb_snapshot_usage(p, s, &u) < 0)
                        u = (struct rb_usage) {};
                if (s->state == SNAPSHOT_ACTIVE && u.invalid)
                        state = snapshot_state_to_string(SNAPSHOT_INVALID);
                json_object_object_add(o, "name", json_object_new_string(s->name));
                json_object_object_add(o, "volume", json_object_new_string(s->volume));
                json_object_object_add(o, "created_usec", json_object_new_uint64(s->created_usec));
                json_object_object_add(o, "description",
                                       s->description ? json_object_new_string(s->description) : NULL);
                json_object_object_add(o, "state", json_object_new_string(state));
                json_object_object_add(o, "upgrade", json_object_new_boolean(s->upgrade));
                json_object_object_add(o, "boot_copy", json_object_new_boolean(s->boot_digest != NULL));
                /* The kernel of its entry in GRUB's menu, which boots it without merging (docs/boot.md). */
                json_object_object_add(o, "boot_entry_kernel",
                                       s->state == SNAPSHOT_ACTIVE && boot_entry_exists(s->name, &kernel) && kernel ?
                                       json_object_new_string(kernel) : NULL);
                json_object_object_add(o, "revert_pending",
                                       json_object_new_boolean(v && v->revert && strcmp(v->revert, s->name) == 0));
                json_object_object_add(o, "size_bytes", json_object_new_uint64(size));
                json_object_object_add(o, "used_bytes", json_object_new_uint64(u.allocated * 512));
                json_object_object_add(o, "used_percent",
                                       json_object_new_double(u.total ? 100.0 * u.allocated / u.total : 0.0));
                json_object_object_add(o, "chunk_sectors", json_object_new_uint64(s->chunk_sectors));
                if (s->state == SNAPSHOT_ACTIVE && name_snapshot(s, &dev) >= 0 && u.present) {
                        char path[PATH_MAX];

                        snprintf(path, sizeof(path), "/dev/mapper/%s", dev);
                        json_object_object_add(o, "device", json_object_new_string(path));
                } else
                        json_object_object_add(o, "device", NULL);
                json_object_array_add(a, o);
        }
        *ret = a;
        return 0;
}

/* Boot assessment: the trial open on v, or NULL. */
static json_object *trial_json(const struct pool *p, const struct volume *v) {
        json_object *o;

        if (!v->trial)
                return NULL;
        o = json_object_new_object();
        json_object_object_add(o, "snapshot", json_object_new_string(v->trial));
        json_object_object_add(o, "boots", json_object_new_uint64(v->trial_boots));
        json_object_object_add(o, "limit", json_object_new_uint64(p->meta.settings.auto_revert_after));
        json_object_object_add(o, "start_usec", json_object_new_uint64(v->trial_start_usec));
        json_object_object_add(o, "failed_check_reboot",
                               json_object_new_boolean(p->meta.settings.failed_check_reboot));
        return o;
}

/* The pending revert or the merge under way was made by a failed trial: to which snapshot, after how many boots. */
static json_object *auto_reverted_json(const struct volume *v) {
        json_object *o = json_object_new_object();

        json_object_object_add(o, "snapshot", json_object_new_string(v->revert ?: v->merging));
        json_object_object_add(o, "boots", json_object_new_uint64(v->auto_reverted_boots));
        return o;
}

int rb_status_json(struct pool *p, json_object **ret) {
        json_object *root = json_object_new_object(), *pool, *volumes, *snapshots;
        uint64_t extent_bytes = p->geo.extent_sectors * 512, free_extents = pool_free_extents(p);
        char uuid[POOL_UUID_STRING_MAX];
        _cleanup_free_ char *viewed = NULL;
        int r;

        if (!root)
                return -ENOMEM;
        /* This boot runs a snapshot through its throwaway view: said first, as nothing written now is kept. */
        json_object_object_add(root, "snapshot_boot",
                               rb_view_booted(&viewed) > 0 ? json_object_new_string(viewed) : NULL);
        pool_uuid_to_string(p->geo.uuid, uuid);
        pool = json_object_new_object();
        json_object_object_add(pool, "device", json_object_new_string(p->path ? p->path : ""));
        json_object_object_add(pool, "uuid", json_object_new_string(uuid));
        json_object_object_add(pool, "extent_size_bytes", json_object_new_uint64(extent_bytes));
        json_object_object_add(pool, "extents_total", json_object_new_uint64(p->geo.extent_count));
        json_object_object_add(pool, "extents_free", json_object_new_uint64(free_extents));
        json_object_object_add(pool, "used_percent",
                               json_object_new_double(p->geo.extent_count ?
                                       100.0 * (p->geo.extent_count - free_extents) / p->geo.extent_count : 0.0));
        json_object_object_add(pool, "metadata_sequence", json_object_new_uint64(p->seq));
        json_object_object_add(pool, "backend",
                               json_object_new_string(backend_to_string(p->meta.settings.backend)));
        json_object_object_add(root, "pool", pool);

        volumes = json_object_new_array();
        for (size_t i = 0; i < p->meta.n_volumes; i++) {
                const struct volume *v = &p->meta.volumes[i];
                json_object *o = json_object_new_object(), *m;
                struct rb_merge_progress mp;
                _cleanup_(stack_done) struct stack st = {};

                json_object_object_add(o, "name", json_object_new_string(v->name));
                json_object_object_add(o, "backend",
                                       stack_read(v->name, &st) >= 0 && st.backend >= 0 ?
                                       json_object_new_string(backend_to_string(st.backend)) : NULL);
                json_object_object_add(o, "revert_pending", v->revert ? json_object_new_string(v->revert) : NULL);
                if (v->merging && rb_merge_poll(p, v->name, false, &mp) >= 0) {
                        m = json_object_new_object();
                        json_object_object_add(m, "snapshot", json_object_new_string(v->merging));
                        json_object_object_add(m, "state", json_object_new_string(merge_state_to_string(mp.state)));
                        json_object_object_add(m, "percent", json_object_new_double(mp.percent));
                        json_object_object_add(m, "chunks_total", json_object_new_uint64(mp.chunks_total));
                        json_object_object_add(m, "chunks_remaining", json_object_new_uint64(mp.chunks_remaining));
                        json_object_object_add(m, "eta_seconds",
                                               mp.eta_seconds >= 0 ? json_object_new_int64(mp.eta_seconds) : NULL);
                } else
                        m = NULL;
                json_object_object_add(o, "merge", m);
                json_object_object_add(o, "trial", trial_json(p, v));
                json_object_object_add(o, "auto_reverted",
                                       v->auto_reverted_boots > 0 && (v->revert || v->merging) ?
                                       auto_reverted_json(v) : NULL);
                json_object_array_add(volumes, o);
        }
        json_object_object_add(root, "volumes", volumes);
        r = rb_list_json(p, &snapshots);
        if (r < 0) {
                json_object_put(root);
                return r;
        }
        json_object_object_add(root, "snapshots", snapshots);
        *ret = root;
        return 0;
}
