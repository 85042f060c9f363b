/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Bringing the recorded states up to date with what the kernel says.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

#include "boot-copy.h"
#include "dm.h"
#include "evidence.h"
#include "macro.h"
#include "rollback.h"
#include "stack.h"
#include "tables.h"

unsigned invalidate_volume_snapshots(struct pool *p, const char *volume) {
        unsigned n = 0;

        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                struct snapshot *s = &p->meta.snapshots[i];

                if (strcmp(s->volume, volume) == 0 && s->state != SNAPSHOT_INVALID) {
                        s->state = SNAPSHOT_INVALID;
                        n++;
                }
        }
        return n;
}

int rb_refresh_states(struct pool *p, unsigned *ret_changed) {
        unsigned changed = 0;
        bool recorded = false;
        int r;

        /*
         * We hold the lock, so whoever was creating these died on the way:
         * whether or not their device went live, they may have missed writes.
         */
        for (size_t i = 0; i < p->meta.n_snapshots; i++)
                if (p->meta.snapshots[i].state == SNAPSHOT_CREATING) {
                        p->meta.snapshots[i].state = SNAPSHOT_INVALID;
                        changed++;
                }

        /*
         * A volume back on its own table (booted without the early-boot hook)
         * has been written untracked: its snapshots no longer match it.  A
         * merge it was under is over too: resumed later, it would copy the
         * snapshot's chunks over what was written since.
         */
        for (size_t i = 0; i < p->meta.n_volumes; i++) {
                struct volume *v = &p->meta.volumes[i];
                _cleanup_(stack_done) struct stack st = {};
                struct rbdm_info info;

                if (rbdm_info(v->name, &info) < 0 || !info.exists || !info.live_table ||
                    stack_read(v->name, &st) < 0)
                        continue;
                if (st.backend >= 0) {
                        /*
                         * Armed, so every write is tracked: a remount in this
                         * boot must not look like an untracked one at the next.
                         */
                        if (volume_record_mount_count(v, makedev(info.major, info.minor)) > 0)
                                recorded = true;
                        continue;
                }
                changed += invalidate_volume_snapshots(p, v->name);
                remove_stale_stack(p, v->name, &st);
                free(v->merging);
                v->merging = NULL;
                free(v->revert);
                v->revert = NULL;
        }

        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                struct snapshot *s = &p->meta.snapshots[i];
                struct rb_usage u;

                if (s->state != SNAPSHOT_ACTIVE)
                        continue;
                if (rb_snapshot_usage(p, s, &u) < 0 || !u.present || !u.invalid)
                        continue;
                s->state = SNAPSHOT_INVALID;
                changed++;
        }
        if (ret_changed)
                *ret_changed = changed;
        if ((changed > 0 || recorded) && (r = pool_commit(p)) < 0)
                return r;
        /* GRUB's menu offers valid snapshots only; one may have become invalid in early boot, too. */
        if (boot_entries_prune(p) > 0)
                (void) rb_boot_menu_update();
        return 0;
}
