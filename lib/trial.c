/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Boot assessment: counting the boots after an upgrade until one is good.
 */
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "rollback.h"
#include "strv.h"
#include "trial.h"

static const char *const trial_verdict_table[_TRIAL_VERDICT_MAX] = {
        [TRIAL_NONE] = "none",
        [TRIAL_COUNTED] = "counted",
        [TRIAL_REVERT] = "revert",
};

DEFINE_STRING_TABLE(trial_verdict, enum trial_verdict, _TRIAL_VERDICT_MAX);

int rb_trial_open(struct pool *p, struct volume *v, const char *snapshot) {
        char *name;

        volume_end_trial(v);
        if (p->meta.settings.auto_revert_after == 0)
                return 0;
        name = strdup(snapshot);
        if (!name)
                return -ENOMEM;
        v->trial = name;
        v->trial_start_usec = now_usec(CLOCK_REALTIME);
        /* A new upgrade: an automatic revert before it is history. */
        v->auto_reverted_boots = 0;
        return 1;
}

enum trial_verdict rb_trial_count(struct pool *p, struct volume *v) {
        unsigned limit = p->meta.settings.auto_revert_after;
        const struct snapshot *s;

        if (!v->trial)
                return TRIAL_NONE;
        s = pool_find_snapshot(p, v->trial);
        /* Turned off while on trial, or nothing valid to go back to: the trial is over. */
        if (limit == 0 || !s || s->state != SNAPSHOT_ACTIVE) {
                volume_end_trial(v);
                return TRIAL_NONE;
        }
        /* Boots 1..limit are the trials; the one after them reverts (and each after it, until one can). */
        if (v->trial_boots >= limit)
                return TRIAL_REVERT;
        v->trial_boots++;
        return TRIAL_COUNTED;
}

int rb_trial_mark_good(struct pool *p, const char *volume, char **ret_snapshot) {
        struct volume *v = pool_find_volume(p, volume);
        _cleanup_free_ char *name = NULL;
        int r;

        if (!v || !v->trial) {
                if (ret_snapshot)
                        *ret_snapshot = NULL;
                return 0;
        }
        name = TAKE_PTR(v->trial);
        volume_end_trial(v);
        r = pool_commit(p);
        if (r < 0) {
                (void) rb_pool_reload(p);
                return r;
        }
        if (ret_snapshot)
                *ret_snapshot = TAKE_PTR(name);
        return 1;
}
