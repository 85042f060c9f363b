/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The ext2/3/4 mount count, read from a crafted superblock. */
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "evidence.h"
#include "test.h"

/* An image of size bytes with an ext superblock at 1024: the magic and the mount count (both le16). */
static int make_image(size_t size, uint16_t magic, uint16_t mount_count) {
        char path[] = "/tmp/test-evidence.XXXXXX";
        uint8_t sb[1024] = {};
        int fd = mkstemp(path);

        CHECK(fd >= 0);
        unlink(path);
        CHECK(ftruncate(fd, size) == 0);
        sb[0x34] = mount_count & 0xff;
        sb[0x35] = mount_count >> 8;
        sb[0x38] = magic & 0xff;
        sb[0x39] = magic >> 8;
        /* Around it, what a real superblock has: counts and sizes, nothing that looks like the fields. */
        memset(sb, 0xaa, 0x34);
        CHECK(pwrite(fd, sb, size < 2048 ? size - 1024 : sizeof(sb), 1024) > 0);
        return fd;
}

int main(void) {
        unsigned count;
        int fd;

        fd = make_image(64 << 10, 0xef53, 5);
        CHECK_R(ext_mount_count(fd, &count));
        CHECK(count == 5);
        close(fd);

        /* Little endian, all 16 bits. */
        fd = make_image(64 << 10, 0xef53, 0xfe01);
        CHECK_R(ext_mount_count(fd, &count));
        CHECK(count == 0xfe01);
        close(fd);

        /* No ext magic (another filesystem, or the magic byte-swapped): no evidence. */
        fd = make_image(64 << 10, 0x53ef, 5);
        CHECK(ext_mount_count(fd, &count) == -ENOMEDIUM);
        close(fd);
        fd = make_image(64 << 10, 0, 0);
        CHECK(ext_mount_count(fd, &count) == -ENOMEDIUM);
        close(fd);

        /* A volume ending inside the superblock, before the magic. */
        fd = make_image(1024 + 0x38, 0xef53, 5);
        CHECK(ext_mount_count(fd, &count) == -ENOMEDIUM);
        close(fd);

        /* Not readable: the error, not a count. */
        CHECK(ext_mount_count(-1, &count) == -EBADF);

        printf("ok\n");
        return 0;
}
