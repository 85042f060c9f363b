/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The copy of /boot that a snapshot of root carries, and putting it back:
 * see boot-copy.h and docs/boot.md.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "boot-copy.h"
#include "keepalive.h"
#include "macro.h"

/* Names of rollback's own temporary files in a tree: never copied, never kept. */
#define TMP_PREFIX ".rollback-boot."
#define TMP_NAME TMP_PREFIX "tmp"
#define MANIFEST_HEADER "rollback-boot-copy 1"

struct entry {
        char type;              /* 'd', 'f', 'l', or 'm': a mount point, another filesystem left out */
        unsigned mode;          /* permission bits */
        unsigned uid, gid;
        struct timespec mtime;
        uint64_t size;
        char sha[RB_BOOT_DIGEST_LEN + 1];
        char *target;           /* of a symlink */
        char *path;             /* relative to the tree */
        bool write;             /* restore: differs in boot */
        char *staged;           /* restore: written beside it under this name, to be renamed into place */
};

struct manifest {
        bool separate;          /* /boot was its own filesystem */
        struct entry *entries;
        size_t n;
};

static void manifest_done(struct manifest *m) {
        for (size_t i = 0; i < m->n; i++) {
                free(m->entries[i].path);
                free(m->entries[i].target);
                free(m->entries[i].staged);
        }
        free(m->entries);
}

static void evp_freep(EVP_MD_CTX **c) {
        EVP_MD_CTX_free(*c);
}

static void fclosep(FILE **f) {
        if (*f)
                fclose(*f);
}

int rb_boot_digest_is_valid(const char *digest) {
        if (!digest || strlen(digest) != RB_BOOT_DIGEST_LEN)
                return false;
        return strspn(digest, "0123456789abcdef") == RB_BOOT_DIGEST_LEN;
}

static void to_hex(const unsigned char *md, char ret[RB_BOOT_DIGEST_LEN + 1]) {
        for (int i = 0; i < 32; i++)
                sprintf(ret + 2 * i, "%02x", md[i]);
}

static int sha256_buffer(const void *p, size_t n, char ret[RB_BOOT_DIGEST_LEN + 1]) {
        unsigned char md[32];

        if (!EVP_Digest(p, n, md, NULL, EVP_sha256(), NULL))
                return -ENOMEM;
        to_hex(md, ret);
        return 0;
}

/* Hashes what fd holds from its start; with out >= 0, also writes it there. */
static int sha256_fd(int fd, int out, char ret[RB_BOOT_DIGEST_LEN + 1]) {
        _cleanup_(evp_freep) EVP_MD_CTX *c = EVP_MD_CTX_new();
        unsigned char md[32], buf[1 << 16];
        ssize_t n;

        if (!c || !EVP_DigestInit_ex(c, EVP_sha256(), NULL))
                return -ENOMEM;
        if (lseek(fd, 0, SEEK_SET) < 0)
                return -errno;
        while ((n = read(fd, buf, sizeof(buf))) != 0) {
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                EVP_DigestUpdate(c, buf, n);
                for (ssize_t done = 0, w; out >= 0 && done < n; done += w) {
                        w = write(out, buf + done, n - done);
                        if (w < 0)
                                return -errno;
                }
                rb_keepalive();
        }
        EVP_DigestFinal_ex(c, md, NULL);
        to_hex(md, ret);
        return 0;
}

int boot_file_copy(const char *from, const char *to) {
        _cleanup_close_ int in = -1, out = -1;
        char sha[RB_BOOT_DIGEST_LEN + 1];
        int r;

        in = open(from, O_RDONLY | O_CLOEXEC);
        if (in < 0)
                return -errno;
        out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (out < 0)
                return -errno;
        r = sha256_fd(in, out, sha);
        if (r >= 0 && fsync(out) < 0)
                r = -errno;
        if (r < 0)
                (void) unlink(to);
        return r;
}

