/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Pool metadata: format, encode/decode, two slots and torn writes, extents. */
#include <fcntl.h>
#include <json-c/json.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "pool.h"
#include "test.h"

static int make_pool(uint64_t size, uint64_t extent_sectors) {
        char path[] = "/tmp/test-pool.XXXXXX";
        struct pool_settings s;
        int fd = mkstemp(path);

        CHECK(fd >= 0);
        unlink(path);
        CHECK(ftruncate(fd, size) == 0);
        pool_settings_default(&s);
        CHECK_R(pool_format(fd, size, extent_sectors, &s));
        return fd;
}

static struct snapshot *add(struct pool *p, const char *name, uint64_t extents) {
        struct snapshot *s = pool_add_snapshot(p);

        CHECK(s);
        s->name = strdup(name);
        s->volume = strdup("vg0-root");
        s->description = strdup("before \"apt upgrade\"");
        CHECK_R(snapshot_id_new(&s->id));
        s->chunk_sectors = 8;
        s->created_usec = 1700000000000000ULL;
        s->upgrade = true;
        CHECK_R(pool_allocate_extents(p, extents, &s->extents, &s->n_extents));
        return s;
}

static void test_format_and_geometry(void) {
        int fd = make_pool(64ULL << 20, 8192);
        struct pool *p;

        CHECK_R(pool_load(fd, &p));
        /* 4 KiB header + 2 x 1 MiB slots, data from the first 4 MiB boundary. */
        CHECK(p->geo.data_offset == 8192);
        CHECK(p->geo.extent_count == 15);
        CHECK(p->seq == 1);
        CHECK(p->meta.n_snapshots == 0);
        CHECK(p->meta.settings.autoextend_threshold == 70);
        CHECK(p->meta.settings.autoextend_percent == 20);
        CHECK(pool_free_extents(p) == 15);
        pool_free(p);

        CHECK(pool_format(fd, 2ULL << 20, 8192, &(struct pool_settings) {}) == -ENOSPC);
}

static void test_round_trip(void) {
        int fd = make_pool(64ULL << 20, 2048);
        struct pool *p, *q;
        struct snapshot *s;
        struct volume *v;
        char *a, *b;

        CHECK_R(pool_load(fd, &p));
        v = pool_add_volume(p, "vg0-root", "LVM-abc", "0 2048 linear 254:0 0\n");
        CHECK(v);
        v->revert = strdup("one");
        add(p, "one", 3);
        s = add(p, "two", 2);
        s->state = SNAPSHOT_INVALID;
        CHECK_R(pool_commit(p));
        CHECK(p->seq == 2);
        CHECK_R(pool_meta_to_json(&p->meta, &a));

        CHECK_R(pool_load(fd, &q));
        CHECK(q->seq == 2);
        CHECK(q->meta.n_snapshots == 2 && q->meta.n_volumes == 1);
        CHECK(strcmp(q->meta.volumes[0].revert, "one") == 0);
        CHECK(q->meta.snapshots[1].state == SNAPSHOT_INVALID);
        CHECK(q->meta.snapshots[0].extents[0].start == 0 && q->meta.snapshots[0].extents[0].count == 3);
        CHECK(q->meta.snapshots[1].extents[0].start == 3);
        CHECK(strcmp(q->meta.snapshots[0].description, "before \"apt upgrade\"") == 0);
        CHECK_R(pool_meta_to_json(&q->meta, &b));
        CHECK(strcmp(a, b) == 0);
        free(a);
        free(b);
        pool_free(p);
        pool_free(q);
}

static void test_torn_write_falls_back(void) {
        int fd = make_pool(64ULL << 20, 2048);
        struct pool *p;
        uint8_t junk[64];
        unsigned newest;

        CHECK_R(pool_load(fd, &p));
        add(p, "kept", 1);
        CHECK_R(pool_commit(p));        /* seq 2 */
        add(p, "torn", 1);
        CHECK_R(pool_commit(p));        /* seq 3 */
        newest = p->slot;
        pool_free(p);

        /* Tear the newest document: its CRC fails, the older slot is read. */
        memset(junk, 0x5a, sizeof(junk));
        CHECK(pwrite(fd, junk, sizeof(junk), (newest ? POOL_HEADER_SIZE + POOL_SLOT_SIZE_DEFAULT : POOL_HEADER_SIZE) +
                                                 POOL_SLOT_HEADER_SIZE + 10) == sizeof(junk));
        CHECK_R(pool_load(fd, &p));
        CHECK(p->seq == 2);
        CHECK(p->meta.n_snapshots == 1);
        CHECK(strcmp(p->meta.snapshots[0].name, "kept") == 0);
        /* The next commit goes to the torn slot, not over the good one. */
        CHECK(p->slot != newest);
        CHECK_R(pool_commit(p));
        CHECK(p->slot == newest && p->seq == 3);
        pool_free(p);

        /* Both slots torn: a clear error, not an empty pool. */
        CHECK(pwrite(fd, junk, sizeof(junk), POOL_HEADER_SIZE) == sizeof(junk));
        CHECK(pwrite(fd, junk, sizeof(junk), POOL_HEADER_SIZE + POOL_SLOT_SIZE_DEFAULT) == sizeof(junk));
        CHECK(pool_load(fd, &p) == -EBADMSG);

        /* Not a pool at all. */
        CHECK(pwrite(fd, junk, sizeof(junk), 0) == sizeof(junk));
        CHECK(pool_load(fd, &p) == -ENOMEDIUM);
        close(fd);
}

