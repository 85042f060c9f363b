/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Finding rollback's hook in an initramfs as dracut builds one: an
 * uncompressed early cpio (microcode) followed by a compressed one, or an
 * uncompressed one alone.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "initramfs.h"
#include "test.h"

/* One newc entry; data may be NULL for a directory. */
static void entry(FILE *f, const char *name, const char *data) {
        size_t namesize = strlen(name) + 1, size = data ? strlen(data) : 0;
        long pad;

        fprintf(f, "070701%08X%08X%08X%08X%08X%08X%08zX%08X%08X%08X%08X%08zX%08X", 1, data ? 0100644 : 040755, 0,
                0, 1, 0, size, 0, 0, 0, 0, namesize, 0);
        fwrite(name, 1, namesize, f);
        for (pad = ftell(f); pad % 4; pad++)
                fputc(0, f);
        if (data)
                fwrite(data, 1, size, f);
        for (pad = ftell(f); pad % 4; pad++)
                fputc(0, f);
}

static void archive(FILE *f, const char *const *names) {
        for (; *names; names++)
                entry(f, *names, strchr(*names, '.') ? "#!/bin/sh\n" : NULL);
        entry(f, "TRAILER!!!", "");
}

/* path: early cpio, then the main one through tool (NULL: not compressed). */
static void build(const char *path, const char *tool, const char *const *main_names) {
        static const char *const early[] = { "kernel", "kernel/x86", "kernel/x86/microcode",
                                             "kernel/x86/microcode/GenuineIntel.bin", NULL };
        char cmd[512];
        FILE *f = fopen(path, "w");

        CHECK(f);
        archive(f, early);
        /* dracut pads the early archive to 512 bytes. */
        while (ftell(f) % 512)
                fputc(0, f);
        if (!tool) {
                archive(f, main_names);
                CHECK(fclose(f) == 0);
                return;
        }
        CHECK(fclose(f) == 0);
        snprintf(cmd, sizeof(cmd), "%s -c >> %s", tool, path);
        f = popen(cmd, "w");
        CHECK(f);
        archive(f, main_names);
        CHECK(pclose(f) == 0);
}

int main(void) {
        static const char *const with_hook[] = { "usr", "usr/bin", "usr/bin/sh.x", "var/lib/dracut/hooks/pre-mount",
                                                 "var/lib/dracut/hooks/pre-mount/10-" RB_INITRAMFS_HOOK, NULL };
        static const char *const without[] = { "usr", "usr/bin", "usr/bin/sh.x", "var/lib/dracut/hooks/pre-mount",
                                               "var/lib/dracut/hooks/pre-mount/30-other.sh", NULL };
        char path[] = "/tmp/test-initramfs.XXXXXX";
        int fd = mkstemp(path);
        FILE *f;

        CHECK(fd >= 0);
        close(fd);
        build(path, "gzip", with_hook);
        CHECK(initramfs_has(path, RB_INITRAMFS_HOOK) == 1);
        build(path, "gzip", without);
        CHECK(initramfs_has(path, RB_INITRAMFS_HOOK) == 0);
        /* The early archive's names are not the main one's. */
        CHECK(initramfs_has(path, "GenuineIntel.bin") == 1);
        build(path, "xz --check=crc32", with_hook);
        CHECK(initramfs_has(path, RB_INITRAMFS_HOOK) == 1);
        build(path, NULL, with_hook);
        CHECK(initramfs_has(path, RB_INITRAMFS_HOOK) == 1);
        build(path, NULL, without);
        CHECK(initramfs_has(path, RB_INITRAMFS_HOOK) == 0);
        /* Not an initramfs: cannot tell, not a "no". */
        f = fopen(path, "w");
        CHECK(f && fputs("random bytes of a fake kernel image\n", f) >= 0 && fclose(f) == 0);
        CHECK(initramfs_has(path, RB_INITRAMFS_HOOK) == -EMEDIUMTYPE);
        CHECK(initramfs_has("/nonexistent/initrd.img", RB_INITRAMFS_HOOK) == -ENOENT);
        unlink(path);
        return 0;
}
