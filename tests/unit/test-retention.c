/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Retention: which upgrade snapshot goes next. */
#include <string.h>

#include "pool.h"
#include "rollback.h"
#include "test.h"

static void add(struct pool *p, const char *name, uint64_t created, enum snapshot_state state, bool upgrade) {
        struct snapshot *s = pool_add_snapshot(p);

        CHECK(s);
        s->name = strdup(name);
        s->volume = strdup("vg0-root");
        s->created_usec = created;
        s->state = state;
        s->upgrade = upgrade;
}

static const char *victim(struct pool *p) {
        struct snapshot *s = rb_retention_victim(p, "vg0-root");

        return s ? s->name : "";
}

int main(void) {
        struct pool p = { .fd = -1 };
        struct volume *v;

        pool_settings_default(&p.meta.settings);
        p.meta.settings.retain = 2;
        v = pool_add_volume(&p, "vg0-root", NULL, "0 8 zero\n");
        CHECK(v);
        add(&p, "old", 1, SNAPSHOT_ACTIVE, true);
        add(&p, "manual", 2, SNAPSHOT_ACTIVE, false);
        add(&p, "mid", 3, SNAPSHOT_ACTIVE, true);
        CHECK(strcmp(victim(&p), "") == 0);

        /* Over the limit: the oldest upgrade snapshot; a manual one is never counted. */
        add(&p, "new", 5, SNAPSHOT_ACTIVE, true);
        CHECK(strcmp(victim(&p), "old") == 0);

        /* An invalid one goes first, however new: a valid one is never deleted to keep it. */
        add(&p, "broken", 6, SNAPSHOT_INVALID, true);
        CHECK(strcmp(victim(&p), "broken") == 0);
        pool_remove_snapshot(&p, pool_find_snapshot(&p, "broken"));

        /* The snapshot pending revert stays; the next oldest goes instead. */
        v->revert = strdup("old");
        CHECK(strcmp(victim(&p), "mid") == 0);

        /* A merging one is not counted. */
        pool_find_snapshot(&p, "mid")->state = SNAPSHOT_MERGING;
        CHECK(strcmp(victim(&p), "") == 0);

        p.meta.settings.retain = 0;
        CHECK(strcmp(victim(&p), "") == 0);
        pool_meta_done(&p.meta);
        printf("ok\n");
        return 0;
}
