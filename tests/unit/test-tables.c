/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Table lines and device names for both backends. */
#include <string.h>
#include <sys/sysmacros.h>

#include "dm.h"
#include "tables.h"
#include "test.h"

static void expect(char *got, const char *want) {
        if (strcmp(got, want) != 0) {
                fprintf(stderr, "got  '%s'\nwant '%s'\n", got, want);
                exit(1);
        }
        free(got);
}

int main(void) {
        struct pool_geometry g = { .extent_sectors = 8192, .extent_count = 100, .data_offset = 8192 };
        struct extent_run runs[] = { { 3, 2 }, { 10, 1 } };
        struct snapshot s = { .name = (char *) "pre", .id = (char *) "00ff", .extents = runs, .n_extents = 2 };
        struct volume v = { .name = (char *) "vg0-root", .dm_uuid = (char *) "LVM-xyz" };
        struct extent_run bad = { 99, 2 };
        char *t;
        bool merge;

        CHECK_R(table_cow(&g, makedev(254, 3), &s, &t));
        expect(t, "0 16384 linear 254:3 32768\n16384 8192 linear 254:3 90112\n");
        s.extents = &bad;
        s.n_extents = 1;
        CHECK(table_cow(&g, makedev(254, 3), &s, &t) == -ERANGE);

        CHECK_R(table_origin(BACKEND_ROLLBACK, 2048, "254:1", &t));
        expect(t, "0 2048 rollback-origin 254:1\n");
        CHECK_R(table_origin(BACKEND_UPSTREAM, 2048, "254:1", &t));
        expect(t, "0 2048 snapshot-origin 254:1\n");
        CHECK_R(table_snapshot(BACKEND_ROLLBACK, 2048, "254:1", "254:2", 8, NULL, &t));
        expect(t, "0 2048 rollback-snap 254:1 254:2 P 8\n");
        CHECK_R(table_snapshot(BACKEND_UPSTREAM, 2048, "254:1", "254:2", 16, NULL, &t));
        expect(t, "0 2048 snapshot 254:1 254:2 P 16\n");
        CHECK_R(table_merge(BACKEND_UPSTREAM, 2048, "254:1", "254:2", 8, NULL, &t));
        expect(t, "0 2048 snapshot-merge 254:1 254:2 P 8\n");
        CHECK_R(table_merge(BACKEND_ROLLBACK, 2048, "254:1", "254:2", 8, NULL, &t));
        expect(t, "0 2048 rollback-merge 254:1 254:2 P 8\n");
        /* Features: the rollback targets' only, counted in words. */
        CHECK_R(table_snapshot(BACKEND_ROLLBACK, 2048, "254:1", "254:2", 8,
                               &(struct cow_features) { .low_water_chunks = 77, .wait_ms = 60000 }, &t));
        expect(t, "0 2048 rollback-snap 254:1 254:2 P 8 5 low_water_mark 77 no_space queue 60000\n");
        CHECK_R(table_merge(BACKEND_ROLLBACK, 2048, "254:1", "254:2", 8,
                            &(struct cow_features) { .low_water_chunks = 3 }, &t));
        expect(t, "0 2048 rollback-merge 254:1 254:2 P 8 2 low_water_mark 3\n");
        CHECK_R(table_snapshot(BACKEND_UPSTREAM, 2048, "254:1", "254:2", 8,
                               &(struct cow_features) { .low_water_chunks = 77, .wait_ms = 60000 }, &t));
        expect(t, "0 2048 snapshot 254:1 254:2 P 8\n");
        CHECK(table_origin(BACKEND_AUTO, 2048, "254:1", &t) == -EINVAL);

        CHECK(backend_of_target("snapshot-merge", &merge) == BACKEND_UPSTREAM && merge);
        CHECK(backend_of_target("rollback-origin", &merge) == BACKEND_ROLLBACK && !merge);
        CHECK(backend_of_target("linear", &merge) < 0);

        CHECK_R(name_real("vg0-root", &t));
        expect(t, "rollback-vg0-root-real");
        CHECK_R(uuid_real(&v, &t));
        expect(t, "ROLLBACK-REAL-LVM-xyz");
        s.name = (char *) "pre";
        CHECK_R(name_snapshot(&s, &t));
        expect(t, "rollback-pre");
        CHECK_R(name_cow(&s, &t));
        expect(t, "rollback-pre-cow");
        CHECK_R(uuid_cow(&s, &t));
        expect(t, "ROLLBACK-COW-00ff");
        /* A snapshot booted from GRUB's menu: its view, a transient upstream snapshot of its device. */
        CHECK_R(name_view(&s, &t));
        expect(t, "rollback-pre-view");
        CHECK_R(uuid_view(&s, &t));
        expect(t, "ROLLBACK-VIEW-00ff");
        CHECK_R(table_view(2048, "254:3", "251:0", &t));
        expect(t, "0 2048 snapshot 254:3 251:0 N 8\n");

        CHECK(rbdm_table_sectors("0 100 linear 8:0 0\n100 50 linear 8:1 0\n") == 150);
        printf("ok\n");
        return 0;
}