static void test_allocator(void) {
        int fd = make_pool((4ULL + 10 * 4) << 20, 8192); /* 10 extents */
        struct pool *p;
        struct extent_run *runs;
        size_t n;

        CHECK_R(pool_load(fd, &p));
        CHECK(p->geo.extent_count == 10);
        add(p, "a", 2);         /* 0-1 */
        add(p, "b", 3);         /* 2-4 */
        add(p, "c", 2);         /* 5-6 */
        /* Free b: a hole of 3, then 3 free at the end. */
        pool_remove_snapshot(p, pool_find_snapshot(p, "b"));
        CHECK(pool_free_extents(p) == 6);

        /* First fit of one contiguous run. */
        CHECK_R(pool_allocate_extents(p, 3, &runs, &n));
        CHECK(n == 1 && runs[0].start == 2 && runs[0].count == 3);
        free(runs);

        /* Fragmented: the largest runs first. */
        CHECK_R(pool_allocate_extents(p, 5, &runs, &n));
        CHECK(n == 2);
        CHECK(runs[0].count == 3 && runs[1].count == 2);
        CHECK(runs[0].start + runs[0].count <= 10 && runs[1].start + runs[1].count <= 10);
        free(runs);

        CHECK(pool_allocate_extents(p, 7, &runs, &n) == -ENOSPC);
        CHECK(pool_allocate_extents(p, 0, &runs, &n) == -EINVAL);
        pool_free(p);
}

static void test_json_shape(void) {
        const char *bad[] = {
                "",
                "[]",
                "{\"format\": 2}",
                "{\"format\": 1, \"snapshots\": [{\"name\": \"x\"}]}",
                "{\"format\": 1, \"snapshots\": [{\"name\": \"x\", \"id\": \"1\", \"volume\": \"v\", "
                "\"state\": \"bogus\", \"extents\": []}]}",
                "{\"format\": 1, \"settings\": {\"backend\": \"zfs\"}}",
        };
        struct pool_meta m = {};
        json_object *o, *s;
        char *text;

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                CHECK(pool_meta_from_json(bad[i], &m) < 0);

        CHECK_R(pool_meta_from_json("{\"format\": 1}", &m));
        CHECK(m.settings.retain == 3 && m.settings.backend == BACKEND_AUTO);
        CHECK_R(pool_meta_to_json(&m, &text));
        o = json_tokener_parse(text);
        CHECK(o);
        CHECK(json_object_object_get_ex(o, "settings", &s));
        for (const char *const *k = (const char *const[]) { "autoextend_threshold", "autoextend_percent",
                                                            "pool_warn_percent", "retain", "snapshot_percent",
                                                            "chunk_sectors", "backend", NULL };
             *k; k++)
                CHECK(json_object_object_get_ex(s, *k, NULL));
        CHECK(json_object_object_get_ex(o, "volumes", NULL));
        CHECK(json_object_object_get_ex(o, "snapshots", NULL));
        json_object_put(o);
        free(text);
        pool_meta_done(&m);
}

static void test_names_and_strings(void) {
        CHECK(snapshot_name_is_valid("pre-upgrade_1.2+x"));
        CHECK(!snapshot_name_is_valid(""));
        CHECK(!snapshot_name_is_valid("-x"));
        CHECK(!snapshot_name_is_valid("a/b"));
        CHECK(!snapshot_name_is_valid("a b"));
        CHECK(!snapshot_name_is_valid("0123456789012345678901234567890123456789012345678901234567890123456789"));
        CHECK(snapshot_state_from_string("merging") == SNAPSHOT_MERGING);
        CHECK(snapshot_state_from_string("nope") < 0);
        CHECK(strcmp(backend_to_string(BACKEND_UPSTREAM), "upstream") == 0);
        CHECK(crc32_le(0, "123456789", 9) == 0xcbf43926u);
}

int main(void) {
        test_format_and_geometry();
        test_round_trip();
        test_torn_write_falls_back();
        test_allocator();
        test_json_shape();
        test_names_and_strings();
        printf("ok\n");
        return 0;
}
