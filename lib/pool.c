/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <endian.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "boot-copy.h"
#include "pool.h"
#include "strv.h"

static const char *const backend_table[_BACKEND_MAX] = {
        [BACKEND_AUTO] = "auto",
        [BACKEND_ROLLBACK] = "rollback",
        [BACKEND_UPSTREAM] = "upstream",
};

static const char *const snapshot_state_table[_SNAPSHOT_STATE_MAX] = {
        [SNAPSHOT_ACTIVE] = "active",
        [SNAPSHOT_INVALID] = "invalid",
        [SNAPSHOT_MERGING] = "merging",
        [SNAPSHOT_CREATING] = "creating",
};

DEFINE_STRING_TABLE(backend, enum backend, _BACKEND_MAX);
DEFINE_STRING_TABLE(snapshot_state, enum snapshot_state, _SNAPSHOT_STATE_MAX);

uint32_t crc32_le(uint32_t crc, const void *data, size_t len) {
        const uint8_t *p = data;

        crc = ~crc;
        while (len--) {
                crc ^= *p++;
                for (int k = 0; k < 8; k++)
                        crc = (crc >> 1) ^ (0xedb88320u & -(crc & 1));
        }
        return ~crc;
}

void pool_settings_default(struct pool_settings *s) {
        *s = (struct pool_settings) {
                .autoextend_threshold = 70,
                .autoextend_percent = 20,
                .pool_warn_percent = 80,
                .retain = 3,
                .snapshot_percent = 20,
                .full_wait_seconds = 60,
                .auto_revert_after = 3,
                .failed_check_reboot = 1,
                .chunk_sectors = 8,
                .backend = BACKEND_AUTO,
        };
}

const struct pool_setting pool_settings_table[] = {
        { .key = "autoextend_threshold", .offset = offsetof(struct pool_settings, autoextend_threshold), .max = 100 },
        { .key = "autoextend_percent", .offset = offsetof(struct pool_settings, autoextend_percent), .max = 1000 },
        { .key = "pool_warn_percent", .offset = offsetof(struct pool_settings, pool_warn_percent), .max = 100 },
        { .key = "retain", .offset = offsetof(struct pool_settings, retain), .max = 10000 },
        { .key = "snapshot_percent", .offset = offsetof(struct pool_settings, snapshot_percent), .max = 1000 },
        { .key = "full_wait_seconds", .offset = offsetof(struct pool_settings, full_wait_seconds), .max = 3600 },
        { .key = "auto_revert_after", .offset = offsetof(struct pool_settings, auto_revert_after),
          .max = AUTO_REVERT_AFTER_MAX },
        { .key = "failed_check_reboot", .offset = offsetof(struct pool_settings, failed_check_reboot), .max = 1 },
        { .key = "chunk_sectors", .offset = offsetof(struct pool_settings, chunk_sectors), .max = 2048,
          .chunk_size = true },
};
const size_t pool_settings_table_size = ELEMENTSOF(pool_settings_table);

/* As the snapshot targets take them: 4 KiB to 1 MiB, a power of two. */
bool pool_chunk_sectors_is_valid(uint64_t sectors) {
        return sectors >= 8 && sectors <= 2048 && (sectors & (sectors - 1)) == 0;
}

bool pool_autoextend_enabled(const struct pool_settings *s) {
        return s->autoextend_threshold > 0 && s->autoextend_threshold < 100 && s->autoextend_percent > 0;
}

bool pool_setting_value_is_valid(const struct pool_setting *s, uint64_t value) {
        return value <= s->max && (!s->chunk_size || pool_chunk_sectors_is_valid(value));
}

/* Header layout, little endian. */
struct pool_header_disk {
        char magic[8];
        uint32_t version;
        uint32_t header_size;
        uint8_t uuid[16];
        uint64_t extent_sectors;
        uint64_t extent_count;
        uint64_t data_offset;
        uint64_t slot_offset[2];
        uint64_t slot_size;
        uint32_t reserved;
        uint32_t crc;
} __attribute__((packed));

struct pool_slot_disk {
        char magic[8];
        uint64_t seq;
        uint32_t length;
        uint32_t data_crc;
        uint32_t reserved;
        uint32_t crc;
} __attribute__((packed));

_Static_assert(sizeof(struct pool_slot_disk) == POOL_SLOT_HEADER_SIZE, "slot header size");

