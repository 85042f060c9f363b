/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Pool metadata: format, encode/decode, two slots and torn writes, extents. */
#include <endian.h>
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
        /* A snapshot's volume is always in the document: the pool refuses one that is not. */
        CHECK(pool_find_volume(p, "vg0-root") || pool_add_volume(p, "vg0-root", NULL, "0 2048 linear 254:0 0\n"));
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

#define DIGEST "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

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
        v->mount_count_known = true;
        v->mount_count_max = 7;
        v->boot_replaced = strdup(DIGEST);
        add(p, "one", 3);
        s = add(p, "two", 2);
        s->state = SNAPSHOT_INVALID;
        s->boot_digest = strdup(DIGEST);
        CHECK_R(pool_commit(p));
        CHECK(p->seq == 2);
        CHECK_R(pool_meta_to_json(&p->meta, &a));

        CHECK_R(pool_load(fd, &q));
        CHECK(q->seq == 2);
        CHECK(q->meta.n_snapshots == 2 && q->meta.n_volumes == 1);
        CHECK(strcmp(q->meta.volumes[0].revert, "one") == 0);
        CHECK(q->meta.volumes[0].mount_count_known && q->meta.volumes[0].mount_count_max == 7);
        CHECK(q->meta.snapshots[1].state == SNAPSHOT_INVALID);
        CHECK(q->meta.snapshots[0].extents[0].start == 0 && q->meta.snapshots[0].extents[0].count == 3);
        CHECK(q->meta.snapshots[1].extents[0].start == 3);
        CHECK(strcmp(q->meta.snapshots[0].description, "before \"apt upgrade\"") == 0);
        CHECK(!q->meta.snapshots[0].boot_digest && strcmp(q->meta.snapshots[1].boot_digest, DIGEST) == 0);
        CHECK(strcmp(q->meta.volumes[0].boot_replaced, DIGEST) == 0);
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
        {
                const uint8_t u[16] = { 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
                                        0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10 };
                char text[POOL_UUID_STRING_MAX];
                uint8_t back[16];

                pool_uuid_to_string(u, text);
                CHECK(strcmp(text, "01234567-89ab-cdef-fedc-ba9876543210") == 0);
                CHECK_R(pool_uuid_from_string(text, back));
                CHECK(memcmp(u, back, 16) == 0);
                CHECK_R(pool_uuid_from_string("0123456789ABCDEFFEDCBA9876543210", back));
                CHECK(memcmp(u, back, 16) == 0);
                CHECK(pool_uuid_from_string("0123456789abcdeffedcba987654321", back) == -EINVAL);
                CHECK(pool_uuid_from_string("0123456789abcdeffedcba98765432100", back) == -EINVAL);
                CHECK(pool_uuid_from_string("0123456789abcdeffedcba987654321g", back) == -EINVAL);
        }
}

/* Header fields at their on-disk offsets; the CRC covers the 84 bytes before it. */
enum { H_HEADER_SIZE = 12, H_EXTENT_SECTORS = 32, H_EXTENT_COUNT = 40, H_DATA_OFFSET = 48,
       H_SLOT0 = 56, H_SLOT1 = 64, H_SLOT_SIZE = 72, H_CRC = 84 };

static void header_put(int fd, unsigned offset, uint64_t value, unsigned width) {
        uint8_t h[88];

        CHECK(pread(fd, h, sizeof(h), 0) == sizeof(h));
        for (unsigned i = 0; i < width; i++)
                h[offset + i] = value >> (8 * i);
        *(uint32_t *) (h + H_CRC) = htole32(crc32_le(0, h, H_CRC));
        CHECK(pwrite(fd, h, sizeof(h), 0) == sizeof(h));
}

/* A document in slot 0 with a sequence number above slot 1's and right CRCs. */
static void slot_put_seq(int fd, const char *text, uint32_t length, uint64_t seq) {
        uint8_t h[POOL_SLOT_HEADER_SIZE] = "RBMETA01";
        size_t len = strlen(text);

        *(uint64_t *) (h + 8) = htole64(seq);
        *(uint32_t *) (h + 16) = htole32(length);
        *(uint32_t *) (h + 20) = htole32(crc32_le(0, text, len));
        *(uint32_t *) (h + 28) = htole32(crc32_le(0, h, 28));
        CHECK(pwrite(fd, text, len, POOL_HEADER_SIZE + POOL_SLOT_HEADER_SIZE) == (ssize_t) len);
        CHECK(pwrite(fd, h, sizeof(h), POOL_HEADER_SIZE) == sizeof(h));
}

static void slot_put(int fd, const char *text, uint32_t length) {
        slot_put_seq(fd, text, length, 1000);
}

