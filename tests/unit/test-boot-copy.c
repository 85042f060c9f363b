/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The copy of /boot: saved, put back exactly over a changed /boot, and
 * refused, with /boot unchanged, when the copy or its manifest is damaged.
 * "Exactly" is checked by saving the restored tree again: its manifest
 * (every entry's type, mode, owner, mtime, size and SHA-256) must hash to
 * the first digest.
 */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "boot-copy.h"
#include "keepalive.h"
#include "test.h"

static char top[] = "/tmp/test-boot-copy.XXXXXX";

static const char *at(const char *rel) {
        static char buf[4][512];
        static int k;

        k = (k + 1) % 4;
        snprintf(buf[k], sizeof(buf[k]), "%s/%s", top, rel);
        return buf[k];
}

static void put(const char *rel, const char *text, size_t repeat) {
        FILE *f = fopen(at(rel), "w");

        CHECK(f);
        for (size_t i = 0; i < repeat; i++)
                fputs(text, f);
        CHECK(fclose(f) == 0);
}

/* The digest of boot as it is now. */
static void digest_of(const char *boot, char ret[RB_BOOT_DIGEST_LEN + 1]) {
        CHECK_R(rb_boot_copy_save(at(boot), at("now"), at("now.manifest"), ret));
}

static unsigned keepalives;

static void count_keepalive(void) {
        keepalives++;
}

static void corrupt(const char *rel) {
        int fd = open(at(rel), O_WRONLY);

        CHECK(fd >= 0);
        CHECK(pwrite(fd, "X", 1, 3) == 1);
        close(fd);
}

int main(void) {
        char digest[RB_BOOT_DIGEST_LEN + 1], again[RB_BOOT_DIGEST_LEN + 1], before[RB_BOOT_DIGEST_LEN + 1];
        unsigned char md[32];
        char hostile[RB_BOOT_DIGEST_LEN + 1];
        const char *evil = "rollback-boot-copy 1 directory\n"
                           "f 0644 0 0 0.0 0 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 - ../escaped\n";
        uint64_t bytes;
        FILE *f;

        CHECK(mkdtemp(top));
        CHECK(mkdir(at("boot"), 0755) == 0);
        CHECK(mkdir(at("boot/grub"), 0755) == 0);
        CHECK(mkdir(at("boot/lost+found"), 0700) == 0);
        put("boot/vmlinuz-6.1.0-1", "kernel one ", 10000);
        put("boot/initrd.img-6.1.0-1", "initramfs with the rollback hook ", 30000);
        put("boot/grub/grub.cfg", "set default=0\n", 1);
        put("boot/grub/grubenv", "# GRUB Environment Block\n", 1);
        put("boot/config 6.1.0-1", "a name with a space\n", 1);
        CHECK(symlink("vmlinuz-6.1.0-1", at("boot/vmlinuz")) == 0);
        CHECK(chmod(at("boot/vmlinuz-6.1.0-1"), 0600) == 0);

        /* A daemon's watchdog is pinged while the copy goes on (1 MiB of initramfs: 16 blocks). */
        rb_set_keepalive(count_keepalive);
        CHECK_R(rb_boot_copy_save(at("boot"), at("copy"), at("copy.manifest"), digest));
        CHECK(keepalives >= 16);
        CHECK(rb_boot_digest_is_valid(digest));
        CHECK_R(rb_boot_copy_save(at("boot"), at("copy"), at("copy.manifest"), again));
        CHECK(strcmp(digest, again) == 0);

        /* The snapshots' GRUB entries (boot/rollback) are theirs: in no copy, and kept by every restore. */
        CHECK(mkdir(at("boot/" RB_BOOT_ENTRIES_DIR), 0755) == 0);
        CHECK(mkdir(at("boot/" RB_BOOT_ENTRIES_DIR "/s1"), 0755) == 0);
        put("boot/" RB_BOOT_ENTRIES_DIR "/s1/vmlinuz", "kernel one ", 10000);
        CHECK_R(rb_boot_copy_save(at("boot"), at("copy"), at("copy.manifest"), again));
        CHECK(strcmp(digest, again) == 0);
        CHECK(access(at("copy/" RB_BOOT_ENTRIES_DIR), F_OK) < 0);

        /* An upgrade: a new kernel, the old initramfs gone, GRUB's files and a link changed. */
        put("boot/vmlinuz-6.1.0-2", "kernel two ", 12000);
        put("boot/grub/grub.cfg", "set default=1\n", 1);
        CHECK(unlink(at("boot/initrd.img-6.1.0-1")) == 0);
        CHECK(mkdir(at("boot/initrd.img-6.1.0-1"), 0755) == 0);
        put("boot/initrd.img-6.1.0-1/inside", "a directory where a file was\n", 1);
        CHECK(unlink(at("boot/vmlinuz")) == 0);
        CHECK(symlink("vmlinuz-6.1.0-2", at("boot/vmlinuz")) == 0);
        CHECK(chmod(at("boot/vmlinuz-6.1.0-1"), 0644) == 0);
        digest_of("boot", before);
        CHECK(strcmp(before, digest) != 0);

        /* A damaged copy, a wrong digest, no manifest, a manifest naming a path outside: refused, boot unchanged. */
        corrupt("copy/grub/grub.cfg");
        CHECK(rb_boot_copy_restore(at("copy"), at("copy.manifest"), digest, at("boot"), &bytes) == -EBADMSG);
        digest_of("boot", again);
        CHECK(strcmp(before, again) == 0);
        put("copy/grub/grub.cfg", "set default=0\n", 1);
        CHECK(rb_boot_copy_restore(at("copy"), at("copy.manifest"), before, at("boot"), &bytes) == -EBADMSG);
        CHECK(rb_boot_copy_restore(at("copy"), at("none.manifest"), digest, at("boot"), &bytes) == -ENOENT);
        f = fopen(at("evil.manifest"), "w");
        CHECK(f && fputs(evil, f) >= 0 && fclose(f) == 0);
        CHECK(EVP_Digest(evil, strlen(evil), md, NULL, EVP_sha256(), NULL));
        for (int i = 0; i < 32; i++)
                sprintf(hostile + 2 * i, "%02x", md[i]);
        CHECK(rb_boot_copy_restore(at("copy"), at("evil.manifest"), hostile, at("boot"), &bytes) == -EBADMSG);
        digest_of("boot", again);
        CHECK(strcmp(before, again) == 0);

        /* What a restore cut off before its renames left behind, in a directory the restore removes too. */
        put("boot/.rollback-boot.3", "staged kernel ", 1000);
        put("boot/grub/.rollback-boot.0", "staged grub.cfg\n", 1);
        put("boot/initrd.img-6.1.0-1/.rollback-boot.1", "staged\n", 1);

        /* The copy's own mtime changed with the repair above: the content is what counts, and it is whole again. */
        keepalives = 0;
        CHECK_R(rb_boot_copy_restore(at("copy"), at("copy.manifest"), digest, at("boot"), &bytes));
        CHECK(keepalives >= 16);
        CHECK(access(at("boot/.rollback-boot.3"), F_OK) < 0);
        CHECK(access(at("boot/grub/.rollback-boot.0"), F_OK) < 0);
        CHECK(bytes == strlen("initramfs with the rollback hook ") * 30000 + strlen("set default=0\n"));
        CHECK(access(at("boot/vmlinuz-6.1.0-2"), F_OK) < 0);
        CHECK(access(at("boot/" RB_BOOT_ENTRIES_DIR "/s1/vmlinuz"), F_OK) == 0);
        digest_of("boot", again);
        CHECK(strcmp(digest, again) == 0);

        /* Once more: nothing left to write. */
        CHECK_R(rb_boot_copy_restore(at("copy"), at("copy.manifest"), digest, at("boot"), &bytes));
        CHECK(bytes == 0);

        /* A parent in /boot that is a link to an identical directory: not taken for it, in or out of the tree. */
        for (int inside = 0; inside <= 1; inside++) {
                const char *dir = inside ? "boot/old-grub" : "outside", *link = inside ? "old-grub" : "../outside";
                const char *moved = inside ? "boot/old-grub/grub.cfg" : "outside/grub.cfg";

                CHECK(mkdir(at(dir), 0755) == 0);
                CHECK(rename(at("boot/grub/grub.cfg"), at(moved)) == 0);
                CHECK(unlink(at("boot/grub/grubenv")) == 0 && rmdir(at("boot/grub")) == 0);
                CHECK(symlink(link, at("boot/grub")) == 0);
                CHECK_R(rb_boot_copy_restore(at("copy"), at("copy.manifest"), digest, at("boot"), &bytes));
                digest_of("boot", again);
                CHECK(strcmp(digest, again) == 0);
        }
        CHECK(access(at("outside/grub.cfg"), F_OK) == 0);

        /* A directory of /boot become a link: the next save replaces the copy's directory. */
        CHECK(unlink(at("boot/grub/grub.cfg")) == 0 && unlink(at("boot/grub/grubenv")) == 0);
        CHECK(rmdir(at("boot/grub")) == 0);
        CHECK(symlink("vmlinuz-6.1.0-1", at("boot/grub")) == 0);
        CHECK_R(rb_boot_copy_save(at("boot"), at("copy"), at("copy.manifest"), again));
        CHECK(strcmp(again, digest) != 0);

        /* Content changed with size and mtime kept (touch -d): the copy follows it. */
        {
                struct timespec ts[2];
                struct stat st;

                CHECK(stat(at("boot/vmlinuz-6.1.0-1"), &st) == 0);
                put("boot/vmlinuz-6.1.0-1", "kernel 1ne ", 10000);
                ts[0] = ts[1] = st.st_mtim;
                CHECK(utimensat(AT_FDCWD, at("boot/vmlinuz-6.1.0-1"), ts, 0) == 0);
                CHECK_R(rb_boot_copy_save(at("boot"), at("copy"), at("copy.manifest"), digest));
                CHECK(strcmp(again, digest) != 0);
                f = fopen(at("copy/vmlinuz-6.1.0-1"), "r");
                CHECK(f && fgets(hostile, 12, f) && strcmp(hostile, "kernel 1ne ") == 0);
                fclose(f);
        }
        return 0;
}
