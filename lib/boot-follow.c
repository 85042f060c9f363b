/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * /boot follows the root volume: a snapshot of a volume mounted at M with
 * a M/boot takes a copy of that /boot into M just before it is taken, so
 * that the snapshot holds it; a revert to it puts that /boot back before
 * the next boot, so that GRUB starts the pre-upgrade kernel into the merge
 * (docs/boot.md).
 */
#include <blkid.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "boot-copy.h"
#include "dm.h"
#include "fileio.h"
#include "initramfs.h"
#include "macro.h"
#include "rollback.h"
#include "tables.h"

/*
 * Where the copies live in the volume: var/lib/rollback, or .rollback at
 * its top when /var is another filesystem (a copy there would be in no
 * snapshot of the volume).  The snapshot's copy is /boot as it was; the
 * replaced one is the /boot a pending revert replaced, on the live volume,
 * for cancel-revert.
 */
static const char *const copy_parents[] = { "var/lib/rollback", ".rollback" };
#define COPY_NAME "boot"
#define REPLACED_NAME "boot-replaced"

/* Where the filesystem on devnum is mounted whole (not a bind mount of a part): -ENOENT if nowhere. */
static int mountpoint_of(dev_t devnum, char **ret) {
        _cleanup_free_ char *line = NULL;
        size_t size = 0;
        FILE *f;
        int r = -ENOENT;

        f = fopen("/proc/self/mountinfo", "re");
        if (!f)
                return -errno;
        while (getline(&line, &size, f) > 0) {
                char root[PATH_MAX], mnt[PATH_MAX];
                unsigned ma, mi;

                /* Mount points with spaces are escaped as \040: no such root volume is worth guessing at. */
                if (sscanf(line, "%*u %*u %u:%u %4095s %4095s", &ma, &mi, root, mnt) != 4 ||
                    makedev(ma, mi) != devnum || strcmp(root, "/") != 0 || strchr(mnt, '\\'))
                        continue;
                free(*ret);
                *ret = strdup(mnt);
                r = *ret ? 0 : -ENOMEM;
                if (strcmp(mnt, "/") == 0)
                        break;
        }
        fclose(f);
        return r;
}

static int join(const char *a, const char *b, char **ret) {
        return asprintf(ret, "%s%s%s", a, a[strlen(a) - 1] == '/' ? "" : "/", b) < 0 ? -ENOMEM : 0;
}

static int volume_devnum(const char *volume, dev_t *ret) {
        struct rbdm_info info;
        int r = rbdm_info(volume, &info);

        if (r < 0)
                return r;
        if (!info.exists)
                return -ENODEV;
        *ret = makedev(info.major, info.minor);
        return 0;
}

/* 1 and the mount point of volume when it is mounted and has a /boot directory, else 0. */
static int boot_of(const char *volume, char **ret_mnt, char **ret_boot) {
        _cleanup_free_ char *mnt = NULL, *boot = NULL;
        struct stat st;
        dev_t devnum;
        int r;

        r = volume_devnum(volume, &devnum);
        if (r < 0)
                return r;
        r = mountpoint_of(devnum, &mnt);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return r;
        r = join(mnt, "boot", &boot);
        if (r < 0)
                return r;
        if (stat(boot, &st) < 0 || !S_ISDIR(st.st_mode))
                return 0;
        *ret_mnt = TAKE_PTR(mnt);
        *ret_boot = TAKE_PTR(boot);
        return 1;
}

/* Makes the directory at mnt for the copies, on the volume's own filesystem: *ret its path. */
static int make_copy_parent(const char *mnt, char **ret) {
        struct stat top, st;
        int r;

        if (stat(mnt, &top) < 0)
                return -errno;
        for (const char *const *d = (const char *const[]) { "var", "var/lib", "var/lib/rollback", NULL }; *d; d++) {
                _cleanup_free_ char *path = NULL;

                if ((r = join(mnt, *d, &path)) < 0)
                        return r;
                if (mkdir(path, 0755) < 0 && errno != EEXIST)
                        return -errno;
                if (stat(path, &st) < 0)
                        return -errno;
                if (st.st_dev != top.st_dev)
                        break;
                if (!d[1]) {
                        *ret = TAKE_PTR(path);
                        return 0;
                }
        }
        r = join(mnt, copy_parents[1], ret);
        if (r < 0)
                return r;
        return mkdir(*ret, 0700) < 0 && errno != EEXIST ? -errno : 0;
}