/* Path bytes the manifest cannot hold as they are (space, control, backslash) become \xHH. */
static void put_escaped(FILE *f, const char *s) {
        for (const unsigned char *c = (const unsigned char *) s; *c; c++)
                if (*c <= ' ' || *c >= 0x7f || *c == '\\')
                        fprintf(f, "\\x%02x", *c);
                else
                        fputc(*c, f);
}

static int unescape(const char *s, char **ret) {
        char *out = malloc(strlen(s) + 1), *o = out;
        unsigned v;

        if (!out)
                return -ENOMEM;
        for (; *s; s++) {
                if (*s != '\\') {
                        *o++ = *s;
                        continue;
                }
                if (s[1] != 'x' || !isxdigit((unsigned char) s[2]) || !isxdigit((unsigned char) s[3]) ||
                    sscanf(s + 2, "%2x", &v) != 1 || v == 0) {
                        free(out);
                        return -EBADMSG;
                }
                *o++ = (char) v;
                s += 3;
        }
        *o = 0;
        *ret = out;
        return 0;
}

static int cmp_names(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

void boot_names_free(char **names, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        free(names);
}

/* The names in dirfd, sorted, so that the same tree gives the same manifest. */
static bool is_staged(const char *name) {
        return strncmp(name, TMP_PREFIX, strlen(TMP_PREFIX)) == 0;
}

/* The names in dirfd, sorted; our temporary files only if asked for. */
int boot_list_dir(int dirfd, bool with_staged, char ***ret, size_t *ret_n) {
        _cleanup_closedir_ DIR *d = NULL;
        char **names = NULL;
        size_t n = 0;
        struct dirent *de;
        int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

        if (fd < 0)
                return -errno;
        d = fdopendir(fd);
        if (!d) {
                close(fd);
                return -errno;
        }
        while ((errno = 0, de = readdir(d))) {
                char **grown;

                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
                    (!with_staged && is_staged(de->d_name)))
                        continue;
                grown = realloc(names, (n + 1) * sizeof(*names));
                if (!grown) {
                        boot_names_free(names, n);
                        return -ENOMEM;
                }
                names = grown;
                names[n] = strdup(de->d_name);
                if (!names[n]) {
                        boot_names_free(names, n);
                        return -ENOMEM;
                }
                n++;
        }
        if (errno) {
                boot_names_free(names, n);
                return -errno;
        }
        if (n > 0)
                qsort(names, n, sizeof(*names), cmp_names);
        *ret = names;
        *ret_n = n;
        return 0;
}

/*
 * The kernels kept for the snapshots' boot entries (/boot/rollback): they
 * belong to the snapshots, not to the /boot a snapshot carries, so a copy
 * leaves them out and a restore leaves them be.
 */
static bool is_entries_dir(const char *path) {
        return strcmp(path, RB_BOOT_ENTRIES_DIR) == 0;
}

/* prefix/name, or name at the top. */
static int child_path(const char *prefix, const char *name, char **ret) {
        return asprintf(ret, "%s%s%s", prefix, *prefix ? "/" : "", name) < 0 ? -ENOMEM : 0;
}

static int remove_at(int dirfd, const char *name);

static int remove_tree_at(int dirfd, const char *name) {
        _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        char **names;
        size_t n;
        int r;

        if (fd < 0)
                return -errno;
        r = boot_list_dir(fd, true, &names, &n);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n && r >= 0; i++)
                r = remove_at(fd, names[i]);
        boot_names_free(names, n);
        if (r < 0)
                return r;
        return unlinkat(dirfd, name, AT_REMOVEDIR) < 0 ? -errno : 0;
}

/* Removes name in dirfd, a directory with what it holds. */
static int remove_at(int dirfd, const char *name) {
        struct stat st;

        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (S_ISDIR(st.st_mode))
                return remove_tree_at(dirfd, name);
        return unlinkat(dirfd, name, 0) < 0 ? -errno : 0;
}