static int pread_full(int fd, void *buf, size_t len, uint64_t offset) {
        while (len > 0) {
                ssize_t n = pread(fd, buf, len, offset);
                if (n < 0)
                        return -errno;
                if (n == 0)
                        return -EIO;
                buf = (uint8_t *) buf + n;
                len -= n;
                offset += n;
        }
        return 0;
}

static int pwrite_full(int fd, const void *buf, size_t len, uint64_t offset) {
        while (len > 0) {
                ssize_t n = pwrite(fd, buf, len, offset);
                if (n < 0)
                        return -errno;
                buf = (const uint8_t *) buf + n;
                len -= n;
                offset += n;
        }
        return 0;
}

static int write_slot(int fd, const struct pool_geometry *g, unsigned slot, uint64_t seq, const char *text) {
        size_t len = strlen(text);
        struct pool_slot_disk h = {};
        int r;

        if (POOL_SLOT_HEADER_SIZE + len > g->slot_size)
                return -EFBIG;
        memcpy(h.magic, POOL_SLOT_MAGIC, 8);
        h.seq = htole64(seq);
        h.length = htole32(len);
        h.data_crc = htole32(crc32_le(0, text, len));
        h.crc = htole32(crc32_le(0, &h, offsetof(struct pool_slot_disk, crc)));

        /* The document first, then its header: a torn write fails the CRC either way. */
        r = pwrite_full(fd, text, len, g->slot_offset[slot] + POOL_SLOT_HEADER_SIZE);
        if (r < 0)
                return r;
        r = pwrite_full(fd, &h, sizeof(h), g->slot_offset[slot]);
        if (r < 0)
                return r;
        if (fdatasync(fd) < 0)
                return -errno;
        return 0;
}

/* Returns 0 and the document, -EBADMSG when the slot does not hold a valid one. */
static int read_slot(int fd, const struct pool_geometry *g, unsigned slot, uint64_t *ret_seq, char **ret) {
        struct pool_slot_disk h;
        _cleanup_free_ char *text = NULL;
        uint32_t len;
        int r;

        r = pread_full(fd, &h, sizeof(h), g->slot_offset[slot]);
        if (r < 0)
                return r;
        if (memcmp(h.magic, POOL_SLOT_MAGIC, 8) != 0 ||
            le32toh(h.crc) != crc32_le(0, &h, offsetof(struct pool_slot_disk, crc)))
                return -EBADMSG;
        len = le32toh(h.length);
        if (POOL_SLOT_HEADER_SIZE + (uint64_t) len > g->slot_size)
                return -EBADMSG;
        text = malloc(len + 1);
        if (!text)
                return -ENOMEM;
        r = pread_full(fd, text, len, g->slot_offset[slot] + POOL_SLOT_HEADER_SIZE);
        if (r < 0)
                return r;
        text[len] = 0;
        if (le32toh(h.data_crc) != crc32_le(0, text, len) || strlen(text) != len)
                return -EBADMSG;
        if (le64toh(h.seq) >= POOL_SEQ_LIMIT)
                return -EBADMSG;
        *ret_seq = le64toh(h.seq);
        *ret = TAKE_PTR(text);
        return 0;
}