/* Copies boot into the copy named name in the volume mounted at mnt. */
static int save_into(const char *mnt, const char *boot, const char *name, char **ret_digest) {
        _cleanup_free_ char *parent = NULL, *copy = NULL, *list = NULL;
        char digest[RB_BOOT_DIGEST_LEN + 1];
        int r;

        r = make_copy_parent(mnt, &parent);
        if (r < 0)
                return r;
        if ((r = join(parent, name, &copy)) < 0 || asprintf(&list, "%s.manifest", copy) < 0)
                return r < 0 ? r : -ENOMEM;
        r = rb_boot_copy_save(boot, copy, list, digest);
        if (r == -ENOSPC || r == -EDQUOT)
                return -EDQUOT;         /* the volume's room, not the pool's */
        if (r < 0)
                return r;
        *ret_digest = strdup(digest);
        return *ret_digest ? 1 : -ENOMEM;
}

/* The copy named name in the tree at mnt, wherever it was made, and its manifest. */
static int find_copy(const char *mnt, const char *name, char **ret_copy, char **ret_manifest) {
        for (size_t i = 0; i < ELEMENTSOF(copy_parents); i++) {
                _cleanup_free_ char *parent = NULL, *copy = NULL, *list = NULL;
                int r;

                if ((r = join(mnt, copy_parents[i], &parent)) < 0 || (r = join(parent, name, &copy)) < 0)
                        return r;
                if (asprintf(&list, "%s.manifest", copy) < 0)
                        return -ENOMEM;
                if (access(list, F_OK) < 0 && i + 1 < ELEMENTSOF(copy_parents))
                        continue;
                *ret_copy = TAKE_PTR(copy);
                *ret_manifest = TAKE_PTR(list);
                return 0;
        }
        return -ENOENT;
}

int boot_copy_take(const char *volume, char **ret_digest) {
        _cleanup_free_ char *mnt = NULL, *boot = NULL;
        struct statvfs sv;
        int r;

        *ret_digest = NULL;
        r = boot_of(volume, &mnt, &boot);
        if (r <= 0)
                return r;
        /* A read-only root cannot take it, and no package manager changes it. */
        if (statvfs(mnt, &sv) < 0)
                return -errno;
        if (sv.f_flag & ST_RDONLY)
                return 0;
        return save_into(mnt, boot, COPY_NAME, ret_digest);
}

static uint64_t tree_sum;

static int add_blocks(const char *path, const struct stat *st, int type, struct FTW *ftw) {
        tree_sum += (uint64_t) st->st_blocks * 512;
        return 0;
}

/* What the files under path take, on its filesystem alone. */
static uint64_t tree_bytes(const char *path) {
        tree_sum = 0;
        (void) nftw(path, add_blocks, 16, FTW_PHYS | FTW_MOUNT);
        return tree_sum;
}

int boot_copy_keep_replaced(const char *volume, char **ret_digest, uint64_t *ret_bytes) {
        _cleanup_free_ char *mnt = NULL, *boot = NULL;
        int r;

        *ret_digest = NULL;
        *ret_bytes = 0;
        r = boot_of(volume, &mnt, &boot);
        if (r <= 0)
                return r;
        *ret_bytes = tree_bytes(boot);
        return save_into(mnt, boot, REPLACED_NAME, ret_digest);
}

/* The copy's errors as a revert tells them: none to be had, or not the one recorded. */
static int copy_error(int r) {
        if (r == -ENOENT)
                return -ENODATA;
        if (r == -EBADMSG)
                return -EILSEQ;
        return r;
}

/* Mounts the snapshot's filesystem read-only at dir without replaying its journal. */
static int mount_snapshot(const char *device, const char *dir) {
        const char *type = NULL, *data = NULL;
        blkid_probe pr;
        int r;

        pr = blkid_new_probe_from_filename(device);
        if (!pr)
                return -errno ?: -ENOMEM;
        blkid_probe_enable_superblocks(pr, true);
        blkid_probe_set_superblocks_flags(pr, BLKID_SUBLKS_TYPE);
        if (blkid_do_safeprobe(pr) != 0 || blkid_probe_lookup_value(pr, "TYPE", &type, NULL) < 0) {
                blkid_free_probe(pr);
                return -EMEDIUMTYPE;
        }
        if (strcmp(type, "ext3") == 0 || strcmp(type, "ext4") == 0)
                data = "noload";
        else if (strcmp(type, "xfs") == 0)
                data = "norecovery,nouuid";
        r = mount(device, dir, type, MS_RDONLY | MS_NODEV | MS_NOSUID | MS_NOEXEC, data) < 0 ? -errno : 0;
        blkid_free_probe(pr);
        return r;
}

