// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * logreplay: replays a dm-log-writes log onto a device, one crash point at
 * a time (the guest's tool for tests/kernel/test-kernel-logwrites.sh).
 *
 *   logreplay LOG DEV POSITION
 *
 * POSITION is "0" for the start of the log, or what the previous call
 * printed.  Applies the log's entries from POSITION up to and including the
 * next one with FLUSH or FUA (a point the disk has promised to keep: a crash
 * there loses none of what came before), fsyncs DEV and prints
 *
 *   POSITION KIND
 *
 * KIND being flush, fua or end (the log ran out); POSITION is
 * ENTRY:OFFSET, ENTRY counting the entries applied since the start.  Marks are skipped; a discard zeroes its range, as
 * the device may have.  The log is dm-log-writes' (drivers/md/dm-log-writes.c):
 * a super block, then per entry one block of header (and a mark's name)
 * followed by the data written, all in blocks of the super's sector size.
 *
 * Exit status: 0 applied up to a flush or FUA, 3 at the end of the log, 2
 * bad usage, a damaged log or an I/O error.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LOG_MAGIC 0x6a736677736872ULL
#define LOG_VERSION 1
#define LOG_FLUSH (1 << 0)
#define LOG_FUA (1 << 1)
#define LOG_DISCARD (1 << 2)
#define LOG_MARK (1 << 3)

static uint64_t le64(const unsigned char *p) {
        uint64_t v = 0;
        for (int i = 7; i >= 0; i--)
                v = v << 8 | p[i];
        return v;
}

static int read_exact(int fd, void *buf, size_t len, uint64_t off, const char *what) {
        ssize_t n = pread(fd, buf, len, (off_t) off);
        if (n == (ssize_t) len)
                return 0;
        fprintf(stderr, "logreplay: cannot read %s at byte %" PRIu64 ": %s\n", what, off,
                n < 0 ? strerror(errno) : "short read");
        return -1;
}

static int write_all(int fd, const void *buf, size_t len, uint64_t off) {
        ssize_t n = pwrite(fd, buf, len, (off_t) off);
        if (n == (ssize_t) len)
                return 0;
        fprintf(stderr, "logreplay: cannot write the device at byte %" PRIu64 ": %s\n", off,
                n < 0 ? strerror(errno) : "short write");
        return -1;
}

/* POSITION is "0" or "ENTRY:BYTE" as printed: the entry index and its offset in the log. */
static int parse_position(const char *s, uint64_t *entry, uint64_t *offset) {
        char *end;
        if (!strcmp(s, "0")) {
                *entry = 0;
                *offset = 0;
                return 0;
        }
        errno = 0;
        *entry = strtoull(s, &end, 10);
        if (errno || *end != ':')
                return -1;
        *offset = strtoull(end + 1, &end, 10);
        return errno || *end ? -1 : 0;
}

int main(int argc, char **argv) {
        unsigned char super[512], head[32];
        uint64_t entry, offset, entries, dev_size;
        uint32_t bs;
        const char *kind = "end";
        unsigned char *buf = NULL;
        int log, dev, rc = 2;

        if (argc != 4 || parse_position(argv[3], &entry, &offset) < 0) {
                fprintf(stderr, "usage: logreplay LOG DEV POSITION (0 or as printed)\n");
                return 2;
        }
        log = open(argv[1], O_RDONLY);
        dev = open(argv[2], O_RDWR);
        if (log < 0 || dev < 0) {
                fprintf(stderr, "logreplay: cannot open %s: %s\n", log < 0 ? argv[1] : argv[2], strerror(errno));
                return 2;
        }
        dev_size = (uint64_t) lseek(dev, 0, SEEK_END);
        if (read_exact(log, super, sizeof(super), 0, "the super block") < 0)
                return 2;
        entries = le64(super + 16);
        bs = (uint32_t) le64(super + 24) & 0xffffffffu;
        if (le64(super) != LOG_MAGIC || le64(super + 8) != LOG_VERSION || bs < 512 || bs > 65536 ||
            (bs & (bs - 1))) {
                fprintf(stderr, "logreplay: %s is not a dm-log-writes log of version 1\n", argv[1]);
                return 2;
        }
        if (entry == 0)
                offset = bs;
        if (offset % bs) {
                fprintf(stderr, "logreplay: position %s is not at an entry\n", argv[3]);
                return 2;
        }

        for (; entry < entries; entry++) {
                uint64_t sector, nr, flags, len;

                if (read_exact(log, head, sizeof(head), offset, "an entry") < 0)
                        goto out;
                sector = le64(head);
                nr = le64(head + 8);
                flags = le64(head + 16);
                offset += bs;
                len = nr * bs;
                if (nr > (64u << 20) / bs || sector > dev_size / bs || nr > dev_size / bs - sector) {
                        fprintf(stderr, "logreplay: entry %" PRIu64 " writes %" PRIu64 " blocks at %" PRIu64
                                ", outside the device\n", entry, nr, sector);
                        goto out;
                }
                if (flags & LOG_MARK) {
                        /* A mark's name sits in its header block. */
                } else if (len) {
                        buf = realloc(buf, len);
                        if (!buf)
                                goto out;
                        if (flags & LOG_DISCARD)
                                memset(buf, 0, len);
                        else if (read_exact(log, buf, len, offset, "an entry's data") < 0)
                                goto out;
                        if (!(flags & LOG_DISCARD))
                                offset += len;
                        if (write_all(dev, buf, len, sector * bs) < 0)
                                goto out;
                }
                if (flags & (LOG_FLUSH | LOG_FUA)) {
                        kind = flags & LOG_FUA ? "fua" : "flush";
                        entry++;
                        break;
                }
        }
        if (fsync(dev) < 0) {
                fprintf(stderr, "logreplay: cannot sync %s: %s\n", argv[2], strerror(errno));
                goto out;
        }
        printf("%" PRIu64 ":%" PRIu64 " %s\n", entry, offset, kind);
        rc = strcmp(kind, "end") ? 0 : 3;
out:
        free(buf);
        return rc;
}