int pool_format(int fd, uint64_t size, uint64_t extent_sectors, const struct pool_settings *settings) {
        struct pool_header_disk h = {};
        struct pool_geometry g = {};
        struct pool_meta empty = { .settings = *settings };
        _cleanup_free_ char *text = NULL;
        _cleanup_free_ uint8_t *block = NULL;
        uint64_t data_bytes;
        int r;

        if (extent_sectors == 0 || extent_sectors % 8 != 0)
                return -EINVAL;
        g.slot_size = POOL_SLOT_SIZE_DEFAULT;
        g.slot_offset[0] = POOL_HEADER_SIZE;
        g.slot_offset[1] = POOL_HEADER_SIZE + g.slot_size;
        data_bytes = g.slot_offset[1] + g.slot_size;
        /* Extents start on an extent boundary, as LVM's do on a PV. */
        g.data_offset = DIV_ROUND_UP(data_bytes / 512, extent_sectors) * extent_sectors;
        g.extent_sectors = extent_sectors;
        if (size / 512 <= g.data_offset)
                return -ENOSPC;
        g.extent_count = (size / 512 - g.data_offset) / extent_sectors;
        if (g.extent_count == 0)
                return -ENOSPC;
        /* Past that a pool is refused as hostile: leave the rest unused. */
        if (g.extent_count > POOL_EXTENT_COUNT_MAX)
                g.extent_count = POOL_EXTENT_COUNT_MAX;
        if (getrandom(g.uuid, sizeof(g.uuid), 0) != sizeof(g.uuid))
                return -errno;

        r = pool_meta_to_json(&empty, &text);
        if (r < 0)
                return r;

        /* Invalidate old slots first so that no earlier pool's document survives. */
        block = calloc(1, POOL_HEADER_SIZE);
        if (!block)
                return -ENOMEM;
        for (unsigned i = 0; i < 2; i++) {
                r = pwrite_full(fd, block, POOL_SLOT_HEADER_SIZE, g.slot_offset[i]);
                if (r < 0)
                        return r;
        }
        r = write_slot(fd, &g, 0, 1, text);
        if (r < 0)
                return r;

        memcpy(h.magic, POOL_MAGIC, 8);
        h.version = htole32(1);
        h.header_size = htole32(POOL_HEADER_SIZE);
        memcpy(h.uuid, g.uuid, 16);
        h.extent_sectors = htole64(g.extent_sectors);
        h.extent_count = htole64(g.extent_count);
        h.data_offset = htole64(g.data_offset);
        h.slot_offset[0] = htole64(g.slot_offset[0]);
        h.slot_offset[1] = htole64(g.slot_offset[1]);
        h.slot_size = htole64(g.slot_size);
        h.crc = htole32(crc32_le(0, &h, offsetof(struct pool_header_disk, crc)));
        memcpy(block, &h, sizeof(h));
        r = pwrite_full(fd, block, POOL_HEADER_SIZE, 0);
        if (r < 0)
                return r;
        if (fdatasync(fd) < 0)
                return -errno;
        return 0;
}

/* -ENOMEDIUM without the magic, -EBADMSG when the CRC fails. */
static int read_header_disk(int fd, struct pool_header_disk *h) {
        int r;

        r = pread_full(fd, h, sizeof(*h), 0);
        if (r < 0)
                return r == -EIO ? -ENOMEDIUM : r;
        if (memcmp(h->magic, POOL_MAGIC, 8) != 0)
                return -ENOMEDIUM;
        if (le32toh(h->crc) != crc32_le(0, h, offsetof(struct pool_header_disk, crc)))
                return -EBADMSG;
        return 0;
}

static int read_header(int fd, uint64_t device_bytes, struct pool_geometry *g) {
        struct pool_header_disk h;
        int r;

        r = read_header_disk(fd, &h);
        if (r < 0)
                return r;
        if (le32toh(h.version) != 1)
                return -EBADMSG;
        if (le32toh(h.header_size) != POOL_HEADER_SIZE)
                return -EUCLEAN;
        memcpy(g->uuid, h.uuid, 16);
        g->extent_sectors = le64toh(h.extent_sectors);
        g->extent_count = le64toh(h.extent_count);
        g->data_offset = le64toh(h.data_offset);
        g->slot_offset[0] = le64toh(h.slot_offset[0]);
        g->slot_offset[1] = le64toh(h.slot_offset[1]);
        g->slot_size = le64toh(h.slot_size);
        return pool_geometry_verify(g, device_bytes);
}

static int device_bytes(int fd, uint64_t *ret) {
        struct stat st;

        if (fstat(fd, &st) < 0)
                return -errno;
        if (S_ISBLK(st.st_mode))
                return ioctl(fd, BLKGETSIZE64, ret) < 0 ? -errno : 0;
        if (!S_ISREG(st.st_mode))
                return -ENOTBLK;
        *ret = st.st_size;
        return 0;
}

int pool_probe(int fd, uint8_t ret_uuid[16]) {
        struct pool_header_disk h;
        int r;

        r = read_header_disk(fd, &h);
        if (r < 0)
                return r;
        memcpy(ret_uuid, h.uuid, 16);
        return 0;
}

/* As blkid and udev print UUIDs: 8-4-4-4-12 hex digits. */
void pool_uuid_to_string(const uint8_t uuid[16], char ret[POOL_UUID_STRING_MAX]) {
        char *c = ret;

        for (int i = 0; i < 16; i++) {
                c += sprintf(c, "%02x", uuid[i]);
                if (i == 3 || i == 5 || i == 7 || i == 9)
                        *c++ = '-';
        }
}