static bool is_initramfs_name(const char *name) {
        return strncmp(name, "initrd.img-", 11) == 0 || strncmp(name, "initramfs-", 10) == 0 ||
               strncmp(name, "initrd-", 7) == 0;
}

static int cmp_names_desc(const struct dirent **a, const struct dirent **b) {
        return -strverscmp((*a)->d_name, (*b)->d_name);
}

/*
 * Whether some kernel in the copy has an initramfs with rollback's hook,
 * which the boot into the merge needs: newest first, the first one found
 * will do.  One that cannot be read here (no decompressor) counts as yes,
 * and so does a /boot with no initramfs at all: the kernel boots from
 * elsewhere (an ESP, the hypervisor), and /boot cannot tell.
 */
static int copy_can_start_merge(const char *copy) {
        struct dirent **names = NULL;
        bool seen = false, found = false;
        int n;

        n = scandir(copy, &names, NULL, cmp_names_desc);
        if (n < 0)
                return -errno;
        for (int i = 0; i < n; i++) {
                _cleanup_free_ char *path = NULL;

                if (!found && is_initramfs_name(names[i]->d_name) && join(copy, names[i]->d_name, &path) >= 0) {
                        int k = initramfs_has(path, RB_INITRAMFS_HOOK);

                        seen = true;
                        found = k > 0 || k == -ENOPKG || k == -EMEDIUMTYPE;
                }
                free(names[i]);
        }
        free(names);
        return seen && !found ? -ENOEXEC : 0;
}

int boot_copy_put_back(const struct snapshot *s, uint64_t *ret_bytes) {
        _cleanup_free_ char *mnt = NULL, *boot = NULL, *snap = NULL, *device = NULL, *copy = NULL,
                            *manifest = NULL;
        char dir[] = "/run/rollback-boot.XXXXXX";
        int r;

        *ret_bytes = 0;
        r = boot_of(s->volume, &mnt, &boot);
        if (r <= 0)
                return r;
        if (!s->boot_digest)
                return -ENODATA;
        if ((r = name_snapshot(s, &snap)) < 0 || (r = join("/dev/mapper", snap, &device)) < 0)
                return r;
        if (!mkdtemp(dir))
                return -errno;
        r = mount_snapshot(device, dir);
        if (r >= 0) {
                if ((r = find_copy(dir, COPY_NAME, &copy, &manifest)) >= 0 && (r = copy_can_start_merge(copy)) >= 0)
                        r = rb_boot_copy_restore(copy, manifest, s->boot_digest, boot, ret_bytes);
                (void) umount2(dir, MNT_DETACH);
        }
        (void) rmdir(dir);
        return copy_error(r);
}

int boot_copy_put_back_replaced(const char *volume, const char *digest) {
        _cleanup_free_ char *mnt = NULL, *boot = NULL, *copy = NULL, *manifest = NULL;
        int r;

        r = boot_of(volume, &mnt, &boot);
        if (r <= 0)
                return r;
        r = find_copy(mnt, REPLACED_NAME, &copy, &manifest);
        if (r >= 0)
                r = rb_boot_copy_restore(copy, manifest, digest, boot, NULL);
        return r < 0 ? copy_error(r) : 1;
}

/* ---- the snapshots' GRUB entries: /boot/rollback/NAME ---- */

#define ENTRIES_PATH "/boot/" RB_BOOT_ENTRIES_DIR
static const char *const entry_files[] = { "vmlinuz", "initrd.img", "release", "pool", "title" };

static int entry_path(const char *name, const char *file, char **ret) {
        return asprintf(ret, ENTRIES_PATH "/%s%s%s", name, file ? "/" : "", file ?: "") < 0 ? -ENOMEM : 0;
}

void boot_entry_forget(const char *name) {
        _cleanup_free_ char *dir = NULL;

        for (size_t i = 0; i < ELEMENTSOF(entry_files); i++) {
                _cleanup_free_ char *path = NULL;

                if (entry_path(name, entry_files[i], &path) >= 0)
                        (void) unlink(path);
        }
        if (entry_path(name, NULL, &dir) >= 0)
                (void) rmdir(dir);
}

