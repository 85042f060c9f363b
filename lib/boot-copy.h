/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * A copy of /boot kept in the root filesystem, taken just before a
 * snapshot of root so that the snapshot holds it, and put back by a revert
 * so that GRUB boots the pre-upgrade kernel into the merge.  The copy is a
 * tree beside a manifest (one line per entry: type, mode, owner, mtime,
 * size, SHA-256, path); the pool records the manifest's SHA-256, which
 * vouches for the whole copy.  See docs/boot.md.
 */
#define RB_BOOT_DIGEST_LEN 64

/* Under /boot: a directory per snapshot of root with the kernel it boots from GRUB's menu (docs/boot.md). */
#define RB_BOOT_ENTRIES_DIR "rollback"

/* Makes copy an exact copy of boot (other filesystems under it left out), then writes manifest. */
int rb_boot_copy_save(const char *boot, const char *copy, const char *manifest,
                      char ret_digest[RB_BOOT_DIGEST_LEN + 1]);

/*
 * Makes boot hold exactly what the copy holds.  Checked whole first:
 * -ENOENT when there is no manifest, -EBADMSG when the manifest or the copy
 * do not match digest, -ENOSPC when boot cannot hold the files that differ;
 * in each case boot is unchanged.  *ret_bytes: the bytes written.
 */
int rb_boot_copy_restore(const char *copy, const char *manifest, const char *digest, const char *boot,
                         uint64_t *ret_bytes);

/* The names in dirfd but "." and "..", sorted; rollback's temporary files (.rollback-boot.*) only if asked for. */
int boot_list_dir(int dirfd, bool with_staged, char ***ret, size_t *ret_n);
void boot_names_free(char **names, size_t n);

/* Copies the file from to the new file to (synced); to is removed again when that fails. */
int boot_file_copy(const char *from, const char *to);

/* Writes text to path through a synced temporary file (path.tmp) renamed into place. */
int boot_write_text(const char *path, const char *text, size_t len);

/* Whether digest is 64 lowercase hex digits. */
int rb_boot_digest_is_valid(const char *digest);

struct snapshot;

/*
 * Before a snapshot of volume: when it is mounted read-write at M with a
 * M/boot, that /boot is copied to M/var/lib/rollback/boot.  1 and
 * *ret_digest when taken, 0 when there is nothing to take.
 */
int boot_copy_take(const char *volume, char **ret_digest);

/*
 * Before the first revert of volume since its last merge: when it is
 * mounted with a /boot, that /boot (the one that goes with the live
 * volume) is kept for cancel-revert; 1 and *ret_digest when kept.
 * *ret_bytes: at most what the copy and the revert's restore may write.
 */
int boot_copy_keep_replaced(const char *volume, char **ret_digest, uint64_t *ret_bytes);

/*
 * For a revert to s: when its volume is mounted with a /boot, the copy s
 * holds is put back there.  -ENODATA when s holds no copy, -EILSEQ when
 * it does not match the digest recorded, -ENOEXEC when no kernel in it has
 * an initramfs with rollback's hook (no boot could start the merge),
 * -EXDEV when /boot is its own filesystem now and was not then (or the
 * other way round), -ENOSPC when /boot cannot hold it; /boot is unchanged
 * then.
 */
int boot_copy_put_back(const struct snapshot *s, uint64_t *ret_bytes);

/*
 * For cancel-revert: the /boot that a revert of volume replaced goes back
 * (1), with the same errors; 0 when the volume is not mounted with a /boot.
 */
int boot_copy_put_back_replaced(const char *volume, const char *digest);

/*
 * The entry of the snapshot name about to be taken (taken before it, so
 * that its files are written while the older snapshots alone see them) in
 * GRUB's "Rollback snapshots" menu: when volume
 * is root, the running kernel is hard-linked into /boot/rollback/NAME
 * (dpkg replaces a kernel by renaming, so the link keeps it) and its
 * initramfs copied there (dracut rewrites one in place), beside its
 * release, the uuid of its pool p and the entry's title (1); 0 when volume
 * is not root or the running kernel's files are not in /boot.
 */
struct pool;
int boot_entry_keep(const struct pool *p, const char *volume, const char *name, const char *description);
/* The snapshot's entry goes (its kernel files, once nothing else links them). */
void boot_entry_forget(const char *name);
/* A snapshot left the pool (deleted, merged): its entry goes, and GRUB's menu is made again. */
void boot_entry_drop(const char *name);
/* The entries of the pool's snapshots no longer active in it go: how many went. */
unsigned boot_entries_prune(struct pool *p);
/* Whether /boot/rollback/name holds a kernel and an initramfs; *ret_release: the kernel's release. */
bool boot_entry_exists(const char *name, char **ret_release);