/* 32 hex digits, dashes anywhere skipped. */
int pool_uuid_from_string(const char *s, uint8_t ret[16]) {
        unsigned n = 0;

        for (; *s && n < 32; s++) {
                int v;

                if (*s == '-')
                        continue;
                if (*s >= '0' && *s <= '9')
                        v = *s - '0';
                else if (*s >= 'a' && *s <= 'f')
                        v = *s - 'a' + 10;
                else if (*s >= 'A' && *s <= 'F')
                        v = *s - 'A' + 10;
                else
                        return -EINVAL;
                if (n % 2 == 0)
                        ret[n / 2] = v << 4;
                else
                        ret[n / 2] |= v;
                n++;
        }
        return n == 32 && *s == 0 ? 0 : -EINVAL;
}

static void free_slot_texts(char *(*texts)[2]) {
        free((*texts)[0]);
        free((*texts)[1]);
}

int pool_load(int fd, struct pool **ret) {
        _cleanup_pool_ struct pool *p = NULL;
        _cleanup_(free_slot_texts) char *text[2] = {};
        uint64_t seq[2] = {}, size;
        int r, valid[2];

        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        p->fd = -1;
        r = device_bytes(fd, &size);
        if (r < 0)
                return r;
        r = read_header(fd, size, &p->geo);
        if (r < 0)
                return r;
        for (unsigned i = 0; i < 2; i++) {
                valid[i] = read_slot(fd, &p->geo, i, &seq[i], &text[i]);
                if (valid[i] < 0 && valid[i] != -EBADMSG)
                        return valid[i];
        }
        if (valid[0] < 0 && valid[1] < 0)
                return -EBADMSG;
        p->slot = valid[0] < 0 ? 1 : valid[1] < 0 ? 0 : seq[1] > seq[0] ? 1 : 0;
        r = pool_meta_from_json(text[p->slot], &p->meta);
        if (r < 0 && valid[!p->slot] == 0) {
                /* A valid CRC over a document we cannot parse: use the other one. */
                p->slot = !p->slot;
                pool_meta_done(&p->meta);
                r = pool_meta_from_json(text[p->slot], &p->meta);
        }
        if (r < 0)
                return r;
        /* A document that passed its CRC but means nonsense is refused, not fallen back from. */
        r = pool_meta_verify(&p->meta, p->geo.extent_count);
        if (r < 0)
                return r;
        p->seq = seq[p->slot];
        p->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (p->fd < 0)
                return -errno;
        *ret = TAKE_PTR(p);
        return 0;
}

int pool_open(const char *path, bool writable, struct pool **ret) {
        _cleanup_close_ int fd = -1;
        struct pool *p;
        struct stat st;
        int r;

        fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0)
                return -errno;
        r = pool_load(fd, &p);
        if (r < 0)
                return r;
        p->path = strdup(path);
        if (!p->path) {
                pool_free(p);
                return -ENOMEM;
        }
        p->devnum = S_ISBLK(st.st_mode) ? st.st_rdev : 0;
        *ret = p;
        return 0;
}

int pool_commit(struct pool *p) {
        _cleanup_free_ char *text = NULL;
        unsigned slot = !p->slot;
        int r;

        /* Written, it would read as damaged and lose to the older slot. */
        if (p->seq + 1 >= POOL_SEQ_LIMIT)
                return -EOVERFLOW;
        r = pool_meta_to_json(&p->meta, &text);
        if (r < 0)
                return r;
        r = write_slot(p->fd, &p->geo, slot, p->seq + 1, text);
        if (r < 0)
                return r;
        p->slot = slot;
        p->seq++;
        return 0;
}

static void snapshot_done(struct snapshot *s) {
        free(s->name);
        free(s->id);
        free(s->volume);
        free(s->description);
        free(s->boot_digest);
        free(s->extents);
}

static void volume_done(struct volume *v) {
        free(v->name);
        free(v->dm_uuid);
        free(v->table);
        free(v->revert);
        free(v->merging);
        free(v->boot_replaced);
        free(v->trial);
}

void pool_meta_done(struct pool_meta *m) {
        for (size_t i = 0; i < m->n_snapshots; i++)
                snapshot_done(&m->snapshots[i]);
        for (size_t i = 0; i < m->n_volumes; i++)
                volume_done(&m->volumes[i]);
        free(m->snapshots);
        free(m->volumes);
        *m = (struct pool_meta) {};
}

struct pool *pool_free(struct pool *p) {
        if (!p)
                return NULL;
        pool_meta_done(&p->meta);
        if (p->fd >= 0)
                close(p->fd);
        free(p->path);
        free(p);
        return NULL;
}

/* JSON. Keys are snake_case and stable: they are also rollbackctl's --json. */

