/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Which snapshot targets to use: dm-rollback or upstream dm-snapshot.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dm.h"
#include "macro.h"
#include "rollback.h"
#include "stack.h"
#include "tables.h"

void load_module(const char *module) {
        (void) rb_run((const char *const[]) { "modprobe", "-q", module, NULL }, true);
}

static int backend_available(enum backend b, bool need_merge) {
        const struct backend_targets *t = backend_targets(b);
        int r;

        r = rbdm_has_target(t->origin);
        if (r == 0) {
                load_module(t->module);
                r = rbdm_has_target(t->origin);
        }
        if (r <= 0)
                return r;
        r = rbdm_has_target(t->snapshot);
        if (r <= 0 || !need_merge)
                return r;
        return rbdm_has_target(t->merge);
}

int rb_backend_resolve(enum backend want, bool need_merge, enum backend *ret) {
        int r;

        if (want == BACKEND_AUTO) {
                r = backend_available(BACKEND_ROLLBACK, need_merge);
                if (r > 0) {
                        *ret = BACKEND_ROLLBACK;
                        return 0;
                }
                want = BACKEND_UPSTREAM;
        }
        r = backend_available(want, need_merge);
        if (r == 0 && need_merge && want == BACKEND_ROLLBACK) {
                /* The COW format is the same: a merge can always be done by upstream's target. */
                want = BACKEND_UPSTREAM;
                r = backend_available(want, need_merge);
        }
        if (r < 0)
                return r;
        if (r == 0)
                return -EOPNOTSUPP;
        *ret = want;
        return 0;
}