/* Every geometry that does not fit the device or itself is refused before anything is read by it. */
static void test_hostile_header(void) {
        const struct { unsigned offset, width; uint64_t value; int want; } bad[] = {
                { H_HEADER_SIZE, 4, 512, -EUCLEAN },
                { H_EXTENT_SECTORS, 8, 0, -EUCLEAN },
                { H_EXTENT_SECTORS, 8, 12, -EUCLEAN },
                { H_EXTENT_SECTORS, 8, 1ULL << 40, -EUCLEAN },
                { H_EXTENT_COUNT, 8, 0, -EUCLEAN },
                { H_EXTENT_COUNT, 8, 1ULL << 40, -EUCLEAN },       /* once an allocation abort */
                { H_EXTENT_COUNT, 8, 16, -EUCLEAN },               /* one more than the device holds */
                { H_DATA_OFFSET, 8, 1ULL << 60, -EUCLEAN },
                { H_DATA_OFFSET, 8, 8, -EUCLEAN },                 /* extents over the slots */
                { H_SLOT0, 8, 0, -EUCLEAN },                       /* slot over the header */
                { H_SLOT0, 8, POOL_HEADER_SIZE + 4096, -EUCLEAN }, /* slots overlap */
                { H_SLOT1, 8, UINT64_MAX - 511, -EUCLEAN },
                { H_SLOT_SIZE, 8, 0xffffffffULL << 8, -EUCLEAN },  /* with length 0xffffffff: a heap overflow */
                { H_SLOT_SIZE, 8, 100, -EUCLEAN },
        };
        int fd = make_pool(64ULL << 20, 8192);  /* 15 extents */
        uint8_t good[88];
        struct pool *p;

        CHECK(pread(fd, good, sizeof(good), 0) == sizeof(good));
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                header_put(fd, bad[i].offset, bad[i].value, bad[i].width);
                p = NULL;
                if (pool_load(fd, &p) != bad[i].want) {
                        fprintf(stderr, "hostile header %zu not refused\n", i);
                        exit(1);
                }
                CHECK(!p);
                CHECK(pwrite(fd, good, sizeof(good), 0) == sizeof(good));
        }

        /* A slot length past the slot (malloc(len + 1) wrapped once): not a valid slot. */
        slot_put(fd, "{\"format\": 1}", UINT32_MAX);
        CHECK(pool_load(fd, &p) == -EBADMSG);
        /* A sequence number at the top: the next commit would wrap and be lost to this slot. */
        slot_put_seq(fd, "{\"format\": 1}", strlen("{\"format\": 1}"), UINT64_MAX);
        CHECK(pool_load(fd, &p) == -EBADMSG);
        /* The same with a slot size that would let it through: the geometry is refused first. */
        header_put(fd, H_SLOT_SIZE, 1ULL << 40, 8);
        CHECK(pool_load(fd, &p) == -EUCLEAN);
        close(fd);
}