static void json_put_string(json_object *o, const char *key, const char *value) {
        if (value)
                json_object_object_add(o, key, json_object_new_string(value));
}

static void json_put_uint(json_object *o, const char *key, uint64_t value) {
        json_object_object_add(o, key, json_object_new_uint64(value));
}

int pool_meta_to_json(const struct pool_meta *m, char **ret) {
        json_object *root, *settings, *volumes, *snapshots;
        const struct pool_settings *s = &m->settings;
        char *text;

        root = json_object_new_object();
        if (!root)
                return -ENOMEM;
        json_put_uint(root, "format", 1);
        settings = json_object_new_object();
        for (size_t i = 0; i < pool_settings_table_size; i++)
                json_put_uint(settings, pool_settings_table[i].key,
                              pool_setting_value(s, &pool_settings_table[i]));
        json_put_string(settings, "backend", backend_to_string(s->backend));
        json_object_object_add(root, "settings", settings);

        volumes = json_object_new_array();
        for (size_t i = 0; i < m->n_volumes; i++) {
                const struct volume *v = &m->volumes[i];
                json_object *o = json_object_new_object();

                json_put_string(o, "name", v->name);
                json_put_string(o, "dm_uuid", v->dm_uuid);
                json_put_string(o, "table", v->table);
                json_put_string(o, "revert", v->revert);
                json_put_string(o, "merging", v->merging);
                json_put_string(o, "boot_replaced", v->boot_replaced);
                if (v->merging)
                        json_put_uint(o, "merge_start_usec", v->merge_start_usec);
                /* A pending revert's size too: its merge may be over before the boot can read it. */
                if (v->merging || v->revert)
                        json_put_uint(o, "merge_start_chunks", v->merge_start_chunks);
                if (v->mount_count_known)
                        json_put_uint(o, "mount_count_max", v->mount_count_max);
                if (v->trial) {
                        json_put_string(o, "trial", v->trial);
                        json_put_uint(o, "trial_boots", v->trial_boots);
                        json_put_uint(o, "trial_start_usec", v->trial_start_usec);
                }
                if (v->auto_reverted_boots > 0)
                        json_put_uint(o, "auto_reverted_boots", v->auto_reverted_boots);
                json_object_array_add(volumes, o);
        }
        json_object_object_add(root, "volumes", volumes);

        snapshots = json_object_new_array();
        for (size_t i = 0; i < m->n_snapshots; i++) {
                const struct snapshot *sn = &m->snapshots[i];
                json_object *o = json_object_new_object(), *ext = json_object_new_array();

                json_put_string(o, "name", sn->name);
                json_put_string(o, "id", sn->id);
                json_put_string(o, "volume", sn->volume);
                json_put_string(o, "description", sn->description);
                json_put_uint(o, "created_usec", sn->created_usec);
                json_put_uint(o, "chunk_sectors", sn->chunk_sectors);
                json_put_string(o, "state", snapshot_state_to_string(sn->state));
                json_object_object_add(o, "upgrade", json_object_new_boolean(sn->upgrade));
                json_put_string(o, "boot_digest", sn->boot_digest);
                for (size_t k = 0; k < sn->n_extents; k++) {
                        json_object *run = json_object_new_array();

                        json_object_array_add(run, json_object_new_uint64(sn->extents[k].start));
                        json_object_array_add(run, json_object_new_uint64(sn->extents[k].count));
                        json_object_array_add(ext, run);
                }
                json_object_object_add(o, "extents", ext);
                json_object_array_add(snapshots, o);
        }
        json_object_object_add(root, "snapshots", snapshots);

        text = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN));
        json_object_put(root);
        if (!text)
                return -ENOMEM;
        *ret = text;
        return 0;
}

static int json_get_string(json_object *o, const char *key, bool required, char **ret) {
        json_object *v;

        if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null)) {
                *ret = NULL;
                return required ? -EBADMSG : 0;
        }
        if (!json_object_is_type(v, json_type_string))
                return -EBADMSG;
        *ret = strdup(json_object_get_string(v));
        return *ret ? 0 : -ENOMEM;
}

static int json_get_uint(json_object *o, const char *key, uint64_t def, uint64_t *ret) {
        json_object *v;

        if (!json_object_object_get_ex(o, key, &v)) {
                *ret = def;
                return 0;
        }
        if (!json_object_is_type(v, json_type_int))
                return -EBADMSG;
        *ret = json_object_get_uint64(v);
        return 0;
}