void boot_entry_drop(const char *name) {
        boot_entry_forget(name);
        (void) rb_boot_menu_update();
}

bool boot_entry_exists(const char *name, char **ret_release) {
        _cleanup_free_ char *kernel = NULL, *initrd = NULL, *release = NULL;
        char line[256] = "";

        if (entry_path(name, "vmlinuz", &kernel) < 0 || entry_path(name, "initrd.img", &initrd) < 0 ||
            entry_path(name, "release", &release) < 0 || access(kernel, R_OK) < 0 || access(initrd, R_OK) < 0)
                return false;
        (void) read_first_line(release, line, sizeof(line));
        if (ret_release)
                *ret_release = strdup(line);
        return true;
}

/* A hard link: no room taken until an upgrade replaces the file /boot names it by (dpkg renames). */
static int entry_link(const char *from, const char *name, const char *file) {
        _cleanup_free_ char *to = NULL;
        int r;

        r = entry_path(name, file, &to);
        if (r < 0)
                return r;
        return link(from, to) < 0 ? -errno : 0;
}

/* The entry's title in GRUB's menu: name, date, kernel and description, on one line. */
static int entry_title(const char *name, const char *description, const char *release, char **ret) {
        time_t t = time(NULL);
        char created[32];
        struct tm tm;

        localtime_r(&t, &tm);
        strftime(created, sizeof(created), "%Y-%m-%d %H:%M", &tm);
        if (asprintf(ret, "%s, %s, Linux %s%s%s\n", name, created, release, description ? ": " : "",
                     description ?: "") < 0)
                return -ENOMEM;
        for (char *c = *ret; *c && c[1]; c++)
                if (*c == '\n' || *c == '\t')
                        *c = ' ';
        return 0;
}

int boot_entry_keep(const struct pool *p, const char *volume, const char *name, const char *description) {
        _cleanup_free_ char *mnt = NULL, *boot = NULL, *kernel = NULL, *initrd = NULL, *dir = NULL,
                            *release = NULL, *title = NULL, *title_path = NULL, *initrd_copy = NULL,
                            *pool = NULL;
        char uuid[POOL_UUID_STRING_MAX];
        struct utsname u;
        int r;

        r = boot_of(volume, &mnt, &boot);
        if (r <= 0 || strcmp(mnt, "/") != 0)
                return r;
        /* The running kernel: the one known to start this root. */
        if (uname(&u) < 0)
                return -errno;
        if (asprintf(&kernel, "/boot/vmlinuz-%s", u.release) < 0 || asprintf(&initrd, "/boot/initrd.img-%s", u.release) < 0)
                return -ENOMEM;
        if (access(kernel, R_OK) < 0 || access(initrd, R_OK) < 0)
                return 0;
        boot_entry_forget(name);
        if (mkdir(ENTRIES_PATH, 0755) < 0 && errno != EEXIST)
                return -errno;
        r = entry_path(name, NULL, &dir);
        if (r < 0)
                return r;
        if (mkdir(dir, 0755) < 0)
                return -errno;
        r = entry_link(kernel, name, "vmlinuz");
        if (r >= 0 && (r = entry_path(name, "initrd.img", &initrd_copy)) >= 0)
                r = boot_file_copy(initrd, initrd_copy);
        if (r >= 0 && (r = entry_path(name, "release", &release)) >= 0)
                r = boot_write_text(release, u.release, strlen(u.release));
        pool_uuid_to_string(p->geo.uuid, uuid);
        if (r >= 0 && (r = entry_path(name, "pool", &pool)) >= 0)
                r = boot_write_text(pool, uuid, strlen(uuid));
        /* Last: /etc/grub.d/42_rollback offers a directory with a title, so a half-made one is never offered. */
        if (r >= 0 && (r = entry_title(name, description, u.release, &title)) >= 0 && (r = entry_path(name, "title", &title_path)) >= 0)
                r = boot_write_text(title_path, title, strlen(title));
        if (r < 0) {
                boot_entry_forget(name);
                return r;
        }
        return 1;
}

