/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Boot assessment: counting the boots after an upgrade, and what the pool accepts of it. */
#include <string.h>

#include "pool.h"
#include "rollback.h"
#include "test.h"
#include "trial.h"

static struct snapshot *add(struct pool *p, const char *name) {
        struct snapshot *s = pool_add_snapshot(p);

        CHECK(s);
        s->name = strdup(name);
        s->id = strdup("00000000000000000000000000000001");
        s->volume = strdup("vg0-root");
        s->chunk_sectors = 8;
        s->state = SNAPSHOT_ACTIVE;
        s->upgrade = true;
        s->extents = calloc(1, sizeof(*s->extents));
        CHECK(s->extents);
        s->extents[0] = (struct extent_run) { .start = 0, .count = 1 };
        s->n_extents = 1;
        return s;
}

/* The document round trip keeps the trial, and pool_meta_verify() takes it. */
static int round_trip(struct pool *p, struct pool_meta *ret) {
        _cleanup_free_ char *text = NULL;

        CHECK_R(pool_meta_to_json(&p->meta, &text));
        *ret = (struct pool_meta) {};
        CHECK_R(pool_meta_from_json(text, ret));
        return pool_meta_verify(ret, 16);
}

int main(void) {
        struct pool p = { .fd = -1 };
        struct pool_meta m;
        struct volume *v;

        pool_settings_default(&p.meta.settings);
        CHECK(p.meta.settings.auto_revert_after == 3);
        v = pool_add_volume(&p, "vg0-root", NULL, "0 8 zero\n");
        CHECK(v);
        add(&p, "upgrade-1");

        /* No trial: nothing is counted. */
        CHECK(rb_trial_count(&p, v) == TRIAL_NONE);

        /* Three trial boots, the fourth reverts, and every later one asks again until it is done. */
        CHECK(rb_trial_open(&p, v, "upgrade-1") == 1);
        for (unsigned i = 1; i <= 3; i++) {
                CHECK(rb_trial_count(&p, v) == TRIAL_COUNTED);
                CHECK(v->trial_boots == i);
        }
        CHECK(rb_trial_count(&p, v) == TRIAL_REVERT);
        CHECK(rb_trial_count(&p, v) == TRIAL_REVERT);
        CHECK(v->trial_boots == 3);
        CHECK(round_trip(&p, &m) == 0);
        CHECK(strcmp(m.volumes[0].trial, "upgrade-1") == 0 && m.volumes[0].trial_boots == 3);
        pool_meta_done(&m);

        /* A trial naming another volume's snapshot, or none with boots counted, is a damaged pool. */
        free(v->trial);
        v->trial = strdup("missing");
        CHECK(round_trip(&p, &m) == -EUCLEAN);
        pool_meta_done(&m);
        free(v->trial);
        v->trial = NULL;
        CHECK(pool_meta_verify(&p.meta, 16) == -EUCLEAN);
        v->trial_boots = 0;
        CHECK(pool_meta_verify(&p.meta, 16) == 0);

        /* auto_revert_after=1: the first boot is the trial, the second reverts. */
        p.meta.settings.auto_revert_after = 1;
        CHECK(rb_trial_open(&p, v, "upgrade-1") == 1);
        CHECK(rb_trial_count(&p, v) == TRIAL_COUNTED);
        CHECK(rb_trial_count(&p, v) == TRIAL_REVERT);

        /* Turned off: no trial opens, and one open already ends at the next boot. */
        p.meta.settings.auto_revert_after = 0;
        CHECK(rb_trial_count(&p, v) == TRIAL_NONE);
        CHECK(!v->trial && v->trial_boots == 0);
        CHECK(rb_trial_open(&p, v, "upgrade-1") == 0);
        CHECK(!v->trial);

        /* A snapshot that went invalid has nothing to revert to: its trial ends. */
        p.meta.settings.auto_revert_after = 3;
        CHECK(rb_trial_open(&p, v, "upgrade-1") == 1);
        pool_find_snapshot(&p, "upgrade-1")->state = SNAPSHOT_INVALID;
        CHECK(rb_trial_count(&p, v) == TRIAL_NONE);
        CHECK(!v->trial);

        /* A deleted one ends it too. */
        pool_find_snapshot(&p, "upgrade-1")->state = SNAPSHOT_ACTIVE;
        CHECK(rb_trial_open(&p, v, "upgrade-1") == 1);
        CHECK(rb_trial_count(&p, v) == TRIAL_COUNTED);
        pool_remove_snapshot(&p, pool_find_snapshot(&p, "upgrade-1"));
        CHECK(!v->trial && v->trial_boots == 0);

        CHECK(strcmp(trial_verdict_to_string(TRIAL_REVERT), "revert") == 0);
        pool_meta_done(&p.meta);
        printf("ok\n");
        return 0;
}