static int settings_from_json(json_object *o, struct pool_settings *s) {
        _cleanup_free_ char *backend = NULL;
        int r;

        pool_settings_default(s);
        if (!o)
                return 0;
        if (!json_object_is_type(o, json_type_object))
                return -EBADMSG;
        for (size_t i = 0; i < pool_settings_table_size; i++) {
                const struct pool_setting *t = &pool_settings_table[i];
                unsigned *field = pool_setting_field(s, t);
                uint64_t v;

                r = json_get_uint(o, t->key, *field, &v);
                if (r < 0)
                        return r;
                if (!pool_setting_value_is_valid(t, v))
                        return -EUCLEAN;
                *field = v;
        }
        r = json_get_string(o, "backend", false, &backend);
        if (r < 0)
                return r;
        if (backend) {
                s->backend = backend_from_string(backend);
                if (s->backend < 0)
                        return -EBADMSG;
        }
        return 0;
}

static int extents_from_json(json_object *a, struct snapshot *s) {
        size_t n;

        if (!a || !json_object_is_type(a, json_type_array))
                return -EBADMSG;
        n = json_object_array_length(a);
        s->extents = calloc(n ? n : 1, sizeof(*s->extents));
        if (!s->extents)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                json_object *run = json_object_array_get_idx(a, i);

                if (!json_object_is_type(run, json_type_array) || json_object_array_length(run) != 2 ||
                    !json_object_is_type(json_object_array_get_idx(run, 0), json_type_int) ||
                    !json_object_is_type(json_object_array_get_idx(run, 1), json_type_int))
                        return -EBADMSG;
                s->extents[i].start = json_object_get_uint64(json_object_array_get_idx(run, 0));
                s->extents[i].count = json_object_get_uint64(json_object_array_get_idx(run, 1));
                if (s->extents[i].count == 0)
                        return -EBADMSG;
        }
        s->n_extents = n;
        return 0;
}