/* The names of the entries in /boot/rollback, sorted: directories with a title, a kernel and an initramfs. */
static int list_entries(char ***ret, size_t *ret_n) {
        _cleanup_close_ int fd = open(ENTRIES_PATH, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        size_t n = 0, kept = 0;
        char **names;
        int r;

        *ret = NULL;
        *ret_n = 0;
        if (fd < 0)
                return errno == ENOENT ? 0 : -errno;
        r = boot_list_dir(fd, false, &names, &n);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *title = NULL;

                /* No snapshot's name starts with '.': the menu and its temporary file do. */
                if (names[i][0] != '.' && entry_path(names[i], "title", &title) >= 0 && access(title, R_OK) == 0 &&
                    boot_entry_exists(names[i], NULL))
                        names[kept++] = names[i];
                else
                        free(names[i]);
        }
        *ret = names;
        *ret_n = kept;
        return 0;
}

/* One entry: GRUB's submenu set rollback_boot (/boot's path on its filesystem) and rollback_cmdline. */
static int menu_entry(FILE *f, const char *name) {
        _cleanup_free_ char *path = NULL;
        char title[512];
        int r;

        if (entry_path(name, "title", &path) < 0)
                return -ENOMEM;
        r = read_first_line(path, title, sizeof(title));
        if (r < 0)
                return r;
        fputs("menuentry '", f);
        /* In GRUB's single quotes a quote is closed, escaped and opened again. */
        for (const char *c = title; *c; c++)
                fputs(*c == '\'' ? "'\\''" : (char[]) { *c, 0 }, f);
        fprintf(f, "' --id 'rollback-%s' {\n"
                   "\tlinux $rollback_boot/" RB_BOOT_ENTRIES_DIR "/%s/vmlinuz root=/dev/mapper/rollback-%s-view ro "
                   "rd.rollback.boot=%s $rollback_cmdline\n"
                   "\tinitrd $rollback_boot/" RB_BOOT_ENTRIES_DIR "/%s/initrd.img\n"
                   "}\n", name, name, name, name, name);
        return 0;
}

/*
 * Written whole and renamed into place, never half: GRUB reads it at every
 * boot.  No update-grub: grub.cfg holds only the submenu that sources it
 * (/etc/grub.d/42_rollback), so it stays as the admin's update-grub made it.
 */
int rb_boot_menu_update(void) {
        _cleanup_free_ char *text = NULL;
        char **names = NULL;
        size_t n = 0, len = 0;
        FILE *f;
        int r;

        if (access(ENTRIES_PATH, F_OK) < 0)
                return 0;
        r = list_entries(&names, &n);
        if (r < 0)
                return r;
        f = open_memstream(&text, &len);
        if (!f) {
                r = -ENOMEM;
                goto free_names;
        }
        fputs("# rollback's snapshots, sourced by GRUB's \"Rollback snapshots\" submenu (/etc/grub.d/42_rollback).\n"
              "# Made anew as snapshots come and go: do not edit.\n", f);
        for (size_t i = 0; i < n && r >= 0; i++)
                r = menu_entry(f, names[i]);
        if (n == 0)
                fputs("menuentry 'No snapshot to boot' --id 'rollback-none' {\n\ttrue\n}\n", f);
        if (fclose(f) != 0 && r >= 0)
                r = -ENOMEM;
        if (r >= 0)
                r = boot_write_text(RB_BOOT_MENU, text, len);
free_names:
        boot_names_free(names, n);
        return r < 0 ? r : 1;
}

/* Whether the entry name belongs to the pool of pool_uuid: it names it, or no pool at all. */
static bool entry_of_pool(const char *name, const char *pool_uuid) {
        _cleanup_free_ char *path = NULL;
        char line[POOL_UUID_STRING_MAX] = "";

        if (entry_path(name, "pool", &path) < 0 || read_first_line(path, line, sizeof(line)) < 0)
                return true;
        return strcmp(line, pool_uuid) == 0;
}

unsigned boot_entries_prune(struct pool *p) {
        _cleanup_closedir_ DIR *d = opendir(ENTRIES_PATH);
        char uuid[POOL_UUID_STRING_MAX];
        struct dirent *de;
        unsigned n = 0;

        if (!d)
                return 0;
        pool_uuid_to_string(p->geo.uuid, uuid);
        while ((de = readdir(d))) {
                const struct snapshot *s;

                /* Another pool's snapshots are not this one's to judge. */
                if (de->d_name[0] == '.' || !entry_of_pool(de->d_name, uuid))
                        continue;
                s = pool_find_snapshot(p, de->d_name);
                if (s && s->state == SNAPSHOT_ACTIVE)
                        continue;
                boot_entry_forget(de->d_name);
                n++;
        }
        return n;
}
