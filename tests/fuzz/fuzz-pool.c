/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * libFuzzer target for what rollback reads from a pool device: the header,
 * the metadata slots and the JSON document.
 *
 * The input is laid out as
 *   flags (1 byte) | header (88 bytes) | slot header (32 bytes) | document
 * and becomes a 16 MiB device: the header at 0, the slot at the header's
 * first slot offset.  The target recomputes the CRCs (unless flags bit 0 or
 * 1 says to keep the input's), so the fuzzer gets past them to the geometry
 * and the document.  A pool that loads must also survive use: extents
 * counted and allocated, the document re-encoded, committed and loaded again.
 */
#include <endian.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pool.h"

#define DEVICE_BYTES (16u << 20)
#define HEADER_BYTES 88u
#define HEADER_CRC 84u
#define SLOT0_OFFSET 56u

static void put_le32(uint8_t *p, uint32_t v) {
        v = htole32(v);
        memcpy(p, &v, 4);
}

static void lay_out(int fd, const uint8_t *data, size_t size) {
        uint8_t header[HEADER_BYTES] = {}, slot[POOL_SLOT_HEADER_SIZE] = {};
        uint8_t flags = data[0];
        const uint8_t *doc = data + 1 + HEADER_BYTES + POOL_SLOT_HEADER_SIZE;
        size_t doc_len;
        uint64_t slot0;

        memcpy(header, data + 1, HEADER_BYTES);
        if (!(flags & 1))
                put_le32(header + HEADER_CRC, crc32_le(0, header, HEADER_CRC));
        if (pwrite(fd, header, sizeof(header), 0) != sizeof(header))
                abort();

        if (size < 1 + HEADER_BYTES + POOL_SLOT_HEADER_SIZE)
                return;
        memcpy(slot, data + 1 + HEADER_BYTES, POOL_SLOT_HEADER_SIZE);
        doc_len = size - 1 - HEADER_BYTES - POOL_SLOT_HEADER_SIZE;
        memcpy(&slot0, header + SLOT0_OFFSET, 8);
        slot0 = le64toh(slot0);
        if (slot0 < HEADER_BYTES || slot0 > DEVICE_BYTES - POOL_SLOT_HEADER_SIZE - doc_len)
                return;
        if (!(flags & 2)) {
                put_le32(slot + 16, doc_len);
                put_le32(slot + 20, crc32_le(0, doc, doc_len));
                put_le32(slot + 28, crc32_le(0, slot, 28));
        }
        if (pwrite(fd, slot, sizeof(slot), slot0) != sizeof(slot) ||
            pwrite(fd, doc, doc_len, slot0 + POOL_SLOT_HEADER_SIZE) != (ssize_t) doc_len)
                abort();
}

/* What every command does with a pool it loaded: none of it may fail on a pool that loaded. */
static void use(int fd, struct pool *p) {
        struct extent_run *runs = NULL;
        struct pool *again = NULL;
        size_t n;
        char *text = NULL;
        int r;

        if (pool_free_extents(p) > 0) {
                if (pool_allocate_extents(p, 1, &runs, &n) < 0 || n != 1)
                        abort();
                free(runs);
        }
        if (pool_meta_to_json(&p->meta, &text) < 0)
                abort();
        free(text);
        r = pool_commit(p);
        /* A sequence number at its end is the one refusal a commit may give. */
        if (r == -EOVERFLOW && p->seq + 1 >= POOL_SEQ_LIMIT)
                return;
        if (r < 0 || pool_load(fd, &again) < 0)
                abort();
        if (again->seq != p->seq || again->meta.n_snapshots != p->meta.n_snapshots)
                abort();
        pool_free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct pool *p = NULL;
        int fd;

        if (size < 1 + HEADER_BYTES)
                return 0;
        fd = memfd_create("pool", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, DEVICE_BYTES) < 0)
                abort();
        lay_out(fd, data, size);
        if (pool_load(fd, &p) >= 0) {
                use(fd, p);
                pool_free(p);
        }
        close(fd);
        return 0;
}