static int meta_from_json_object(json_object *root, struct pool_meta *m) {
        json_object *o, *a;
        uint64_t format;
        int r;

        if (!json_object_is_type(root, json_type_object))
                return -EBADMSG;
        r = json_get_uint(root, "format", 0, &format);
        if (r < 0)
                return r;
        if (format != 1)
                return -EPROTONOSUPPORT;
        r = settings_from_json(json_object_object_get_ex(root, "settings", &o) ? o : NULL, &m->settings);
        if (r < 0)
                return r;

        if (json_object_object_get_ex(root, "volumes", &a)) {
                size_t n;

                if (!json_object_is_type(a, json_type_array))
                        return -EBADMSG;
                n = json_object_array_length(a);
                m->volumes = calloc(n ? n : 1, sizeof(*m->volumes));
                if (!m->volumes)
                        return -ENOMEM;
                for (size_t i = 0; i < n; i++) {
                        struct volume *v = &m->volumes[i];

                        o = json_object_array_get_idx(a, i);
                        m->n_volumes++;
                        if ((r = json_get_string(o, "name", true, &v->name)) < 0 ||
                            (r = json_get_string(o, "dm_uuid", false, &v->dm_uuid)) < 0 ||
                            (r = json_get_string(o, "table", true, &v->table)) < 0 ||
                            (r = json_get_string(o, "revert", false, &v->revert)) < 0 ||
                            (r = json_get_string(o, "merging", false, &v->merging)) < 0 ||
                            (r = json_get_uint(o, "merge_start_usec", 0, &v->merge_start_usec)) < 0 ||
                            (r = json_get_uint(o, "merge_start_chunks", 0, &v->merge_start_chunks)) < 0 ||
                            (r = json_get_uint(o, "mount_count_max", 0, &v->mount_count_max)) < 0 ||
                            (r = json_get_string(o, "boot_replaced", false, &v->boot_replaced)) < 0 ||
                            (r = json_get_string(o, "trial", false, &v->trial)) < 0 ||
                            (r = json_get_uint(o, "trial_boots", 0, &v->trial_boots)) < 0 ||
                            (r = json_get_uint(o, "trial_start_usec", 0, &v->trial_start_usec)) < 0 ||
                            (r = json_get_uint(o, "auto_reverted_boots", 0, &v->auto_reverted_boots)) < 0)
                                return r;
                        if (v->boot_replaced && !rb_boot_digest_is_valid(v->boot_replaced))
                                return -EUCLEAN;
                        /* Absent in pools of older versions and for other filesystems: unknown. */
                        v->mount_count_known = json_object_object_get_ex(o, "mount_count_max", NULL);
                }
        }

        if (json_object_object_get_ex(root, "snapshots", &a)) {
                size_t n;

                if (!json_object_is_type(a, json_type_array))
                        return -EBADMSG;
                n = json_object_array_length(a);
                m->snapshots = calloc(n ? n : 1, sizeof(*m->snapshots));
                if (!m->snapshots)
                        return -ENOMEM;
                for (size_t i = 0; i < n; i++) {
                        struct snapshot *s = &m->snapshots[i];
                        _cleanup_free_ char *state = NULL;
                        uint64_t chunk;
                        json_object *ext;

                        o = json_object_array_get_idx(a, i);
                        m->n_snapshots++;
                        if ((r = json_get_string(o, "name", true, &s->name)) < 0 ||
                            (r = json_get_string(o, "id", true, &s->id)) < 0 ||
                            (r = json_get_string(o, "volume", true, &s->volume)) < 0 ||
                            (r = json_get_string(o, "description", false, &s->description)) < 0 ||
                            (r = json_get_uint(o, "created_usec", 0, &s->created_usec)) < 0 ||
                            (r = json_get_uint(o, "chunk_sectors", 8, &chunk)) < 0 ||
                            (r = json_get_string(o, "state", true, &state)) < 0 ||
                            (r = json_get_string(o, "boot_digest", false, &s->boot_digest)) < 0)
                                return r;
                        if (!pool_chunk_sectors_is_valid(chunk) ||
                            (s->boot_digest && !rb_boot_digest_is_valid(s->boot_digest)))
                                return -EUCLEAN;
                        s->chunk_sectors = chunk;
                        s->upgrade = json_object_object_get_ex(o, "upgrade", &ext) && json_object_get_boolean(ext);
                        s->state = snapshot_state_from_string(state);
                        if (s->state < 0)
                                return -EBADMSG;
                        r = extents_from_json(json_object_object_get_ex(o, "extents", &ext) ? ext : NULL, s);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

int pool_meta_from_json(const char *text, struct pool_meta *m) {
        json_object *root;
        int r;

        *m = (struct pool_meta) {};
        root = json_tokener_parse(text);
        if (!root)
                return -EBADMSG;
        r = meta_from_json_object(root, m);
        json_object_put(root);
        if (r < 0)
                pool_meta_done(m);
        return r;
}

struct snapshot *pool_find_snapshot(struct pool *p, const char *name) {
        for (size_t i = 0; i < p->meta.n_snapshots; i++)
                if (strcmp(p->meta.snapshots[i].name, name) == 0)
                        return &p->meta.snapshots[i];
        return NULL;
}

struct volume *pool_find_volume(struct pool *p, const char *name) {
        for (size_t i = 0; i < p->meta.n_volumes; i++)
                if (strcmp(p->meta.volumes[i].name, name) == 0)
                        return &p->meta.volumes[i];
        return NULL;
}

struct volume *pool_add_volume(struct pool *p, const char *name, const char *dm_uuid, const char *table) {
        struct volume *a, *v;

        a = reallocarray(p->meta.volumes, p->meta.n_volumes + 1, sizeof(*a));
        if (!a)
                return NULL;
        p->meta.volumes = a;
        v = &a[p->meta.n_volumes];
        *v = (struct volume) {
                .name = strdup(name),
                .dm_uuid = dm_uuid ? strdup(dm_uuid) : NULL,
                .table = strdup(table),
        };
        if (!v->name || !v->table || (dm_uuid && !v->dm_uuid)) {
                volume_done(v);
                return NULL;
        }
        p->meta.n_volumes++;
        return v;
}

struct snapshot *pool_add_snapshot(struct pool *p) {
        struct snapshot *a;

        a = reallocarray(p->meta.snapshots, p->meta.n_snapshots + 1, sizeof(*a));
        if (!a)
                return NULL;
        p->meta.snapshots = a;
        a[p->meta.n_snapshots] = (struct snapshot) {};
        return &a[p->meta.n_snapshots++];
}

void pool_remove_snapshot(struct pool *p, struct snapshot *s) {
        size_t i = s - p->meta.snapshots;

        /* A trial of a snapshot that is gone has nothing left to revert to. */
        for (size_t k = 0; k < p->meta.n_volumes; k++)
                if (p->meta.volumes[k].trial && strcmp(p->meta.volumes[k].trial, s->name) == 0)
                        volume_end_trial(&p->meta.volumes[k]);
        snapshot_done(s);
        memmove(s, s + 1, (p->meta.n_snapshots - i - 1) * sizeof(*s));
        p->meta.n_snapshots--;
}

void volume_end_trial(struct volume *v) {
        free(v->trial);
        v->trial = NULL;
        v->trial_boots = 0;
        v->trial_start_usec = 0;
}

void pool_remove_volume(struct pool *p, struct volume *v) {
        size_t i = v - p->meta.volumes;

        volume_done(v);
        memmove(v, v + 1, (p->meta.n_volumes - i - 1) * sizeof(*v));
        p->meta.n_volumes--;
}

size_t pool_count_snapshots(struct pool *p, const char *volume, bool only_live) {
        size_t n = 0;

        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                const struct snapshot *s = &p->meta.snapshots[i];

                if (strcmp(s->volume, volume) == 0 && (!only_live || s->state == SNAPSHOT_ACTIVE))
                        n++;
        }
        return n;
}

uint64_t snapshot_extent_count(const struct snapshot *s) {
        uint64_t n = 0;

        for (size_t i = 0; i < s->n_extents; i++)
                n += s->extents[i].count;
        return n;
}

/* A map of used extents, one byte each: pools have thousands, not millions. */
static int used_map(const struct pool *p, uint8_t **ret) {
        uint8_t *used = calloc(p->geo.extent_count ? p->geo.extent_count : 1, 1);

        if (!used)
                return -ENOMEM;
        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                const struct snapshot *s = &p->meta.snapshots[i];

                for (size_t k = 0; k < s->n_extents; k++)
                        for (uint64_t e = s->extents[k].start;
                             e < s->extents[k].start + s->extents[k].count && e < p->geo.extent_count; e++)
                                used[e] = 1;
        }
        *ret = used;
        return 0;
}

uint64_t pool_free_extents(const struct pool *p) {
        _cleanup_free_ uint8_t *used = NULL;
        uint64_t n = 0;

        if (used_map(p, &used) < 0)
                return 0;
        for (uint64_t e = 0; e < p->geo.extent_count; e++)
                n += !used[e];
        return n;
}

/*
 * First fit of one contiguous run; when the free space is fragmented, the
 * largest runs first, so a COW has as few segments as possible.
 */
int pool_allocate_extents(const struct pool *p, uint64_t count, struct extent_run **ret, size_t *ret_n) {
        _cleanup_free_ uint8_t *used = NULL;
        _cleanup_free_ struct extent_run *runs = NULL;
        uint64_t left = count;
        size_t n = 0;
        int r;

        if (count == 0)
                return -EINVAL;
        r = used_map(p, &used);
        if (r < 0)
                return r;
        if (pool_free_extents(p) < count)
                return -ENOSPC;

        while (left > 0) {
                uint64_t best_start = 0, best_len = 0, fit_start = 0;
                bool fit = false;
                struct extent_run *a;

                for (uint64_t e = 0; e < p->geo.extent_count;) {
                        uint64_t start, len;

                        if (used[e]) {
                                e++;
                                continue;
                        }
                        start = e;
                        while (e < p->geo.extent_count && !used[e])
                                e++;
                        len = e - start;
                        if (len >= left && !fit) {
                                fit = true;
                                fit_start = start;
                        }
                        if (len > best_len) {
                                best_len = len;
                                best_start = start;
                        }
                }
                if (fit) {
                        best_start = fit_start;
                        best_len = left;
                }
                a = reallocarray(runs, n + 1, sizeof(*runs));
                if (!a)
                        return -ENOMEM;
                runs = a;
                runs[n++] = (struct extent_run) { best_start, best_len };
                memset(used + best_start, 1, best_len);
                left -= best_len;
        }
        *ret = TAKE_PTR(runs);
        *ret_n = n;
        return 0;
}

bool snapshot_name_is_valid(const char *name) {
        size_t n = strlen(name);

        if (n == 0 || n > POOL_NAME_MAX || name[0] == '-' || name[0] == '.')
                return false;
        for (const char *c = name; *c; c++)
                if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-", *c))
                        return false;
        return true;
}

int snapshot_id_new(char **ret) {
        uint8_t b[16];
        char *s;

        if (getrandom(b, sizeof(b), 0) != sizeof(b))
                return -errno;
        s = malloc(33);
        if (!s)
                return -ENOMEM;
        for (int i = 0; i < 16; i++)
                sprintf(s + 2 * i, "%02x", b[i]);
        *ret = s;
        return 0;
}