/* Gives name in dirfd the owner, mode and mtime of e. */
static int set_attrs(int dirfd, const char *name, const struct entry *e) {
        struct timespec ts[2] = { e->mtime, e->mtime };

        if (fchownat(dirfd, name, e->uid, e->gid, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        if (e->type != 'l' && fchmodat(dirfd, name, e->mode, 0) < 0)
                return -errno;
        return utimensat(dirfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

/*
 * Writes e (what src holds, or its link target) to tmp in dirfd, synced,
 * with e's attributes; a file must hash to e->sha when one is given.
 * Nothing is left at tmp on failure.
 */
static int stage_at(int src, int dirfd, const char *tmp, const struct entry *e, char sha[RB_BOOT_DIGEST_LEN + 1]) {
        _cleanup_close_ int out = -1;
        int r = 0;

        (void) unlinkat(dirfd, tmp, 0);
        if (e->type == 'l') {
                if (symlinkat(e->target, dirfd, tmp) < 0)
                        return -errno;
        } else {
                out = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (out < 0)
                        return -errno;
                r = sha256_fd(src, out, sha);
                if (r >= 0 && e->sha[0] && strcmp(sha, e->sha) != 0)
                        r = -EBADMSG;   /* the copy changed since it was checked */
                if (r >= 0 && fsync(out) < 0)
                        r = -errno;
        }
        if (r >= 0)
                r = set_attrs(dirfd, tmp, e);
        if (r < 0)
                (void) unlinkat(dirfd, tmp, 0);
        return r;
}

/* Puts e at name in dirfd through a temporary name, so that name is the old entry or the new one. */
static int write_at(int src, int dirfd, const char *name, const struct entry *e, char sha[RB_BOOT_DIGEST_LEN + 1]) {
        struct stat st;
        int r;

        r = stage_at(src, dirfd, TMP_NAME, e, sha);
        if (r < 0)
                return r;
        /* A directory is not replaced by a rename. */
        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) >= 0 && S_ISDIR(st.st_mode))
                r = remove_at(dirfd, name);
        if (r >= 0 && renameat(dirfd, TMP_NAME, dirfd, name) < 0)
                r = -errno;
        if (r < 0)
                (void) unlinkat(dirfd, TMP_NAME, 0);
        return r;
}

static int read_link_at(int dirfd, const char *name, char **ret) {
        char buf[PATH_MAX];
        ssize_t n = readlinkat(dirfd, name, buf, sizeof(buf) - 1);

        if (n < 0)
                return -errno;
        buf[n] = 0;
        *ret = strdup(buf);
        return *ret ? 0 : -ENOMEM;
}

static void entry_from_stat(struct entry *e, char type, const struct stat *st) {
        e->type = type;
        e->mode = st->st_mode & 07777;
        e->uid = st->st_uid;
        e->gid = st->st_gid;
        e->mtime = st->st_mtim;
        e->size = type == 'f' ? (uint64_t) st->st_size : 0;
}

static void put_entry(FILE *f, const struct entry *e, const char *path) {
        /* A mount point's own attributes belong to the other filesystem. */
        if (e->type == 'm') {
                fputs("m 0000 0 0 0.000000000 0 - - ", f);
                put_escaped(f, path);
                fputc('\n', f);
                return;
        }
        fprintf(f, "%c %04o %u %u %lld.%09ld %llu %s ", e->type, e->mode, e->uid, e->gid, (long long) e->mtime.tv_sec,
                e->mtime.tv_nsec, (unsigned long long) e->size, e->type == 'f' ? e->sha : "-");
        if (e->type == 'l')
                put_escaped(f, e->target);
        else
                fputc('-', f);
        fputc(' ', f);
        put_escaped(f, path);
        fputc('\n', f);
}

/* ---- saving ---- */

struct save {
        dev_t dev;              /* of boot: other filesystems under it are left out */
        FILE *manifest;
};

static int save_dir(struct save *sv, int src, int dst, const char *prefix);

/*
 * The copy's file is rewritten unless it hashes as the source does: a size
 * and mtime kept across a change (touch -d) must not let a stale copy be
 * vouched for.
 */
static int save_file(int src, int dst, const char *name, struct entry *e) {
        _cleanup_close_ int in = -1, old = -1;
        char sha[RB_BOOT_DIGEST_LEN + 1];
        int r;

        in = openat(src, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (in < 0)
                return -errno;
        r = sha256_fd(in, -1, e->sha);
        if (r < 0)
                return r;
        old = openat(dst, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (old >= 0 && sha256_fd(old, -1, sha) >= 0 && strcmp(sha, e->sha) == 0)
                return set_attrs(dst, name, e);
        return write_at(in, dst, name, e, sha);
}

static int save_entry(struct save *sv, int src, int dst, const char *name, const char *path) {
        _cleanup_free_ char *old = NULL;
        struct entry e = {};
        struct stat st;
        int r;

        if (fstatat(src, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        /* Another filesystem (an ESP at /boot/efi): only its mount point is kept, so that it stays. */
        if (st.st_dev != sv->dev) {
                e.type = 'm';
                put_entry(sv->manifest, &e, path);
                return remove_at(dst, name);
        }
        if (S_ISDIR(st.st_mode)) {
                _cleanup_close_ int s = -1, d = -1;

                entry_from_stat(&e, 'd', &st);
                put_entry(sv->manifest, &e, path);
                if (fstatat(dst, name, &st, AT_SYMLINK_NOFOLLOW) >= 0 && !S_ISDIR(st.st_mode) &&
                    (r = remove_at(dst, name)) < 0)
                        return r;
                if (mkdirat(dst, name, 0700) < 0 && errno != EEXIST)
                        return -errno;
                s = openat(src, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                d = openat(dst, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (s < 0 || d < 0)
                        return -errno;
                r = save_dir(sv, s, d, path);
                return r < 0 ? r : set_attrs(dst, name, &e);
        }
        if (S_ISLNK(st.st_mode)) {
                entry_from_stat(&e, 'l', &st);
                r = read_link_at(src, name, &e.target);
                if (r >= 0 && (read_link_at(dst, name, &old) < 0 || strcmp(old, e.target) != 0))
                        r = write_at(-1, dst, name, &e, NULL);
                if (r >= 0)
                        put_entry(sv->manifest, &e, path);
                free(e.target);
                return r;
        }
        if (!S_ISREG(st.st_mode))
                return 0;       /* no device nodes, fifos or sockets in a /boot worth restoring */
        entry_from_stat(&e, 'f', &st);
        r = save_file(src, dst, name, &e);
        if (r >= 0)
                put_entry(sv->manifest, &e, path);
        return r;
}

static int save_dir(struct save *sv, int src, int dst, const char *prefix) {
        char **names = NULL, **old = NULL;
        size_t n = 0, n_old = 0;
        int r;

        r = boot_list_dir(src, false, &names, &n);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n && r >= 0; i++) {
                _cleanup_free_ char *path = NULL;

                r = child_path(prefix, names[i], &path);
                if (r >= 0 && !is_entries_dir(path))
                        r = save_entry(sv, src, dst, names[i], path);
        }
        /* What the copy holds beyond the source goes, a cut-off save's temporary file too. */
        if (r >= 0)
                r = boot_list_dir(dst, true, &old, &n_old);
        for (size_t i = 0; i < n_old && r >= 0; i++)
                if (!bsearch(&old[i], names, n, sizeof(*names), cmp_names))
                        r = remove_at(dst, old[i]);
        boot_names_free(names, n);
        boot_names_free(old, n_old);
        return r;
}

/* Writes text to path through a synced temporary file renamed into place. */
int boot_write_text(const char *path, const char *text, size_t len) {
        _cleanup_free_ char *tmp = NULL;
        _cleanup_close_ int fd = -1;
        int r = 0;

        if (asprintf(&tmp, "%s.tmp", path) < 0)
                return -ENOMEM;
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        for (size_t done = 0; done < len;) {
                ssize_t w = write(fd, text + done, len - done);

                if (w < 0)
                        return -errno;
                done += w;
        }
        if (fsync(fd) < 0 || rename(tmp, path) < 0)
                r = -errno;
        return r;
}

int rb_boot_copy_save(const char *boot, const char *copy, const char *manifest,
                      char ret_digest[RB_BOOT_DIGEST_LEN + 1]) {
        _cleanup_close_ int src = -1, dst = -1;
        /* Declared first, freed last: f writes to it when closed. */
        _cleanup_free_ char *text = NULL;
        _cleanup_(fclosep) FILE *f = NULL;
        struct save sv = {};
        struct stat st, up;
        size_t len = 0;
        int r;

        src = open(boot, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (src < 0 || fstat(src, &st) < 0 || fstatat(src, "..", &up, 0) < 0)
                return -errno;
        if (mkdir(copy, 0700) < 0 && errno != EEXIST)
                return -errno;
        dst = open(copy, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dst < 0)
                return -errno;
        f = open_memstream(&text, &len);
        if (!f)
                return -ENOMEM;
        /* Whether /boot was its own filesystem: a revert into the other layout would lose it. */
        fprintf(f, MANIFEST_HEADER " %s\n", st.st_dev != up.st_dev ? "separate" : "directory");
        sv = (struct save) { .dev = st.st_dev, .manifest = f };
        r = save_dir(&sv, src, dst, "");
        if (r < 0)
                return r;
        if (fflush(f) != 0 || ferror(f))
                return -ENOMEM;
        if (syncfs(dst) < 0)
                return -errno;
        r = boot_write_text(manifest, text, len);
        if (r < 0)
                return r;
        return sha256_buffer(text, len, ret_digest);
}

/* ---- restoring ---- */

static bool path_is_safe(const char *path) {
        const char *c = path;

        if (!*path || *path == '/')
                return false;
        for (;;) {
                size_t n = strcspn(c, "/");

                if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.') ||
                    is_staged(c))
                        return false;
                if (!c[n])
                        return true;
                c += n + 1;
        }
}

static int parse_line(char *line, struct entry *e) {
        char *field[9], *save = NULL;
        long long sec;
        long nsec;
        unsigned long long size;
        int r;

        for (int i = 0; i < 9; i++) {
                field[i] = strtok_r(i == 0 ? line : NULL, " ", &save);
                if (!field[i])
                        return -EBADMSG;
        }
        if (strtok_r(NULL, " ", &save) || strlen(field[0]) != 1 || !strchr("dflm", field[0][0]) ||
            sscanf(field[1], "%o", &e->mode) != 1 || e->mode > 07777 || sscanf(field[2], "%u", &e->uid) != 1 ||
            sscanf(field[3], "%u", &e->gid) != 1 || sscanf(field[4], "%lld.%ld", &sec, &nsec) != 2 ||
            nsec < 0 || nsec > 999999999 || sscanf(field[5], "%llu", &size) != 1)
                return -EBADMSG;
        e->type = field[0][0];
        e->mtime = (struct timespec) { .tv_sec = sec, .tv_nsec = nsec };
        e->size = size;
        if (e->type == 'f') {
                if (!rb_boot_digest_is_valid(field[6]))
                        return -EBADMSG;
                memcpy(e->sha, field[6], sizeof(e->sha));
        }
        if (e->type == 'l' && (r = unescape(field[7], &e->target)) < 0)
                return r;
        r = unescape(field[8], &e->path);
        if (r < 0)
                return r;
        return path_is_safe(e->path) ? 0 : -EBADMSG;
}

static int read_all(const char *path, char **ret, size_t *ret_len) {
        _cleanup_(fclosep) FILE *f = fopen(path, "re");
        _cleanup_free_ char *text = NULL;
        size_t len = 0, size = 0, n;

        if (!f)
                return -errno;
        for (;;) {
                char *grown;

                if (len + 4096 + 1 > size) {
                        size = (len + 4096 + 1) * 2;
                        grown = realloc(text, size);
                        if (!grown)
                                return -ENOMEM;
                        text = grown;
                }
                n = fread(text + len, 1, size - len - 1, f);
                len += n;
                if (n == 0)
                        break;
        }
        if (ferror(f))
                return -EIO;
        text[len] = 0;
        *ret = TAKE_PTR(text);
        *ret_len = len;
        return 0;
}

/* Reads the manifest, which must hash to digest. */
static int manifest_read(const char *path, const char *digest, struct manifest *m) {
        _cleanup_free_ char *text = NULL;
        char sha[RB_BOOT_DIGEST_LEN + 1], *line, *save = NULL;
        size_t len = 0;
        int r;

        r = read_all(path, &text, &len);
        if (r < 0)
                return r;
        r = sha256_buffer(text, len, sha);
        if (r < 0)
                return r;
        if (!rb_boot_digest_is_valid(digest) || strcmp(sha, digest) != 0 || strlen(text) != len)
                return -EBADMSG;
        line = strtok_r(text, "\n", &save);
        if (!line || strncmp(line, MANIFEST_HEADER " ", strlen(MANIFEST_HEADER " ")) != 0)
                return -EBADMSG;
        line += strlen(MANIFEST_HEADER " ");
        if (strcmp(line, "separate") != 0 && strcmp(line, "directory") != 0)
                return -EBADMSG;
        m->separate = strcmp(line, "separate") == 0;
        while ((line = strtok_r(NULL, "\n", &save))) {
                struct entry *grown = realloc(m->entries, (m->n + 1) * sizeof(*m->entries));

                if (!grown)
                        return -ENOMEM;
                m->entries = grown;
                m->entries[m->n] = (struct entry) {};
                r = parse_line(line, &m->entries[m->n++]);
                if (r < 0)
                        return r;
        }
        return 0;
}

/*
 * The directory that holds path, opened in root through no symbolic link
 * and never above root, and the last component.
 */
static int open_parent(int root, const char *path, const char **ret_name) {
        struct open_how how = {
                .flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
                .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH,
        };
        const char *slash = strrchr(path, '/');
        _cleanup_free_ char *dir = NULL;
        int fd;

        *ret_name = slash ? slash + 1 : path;
        if (slash) {
                dir = strndup(path, slash - path);
                if (!dir)
                        return -ENOMEM;
        }
        fd = (int) syscall(SYS_openat2, root, dir ?: ".", &how, sizeof(how));
        return fd < 0 ? -errno : fd;
}

/* Whether root holds e as the manifest says, content included; a symlink on the way is a no. */
static int entry_matches(int root, const struct entry *e, bool *ret) {
        _cleanup_free_ char *target = NULL;
        _cleanup_close_ int parent = -1, fd = -1;
        char sha[RB_BOOT_DIGEST_LEN + 1];
        const char *name;
        struct stat st;
        int r;

        *ret = false;
        parent = open_parent(root, e->path, &name);
        if (parent == -ENOENT || parent == -ENOTDIR || parent == -ELOOP || parent == -EXDEV)
                return 0;
        if (parent < 0)
                return parent;
        if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        switch (e->type) {
        case 'd':
        case 'm':
                *ret = S_ISDIR(st.st_mode);
                return 0;
        case 'l':
                if (!S_ISLNK(st.st_mode) || read_link_at(parent, name, &target) < 0)
                        return 0;
                *ret = strcmp(target, e->target) == 0;
                return 0;
        }
        if (!S_ISREG(st.st_mode) || (uint64_t) st.st_size != e->size)
                return 0;
        fd = openat(parent, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        r = sha256_fd(fd, -1, sha);
        if (r < 0)
                return r;
        *ret = strcmp(sha, e->sha) == 0;
        return 0;
}

/*
 * Checks the whole copy against the manifest, finds what boot lacks, and
 * whether boot has the room and inodes for it.
 */
static int restore_plan(int copy, int boot, struct manifest *m, uint64_t *ret_bytes) {
        uint64_t bytes = 0, inodes = 0;
        struct statvfs sv;
        bool same;
        int r;

        for (size_t i = 0; i < m->n; i++) {
                struct entry *e = &m->entries[i];

                if (e->type != 'm') {
                        r = entry_matches(copy, e, &same);
                        if (r < 0)
                                return r;
                        if (!same)
                                return -EBADMSG;
                }
                r = entry_matches(boot, e, &same);
                if (r < 0)
                        return r;
                e->write = !same;
                if (e->write) {
                        bytes += e->size;
                        inodes++;
                }
        }
        if (fstatvfs(boot, &sv) < 0)
                return -errno;
        /* Each file is written beside the one it replaces: all of them may be there at once. */
        if (bytes + (inodes + 256) * sv.f_frsize > (uint64_t) sv.f_bavail * sv.f_frsize ||
            (sv.f_files > 0 && inodes + 16 > sv.f_favail))
                return -ENOSPC;
        *ret_bytes = bytes;
        return 0;
}

/*
 * Step 1: directories first, then each file and link that differs is
 * written beside its place under a temporary name, checked and synced.
 * Nothing of boot is replaced yet, only directories it lacks are made.
 */
static int restore_stage(int copy, int boot, struct manifest *m) {
        for (size_t i = 0; i < m->n; i++) {
                struct entry *e = &m->entries[i];
                _cleanup_close_ int parent = -1, in = -1;
                char sha[RB_BOOT_DIGEST_LEN + 1];
                const char *name;
                struct stat st;
                int r;

                if (!e->write)
                        continue;
                parent = open_parent(boot, e->path, &name);
                if (parent < 0)
                        return parent;
                if (e->type == 'd' || e->type == 'm') {
                        /* In the way of a directory: nothing the copy keeps can live there. */
                        if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) >= 0 && (r = remove_at(parent, name)) < 0)
                                return r;
                        if (mkdirat(parent, name, e->type == 'm' ? 0755 : 0700) < 0)
                                return -errno;
                        continue;
                }
                if (asprintf(&e->staged, TMP_PREFIX "%zu", i) < 0)
                        return -ENOMEM;
                if (e->type == 'f') {
                        in = openat(copy, e->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                        if (in < 0)
                                return -errno;
                }
                r = stage_at(in, parent, e->staged, e, sha);
                if (r < 0) {
                        free(e->staged);
                        e->staged = NULL;
                        return r;
                }
        }
        return 0;
}

static void restore_unstage(int boot, struct manifest *m) {
        for (size_t i = 0; i < m->n; i++) {
                _cleanup_close_ int parent = -1;
                const char *name;

                if (!m->entries[i].staged)
                        continue;
                parent = open_parent(boot, m->entries[i].path, &name);
                if (parent >= 0)
                        (void) unlinkat(parent, m->entries[i].staged, 0);
        }
}

static bool is_grub(const char *path) {
        return strncmp(path, "grub", 4) == 0 && (path[4] == 0 || path[4] == '/');
}

/*
 * Step 2: the staged entries are renamed into place, GRUB's last: cut off
 * before it, GRUB still starts the kernel it started before, whose files
 * are all still there; unchanged entries get their attributes.
 */
static int restore_commit(int boot, struct manifest *m) {
        for (int grub = 0; grub <= 1; grub++)
                for (size_t i = 0; i < m->n; i++) {
                        struct entry *e = &m->entries[i];
                        _cleanup_close_ int parent = -1;
                        const char *name;
                        struct stat st;
                        int r = 0;

                        if (is_grub(e->path) != grub || e->type == 'd' || e->type == 'm')
                                continue;
                        parent = open_parent(boot, e->path, &name);
                        if (parent < 0)
                                return parent;
                        if (!e->staged) {
                                r = set_attrs(parent, name, e);
                                if (r < 0)
                                        return r;
                                continue;
                        }
                        if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) >= 0 && S_ISDIR(st.st_mode))
                                r = remove_at(parent, name);
                        if (r < 0 || renameat(parent, e->staged, parent, name) < 0)
                                return r < 0 ? r : -errno;
                        free(e->staged);
                        e->staged = NULL;
                }
        return 0;
}

static int cmp_entry_path(const void *key, const void *e) {
        return strcmp(key, (*(const struct entry *const *) e)->path);
}

static int cmp_entries(const void *a, const void *b) {
        return strcmp((*(const struct entry *const *) a)->path, (*(const struct entry *const *) b)->path);
}

/* Step 3: what the manifest does not name goes (mount points and other filesystems stay). */
static int remove_extra(int dir, dev_t dev, const char *prefix, struct entry **index, size_t n) {
        char **names;
        size_t k;
        int r;

        r = boot_list_dir(dir, false, &names, &k);
        if (r < 0)
                return r;
        for (size_t i = 0; i < k && r >= 0; i++) {
                _cleanup_free_ char *path = NULL;
                struct entry **found;
                struct stat st;

                r = child_path(prefix, names[i], &path);
                if (r < 0)
                        break;
                if (is_entries_dir(path) || fstatat(dir, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                    st.st_dev != dev)
                        continue;
                found = bsearch(path, index, n, sizeof(*index), cmp_entry_path);
                if (!found)
                        r = remove_at(dir, names[i]);
                else if ((*found)->type == 'd' && S_ISDIR(st.st_mode)) {
                        _cleanup_close_ int sub = -1;

                        sub = openat(dir, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        r = sub < 0 ? -errno : remove_extra(sub, dev, path, index, n);
                }
        }
        boot_names_free(names, k);
        return r;
}

/*
 * Step 0: what a restore cut off between staging and renaming left in
 * boot goes first, and with it the room it takes from this one.
 */
static int remove_staged_leftovers(int dir, dev_t dev) {
        char **names;
        size_t n;
        int r;

        r = boot_list_dir(dir, true, &names, &n);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n && r >= 0; i++) {
                _cleanup_close_ int sub = -1;
                struct stat st;

                if (is_staged(names[i])) {
                        r = remove_at(dir, names[i]);
                        continue;
                }
                if (fstatat(dir, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode) || st.st_dev != dev)
                        continue;
                sub = openat(dir, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                r = sub < 0 ? -errno : remove_staged_leftovers(sub, dev);
        }
        boot_names_free(names, n);
        return r;
}

/* Step 4: directories' attributes, deepest first (their mtimes change with what they hold). */
static int restore_dirs(int boot, struct manifest *m) {
        for (size_t i = m->n; i > 0; i--) {
                const struct entry *e = &m->entries[i - 1];
                _cleanup_close_ int parent = -1;
                const char *name;
                int r;

                if (e->type != 'd')
                        continue;
                parent = open_parent(boot, e->path, &name);
                if (parent < 0)
                        return parent;
                r = set_attrs(parent, name, e);
                if (r < 0)
                        return r;
        }
        return 0;
}

int rb_boot_copy_restore(const char *copy, const char *manifest, const char *digest, const char *boot,
                         uint64_t *ret_bytes) {
        _cleanup_(manifest_done) struct manifest m = {};
        _cleanup_close_ int c = -1, b = -1;
        _cleanup_free_ struct entry **index = NULL;
        struct stat st, up;
        uint64_t bytes = 0;
        int r;

        r = manifest_read(manifest, digest, &m);
        if (r < 0)
                return r;
        c = open(copy, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (c < 0)
                return errno == ENOENT ? -EBADMSG : -errno;
        b = open(boot, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (b < 0 || fstat(b, &st) < 0 || fstatat(b, "..", &up, 0) < 0)
                return -errno;
        /* A /boot that is now its own filesystem and was not then (or the other way round): not this copy's. */
        if ((st.st_dev != up.st_dev) != m.separate)
                return -EXDEV;
        r = remove_staged_leftovers(b, st.st_dev);
        if (r < 0)
                return r;
        r = restore_plan(c, b, &m, &bytes);
        if (r < 0)
                return r;
        r = restore_stage(c, b, &m);
        if (r >= 0)
                r = restore_commit(b, &m);
        if (r < 0) {
                restore_unstage(b, &m);
                return r;
        }
        index = calloc(m.n ?: 1, sizeof(*index));
        if (!index)
                return -ENOMEM;
        for (size_t i = 0; i < m.n; i++)
                index[i] = &m.entries[i];
        qsort(index, m.n, sizeof(*index), cmp_entries);
        r = remove_extra(b, st.st_dev, "", index, m.n);
        if (r >= 0)
                r = restore_dirs(b, &m);
        if (r < 0)
                return r;
        if (syncfs(b) < 0)
                return -errno;
        if (ret_bytes)
                *ret_bytes = bytes;
        return 0;
}