/* Documents with right CRCs that mean nonsense are refused, never acted on. */
static void test_hostile_document(void) {
#define SNAP(name, id, vol, chunk, extents) \
        "{\"name\": \"" name "\", \"id\": \"" id "\", \"volume\": \"" vol "\", \"chunk_sectors\": " chunk \
        ", \"state\": \"active\", \"extents\": " extents "}"
#define ID1 "0123456789abcdef0123456789abcdef"
#define ID2 "fedcba9876543210fedcba9876543210"
#define VOL(name, extra) "{\"name\": \"" name "\", \"table\": \"0 2048 linear 254:0 0\\n\"" extra "}"
#define DOC(vols, snaps) "{\"format\": 1, \"volumes\": [" vols "], \"snapshots\": [" snaps "]}"
        const char *good = DOC(VOL("vg0-root", ", \"revert\": \"a\""),
                               SNAP("a", ID1, "vg0-root", "8", "[[0, 2]]") ", " SNAP("b", ID2, "vg0-root", "8", "[[2, 3]]"));
        const char *mount_count_top = DOC(VOL("vg0-root", ", \"mount_count_max\": 65536"), "");
        const char *bad[] = {
                DOC(VOL("vg0-root", ""), SNAP("a", ID1, "vg0-root", "8", "[[0, 2]]") ", "
                                         SNAP("a", ID2, "vg0-root", "8", "[[2, 3]]")),
                DOC(VOL("vg0-root", ""), SNAP("a", ID1, "vg0-root", "8", "[[0, 2]]") ", "
                                         SNAP("b", ID1, "vg0-root", "8", "[[2, 3]]")),
                DOC(VOL("vg0-root", ""), SNAP("a", ID1, "vg0-root", "8", "[[0, 2]]") ", "
                                         SNAP("b", ID2, "vg0-root", "8", "[[1, 3]]")),
                DOC(VOL("vg0-root", ""), SNAP("a", ID1, "vg0-root", "8", "[[0, 2], [1, 1]]")),
                DOC(VOL("vg0-root", ""), SNAP("a", ID1, "vg0-root", "8", "[[5, 18446744073709551613]]")),
                DOC(VOL("vg0-root", ""), SNAP("a", ID1, "vg0-root", "8", "[[14, 2]]")),
                DOC(VOL("vg0-root", ""), SNAP("a", ID1, "vg0-root", "8", "[[0, 0]]")),
                DOC(VOL("vg0-root", ""), SNAP("a", ID1, "vg0-root", "8", "[]")),
                DOC(VOL("vg0-root", ""), SNAP("a", ID1, "vg0-root", "8", "[[\"0\", 1]]")),
                DOC(VOL("vg0-root", ""), SNAP("a", ID1, "vg0-root", "4294967304", "[[0, 1]]")),
                DOC(VOL("vg0-root", ""), SNAP("a", ID1, "vg0-root", "12", "[[0, 1]]")),
                DOC(VOL("vg0-root", ""), SNAP("a/b", ID1, "vg0-root", "8", "[[0, 1]]")),
                DOC(VOL("vg0-root", ""), SNAP("a", "../../x", "vg0-root", "8", "[[0, 1]]")),
                DOC(VOL("vg0-root", ""), SNAP("a", ID1, "vg1-root", "8", "[[0, 1]]")),
                DOC(VOL("../vg0-root", ""), SNAP("a", ID1, "../vg0-root", "8", "[[0, 1]]")),
                DOC(VOL("vg0-root", ""), SNAP("a", ID1, "vg0-root", "8", "[[0, 1]], \"boot_digest\": \"../x\"")),
                DOC(VOL("vg0-root", ""), SNAP("a", ID1, "vg0-root", "8", "[[0, 1]], \"boot_digest\": \"E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855\"")),
                DOC(VOL("vg0-root", ""), SNAP("a", ID1, "vg0-root", "8", "[[0, 1]], \"boot_digest\": \"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b85\"")),
                DOC(VOL("vg0-root", ""), SNAP("a", ID1, "vg0-root", "8", "[[0, 1]], \"boot_digest\": 7")),
                DOC(VOL("vg0-root", ", \"boot_replaced\": \"/etc\""), ""),
                DOC(VOL("vg0-root", "") ", " VOL("vg0-root", ""), ""),
                DOC(VOL("vg0-root", ", \"revert\": \"gone\""), SNAP("a", ID1, "vg0-root", "8", "[[0, 1]]")),
                DOC(VOL("vg0-root", ", \"mount_count_max\": 65537"), ""),
                DOC(VOL("vg0-root", ", \"mount_count_max\": 18446744073709551615"), ""),
                DOC(VOL("vg0-root", ", \"mount_count_max\": \"7\""), ""),
                DOC(VOL("vg0-root", ", \"merging\": \"a\"") ", " VOL("vg1-root", ""),
                    SNAP("a", ID1, "vg1-root", "8", "[[0, 1]]")),
                "{\"format\": 1, \"volumes\": [{\"name\": \"v\", \"table\": \"linear\"}]}",
                "{\"format\": 1, \"settings\": {\"autoextend_threshold\": 101}}",
                "{\"format\": 1, \"settings\": {\"retain\": 4294967297}}",
                "{\"format\": 1, \"settings\": {\"chunk_sectors\": 24}}",
                "{\"format\": 1, \"settings\": [1, 2]}",
        };
        int fd = make_pool(64ULL << 20, 8192);  /* 15 extents */
        struct pool *p;

        slot_put(fd, good, strlen(good));
        CHECK_R(pool_load(fd, &p));
        CHECK(p->seq == 1000 && p->meta.n_snapshots == 2);
        /* Written before the mount count was recorded: unknown, not 0. */
        CHECK(!p->meta.volumes[0].mount_count_known);
        pool_free(p);
        /* One more than s_mnt_count holds is a count recorded at 65535. */
        slot_put(fd, mount_count_top, strlen(mount_count_top));
        CHECK_R(pool_load(fd, &p));
        CHECK(p->meta.volumes[0].mount_count_known && p->meta.volumes[0].mount_count_max == 65536);
        pool_free(p);
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                int r;

                slot_put(fd, bad[i], strlen(bad[i]));
                p = NULL;
                r = pool_load(fd, &p);
                if (r != -EUCLEAN && r != -EBADMSG) {
                        fprintf(stderr, "hostile document %zu: %d, not refused: %s\n", i, r, bad[i]);
                        exit(1);
                }
                CHECK(!p);
        }
        close(fd);
}

int main(void) {
        test_format_and_geometry();
        test_round_trip();
        test_torn_write_falls_back();
        test_allocator();
        test_json_shape();
        test_names_and_strings();
        test_hostile_header();
        test_hostile_document();
        printf("ok\n");
        return 0;
}
