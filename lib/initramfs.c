/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Whether an initramfs holds a file: the uncompressed cpio archives at its
 * start (early microcode) are walked, and the compressed one after them is
 * read through its decompressor, the same tool that built it.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "initramfs.h"
#include "macro.h"

#define NEWC_HEADER 110

static uint64_t align4(uint64_t n) {
        return (n + 3) & ~3ULL;
}

static int hex8(const char *p, uint64_t *ret) {
        char buf[9];
        char *end;

        memcpy(buf, p, 8);
        buf[8] = 0;
        *ret = strtoull(buf, &end, 16);
        return end == buf + 8 ? 0 : -EBADMSG;
}

/*
 * Walks the uncompressed cpio archives from *offset: 1 when one names a
 * path ending in name, else 0 with *offset where the compressed part
 * starts (or the file's end).
 */
static int walk_cpio(int fd, const char *name, uint64_t *offset) {
        size_t want = strlen(name);
        char h[NEWC_HEADER];
        uint64_t off = *offset;

        for (;;) {
                uint64_t namesize, filesize;
                ssize_t n = pread(fd, h, sizeof(h), off);
                _cleanup_free_ char *path = NULL;

                if (n < 0)
                        return -errno;
                /* Archives are padded with zeros between them. */
                if (n >= 4 && memcmp(h, "\0\0\0\0", 4) == 0) {
                        off += 4;
                        continue;
                }
                if (n < (ssize_t) sizeof(h) || (memcmp(h, "070701", 6) != 0 && memcmp(h, "070702", 6) != 0))
                        break;
                if (hex8(h + 54, &filesize) < 0 || hex8(h + 94, &namesize) < 0 || namesize == 0 ||
                    namesize > 4096)
                        return -EBADMSG;
                path = malloc(namesize);
                if (!path)
                        return -ENOMEM;
                if (pread(fd, path, namesize, off + NEWC_HEADER) != (ssize_t) namesize)
                        return -EBADMSG;
                path[namesize - 1] = 0;
                if (strlen(path) >= want && strcmp(path + strlen(path) - want, name) == 0)
                        return 1;
                off = align4(align4(off + NEWC_HEADER + namesize) + filesize);
        }
        *offset = off;
        return 0;
}

static const char *decompressor(const unsigned char *m, size_t n) {
        static const struct {
                const char *magic;
                size_t len;
                const char *tool;
        } table[] = {
                { "\x1f\x8b", 2, "gzip" },
                { "\x28\xb5\x2f\xfd", 4, "zstd" },
                { "\xfd" "7zXZ", 6, "xz" },
                { "\x02\x21\x4c\x18", 4, "lz4" },
                { "\x5d\x00\x00", 3, "xz" },    /* lzma */
                { "BZh", 3, "bzip2" },
        };

        for (size_t i = 0; i < ELEMENTSOF(table); i++)
                if (n >= table[i].len && memcmp(m, table[i].magic, table[i].len) == 0)
                        return table[i].tool;
        return NULL;
}

/* Searches what tool -dc makes of fd from offset for name. */
static int search_decompressed(int fd, uint64_t offset, const char *tool, const char *name) {
        size_t want = strlen(name), keep = 0;
        char buf[65536 + 256];
        int pipefd[2], status, found = 0;
        pid_t pid;

        if (want == 0 || want > 256 || lseek(fd, (off_t) offset, SEEK_SET) < 0)
                return -EINVAL;
        if (pipe2(pipefd, O_CLOEXEC) < 0)
                return -errno;
        pid = fork();
        if (pid < 0) {
                close(pipefd[0]);
                close(pipefd[1]);
                return -errno;
        }
        if (pid == 0) {
                int null = open("/dev/null", O_WRONLY);

                if (dup2(fd, 0) < 0 || dup2(pipefd[1], 1) < 0 || (null >= 0 && dup2(null, 2) < 0))
                        _exit(127);
                execlp(tool, tool, "-dc", NULL);
                _exit(127);
        }
        close(pipefd[1]);
        for (;;) {
                ssize_t n = read(pipefd[0], buf + keep, sizeof(buf) - keep);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                n += keep;
                if (memmem(buf, n, name, want)) {
                        found = 1;
                        break;
                }
                /* The name may straddle two reads. */
                keep = want - 1 < (size_t) n ? want - 1 : (size_t) n;
                memmove(buf, buf + n - keep, keep);
        }
        close(pipefd[0]);
        if (found)
                (void) kill(pid, SIGTERM);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        if (found)
                return 1;
        /* 127: no such tool here; cannot tell. */
        if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
                return -ENOPKG;
        return 0;
}

int initramfs_has(const char *path, const char *name) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        unsigned char magic[6];
        uint64_t offset = 0;
        const char *tool;
        ssize_t n;
        int r;

        if (fd < 0)
                return -errno;
        r = walk_cpio(fd, name, &offset);
        if (r != 0)
                return r;
        n = pread(fd, magic, sizeof(magic), (off_t) offset);
        if (n <= 0)
                return n < 0 ? -errno : 0;
        tool = decompressor(magic, n);
        if (!tool)
                return -EMEDIUMTYPE;
        return search_decompressed(fd, offset, tool, name);
}
