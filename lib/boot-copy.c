/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The copy of /boot that a snapshot of root carries, and putting it back:
 * see boot-copy.h and docs/boot.md.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "boot-copy.h"
#include "macro.h"

#define TMP_NAME ".rollback-boot.tmp"

struct entry {
        char type;              /* 'd', 'f' or 'l' */
        unsigned mode;          /* permission bits */
        unsigned uid, gid;
        struct timespec mtime;
        uint64_t size;
        char sha[RB_BOOT_DIGEST_LEN + 1];
        char *target;           /* of a symlink */
        char *path;             /* relative to the tree */
        bool write;             /* restore: differs in boot */
};

struct manifest {
        struct entry *entries;
        size_t n;
};

static void manifest_done(struct manifest *m) {
        for (size_t i = 0; i < m->n; i++) {
                free(m->entries[i].path);
                free(m->entries[i].target);
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

static void closedirp(DIR **d) {
        if (*d)
                closedir(*d);
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
        }
        EVP_DigestFinal_ex(c, md, NULL);
        to_hex(md, ret);
        return 0;
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
                if (s[1] != 'x' || sscanf(s + 2, "%2x", &v) != 1 || v == 0) {
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

static void names_free(char **names, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        free(names);
}

/* The names in dirfd, sorted, so that the same tree gives the same manifest. */
static int list_dir(int dirfd, char ***ret, size_t *ret_n) {
        _cleanup_(closedirp) DIR *d = NULL;
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
                    strcmp(de->d_name, TMP_NAME) == 0)
                        continue;
                grown = realloc(names, (n + 1) * sizeof(*names));
                if (!grown) {
                        names_free(names, n);
                        return -ENOMEM;
                }
                names = grown;
                names[n] = strdup(de->d_name);
                if (!names[n]) {
                        names_free(names, n);
                        return -ENOMEM;
                }
                n++;
        }
        if (errno) {
                names_free(names, n);
                return -errno;
        }
        if (n > 0)
                qsort(names, n, sizeof(*names), cmp_names);
        *ret = names;
        *ret_n = n;
        return 0;
}

static int remove_at(int dirfd, const char *name);

static int remove_tree_at(int dirfd, const char *name) {
        _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        char **names;
        size_t n;
        int r;

        if (fd < 0)
                return -errno;
        r = list_dir(fd, &names, &n);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n && r >= 0; i++)
                r = remove_at(fd, names[i]);
        names_free(names, n);
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
 * Writes what src holds to name in dirfd, through a temporary file renamed
 * into place once synced, so that name is the old file or the new one.
 */
static int write_file_at(int src, int dirfd, const char *name, const struct entry *e, char sha[RB_BOOT_DIGEST_LEN + 1]) {
        _cleanup_close_ int out = -1;
        int r;

        (void) unlinkat(dirfd, TMP_NAME, 0);
        out = openat(dirfd, TMP_NAME, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (out < 0)
                return -errno;
        r = sha256_fd(src, out, sha);
        if (r >= 0 && fsync(out) < 0)
                r = -errno;
        if (r >= 0)
                r = set_attrs(dirfd, TMP_NAME, e);
        if (r >= 0 && renameat(dirfd, TMP_NAME, dirfd, name) < 0)
                r = -errno;
        if (r < 0)
                (void) unlinkat(dirfd, TMP_NAME, 0);
        return r;
}

static int symlink_at(const char *target, int dirfd, const char *name, const struct entry *e) {
        int r = 0;

        (void) unlinkat(dirfd, TMP_NAME, 0);
        if (symlinkat(target, dirfd, TMP_NAME) < 0)
                return -errno;
        r = set_attrs(dirfd, TMP_NAME, e);
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

/* A file of the copy with the size and mtime of the source is taken as unchanged: only hashed. */
static int save_file(int src, int dst, const char *name, struct entry *e) {
        _cleanup_close_ int in = -1, old = -1;
        struct stat st;

        if (fstatat(dst, name, &st, AT_SYMLINK_NOFOLLOW) >= 0 && S_ISREG(st.st_mode) &&
            (uint64_t) st.st_size == e->size && st.st_mtim.tv_sec == e->mtime.tv_sec &&
            st.st_mtim.tv_nsec == e->mtime.tv_nsec) {
                old = openat(dst, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                if (old >= 0)
                        return sha256_fd(old, -1, e->sha);
        }
        in = openat(src, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (in < 0)
                return -errno;
        if (fstatat(dst, name, &st, AT_SYMLINK_NOFOLLOW) >= 0 && S_ISDIR(st.st_mode))
                (void) remove_at(dst, name);
        return write_file_at(in, dst, name, e, e->sha);
}

static int save_entry(struct save *sv, int src, int dst, const char *name, const char *path) {
        _cleanup_free_ char *old = NULL;
        struct entry e = {};
        struct stat st;
        int r;

        if (fstatat(src, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        if (st.st_dev != sv->dev)
                return 0;
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
                        r = symlink_at(e.target, dst, name, &e);
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

        r = list_dir(src, &names, &n);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n && r >= 0; i++) {
                _cleanup_free_ char *path = NULL;

                if (asprintf(&path, "%s%s%s", prefix, *prefix ? "/" : "", names[i]) < 0)
                        r = -ENOMEM;
                else
                        r = save_entry(sv, src, dst, names[i], path);
        }
        /* What the copy holds beyond the source goes. */
        if (r >= 0)
                r = list_dir(dst, &old, &n_old);
        for (size_t i = 0; i < n_old && r >= 0; i++)
                if (!bsearch(&old[i], names, n, sizeof(*names), cmp_names))
                        r = remove_at(dst, old[i]);
        names_free(names, n);
        names_free(old, n_old);
        return r;
}

/* Writes text to path through a synced temporary file renamed into place. */
static int write_text(const char *path, const char *text, size_t len) {
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
        struct stat st;
        size_t len = 0;
        int r;

        src = open(boot, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (src < 0 || fstat(src, &st) < 0)
                return -errno;
        if (mkdir(copy, 0700) < 0 && errno != EEXIST)
                return -errno;
        dst = open(copy, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dst < 0)
                return -errno;
        f = open_memstream(&text, &len);
        if (!f)
                return -ENOMEM;
        sv = (struct save) { .dev = st.st_dev, .manifest = f };
        r = save_dir(&sv, src, dst, "");
        if (r < 0)
                return r;
        if (fflush(f) != 0 || ferror(f))
                return -ENOMEM;
        if (syncfs(dst) < 0)
                return -errno;
        r = write_text(manifest, text, len);
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

                if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
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
        if (strtok_r(NULL, " ", &save) || strlen(field[0]) != 1 || !strchr("dfl", field[0][0]) ||
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
        for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
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

/* The directory that holds path, opened in root, and the last component. */
static int open_parent(int root, const char *path, const char **ret_name) {
        const char *slash = strrchr(path, '/');
        _cleanup_free_ char *dir = NULL;
        int fd;

        *ret_name = slash ? slash + 1 : path;
        if (slash) {
                dir = strndup(path, slash - path);
                if (!dir)
                        return -ENOMEM;
        }
        fd = openat(root, dir ?: ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

/* Whether root holds e as the manifest says, content included. */
static int entry_matches(int root, const struct entry *e, bool *ret) {
        _cleanup_free_ char *target = NULL;
        _cleanup_close_ int fd = -1;
        char sha[RB_BOOT_DIGEST_LEN + 1];
        struct stat st;
        int r;

        *ret = false;
        if (fstatat(root, e->path, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
        switch (e->type) {
        case 'd':
                *ret = S_ISDIR(st.st_mode);
                return 0;
        case 'l':
                if (!S_ISLNK(st.st_mode) || read_link_at(root, e->path, &target) < 0)
                        return 0;
                *ret = strcmp(target, e->target) == 0;
                return 0;
        }
        if (!S_ISREG(st.st_mode) || (uint64_t) st.st_size != e->size)
                return 0;
        fd = openat(root, e->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        r = sha256_fd(fd, -1, sha);
        if (r < 0)
                return r;
        *ret = strcmp(sha, e->sha) == 0;
        return 0;
}

/* Checks the whole copy against the manifest, and finds what boot lacks: bytes to write. */
static int restore_plan(int copy, int boot, struct manifest *m, uint64_t *ret_bytes, uint64_t *ret_files) {
        uint64_t bytes = 0, files = 0;
        bool same;
        int r;

        for (size_t i = 0; i < m->n; i++) {
                struct entry *e = &m->entries[i];

                r = entry_matches(copy, e, &same);
                if (r < 0)
                        return r == -ELOOP ? -EBADMSG : r;
                if (!same)
                        return -EBADMSG;
                r = entry_matches(boot, e, &same);
                if (r < 0)
                        return r;
                e->write = !same;
                if (e->write && e->type == 'f') {
                        bytes += e->size;
                        files++;
                }
        }
        *ret_bytes = bytes;
        *ret_files = files;
        return 0;
}

static int restore_attrs(int boot, const struct entry *e) {
        _cleanup_close_ int parent = -1;
        const char *name;

        parent = open_parent(boot, e->path, &name);
        if (parent < 0)
                return parent;
        return set_attrs(parent, name, e);
}

static int restore_entry(int copy, int boot, const struct entry *e) {
        _cleanup_close_ int parent = -1, in = -1;
        char sha[RB_BOOT_DIGEST_LEN + 1];
        const char *name;
        struct stat st;
        int r;

        parent = open_parent(boot, e->path, &name);
        if (parent < 0)
                return parent;
        if (!e->write)
                return e->type == 'd' ? 0 : set_attrs(parent, name, e);   /* directories: last */
        if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) >= 0 && (S_ISDIR(st.st_mode) || e->type == 'd')) {
                r = remove_at(parent, name);
                if (r < 0)
                        return r;
        }
        switch (e->type) {
        case 'd':
                return mkdirat(parent, name, 0700) < 0 ? -errno : 0;
        case 'l':
                return symlink_at(e->target, parent, name, e);
        }
        in = openat(copy, e->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (in < 0)
                return -errno;
        r = write_file_at(in, parent, name, e, sha);
        if (r < 0)
                return r;
        /* Checked before, but read again: it must not have changed since. */
        return strcmp(sha, e->sha) == 0 ? 0 : -EBADMSG;
}

static int cmp_entry_path(const void *key, const void *e) {
        return strcmp(key, (*(const struct entry *const *) e)->path);
}

static int cmp_entries(const void *a, const void *b) {
        return strcmp((*(const struct entry *const *) a)->path, (*(const struct entry *const *) b)->path);
}

/* Removes from boot what the manifest does not name (other filesystems under it stay). */
static int remove_extra(int dir, dev_t dev, const char *prefix, struct entry **index, size_t n) {
        char **names;
        size_t k;
        int r;

        r = list_dir(dir, &names, &k);
        if (r < 0)
                return r;
        for (size_t i = 0; i < k && r >= 0; i++) {
                _cleanup_free_ char *path = NULL;
                struct entry **found;
                struct stat st;

                if (asprintf(&path, "%s%s%s", prefix, *prefix ? "/" : "", names[i]) < 0) {
                        r = -ENOMEM;
                        break;
                }
                if (fstatat(dir, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_dev != dev)
                        continue;
                found = bsearch(path, index, n, sizeof(*index), cmp_entry_path);
                if (!found)
                        r = remove_at(dir, names[i]);
                else if ((*found)->type == 'd' && S_ISDIR(st.st_mode)) {
                        _cleanup_close_ int sub = openat(dir, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

                        r = sub < 0 ? -errno : remove_extra(sub, dev, path, index, n);
                }
        }
        names_free(names, k);
        return r;
}

int rb_boot_copy_restore(const char *copy, const char *manifest, const char *digest, const char *boot,
                         uint64_t *ret_bytes) {
        _cleanup_(manifest_done) struct manifest m = {};
        _cleanup_close_ int c = -1, b = -1;
        _cleanup_free_ struct entry **index = NULL;
        uint64_t bytes, files;
        struct statvfs sv;
        struct stat st;
        int r;

        r = manifest_read(manifest, digest, &m);
        if (r < 0)
                return r;
        c = open(copy, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (c < 0)
                return errno == ENOENT ? -EBADMSG : -errno;
        b = open(boot, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (b < 0 || fstat(b, &st) < 0 || fstatvfs(b, &sv) < 0)
                return -errno;
        r = restore_plan(c, b, &m, &bytes, &files);
        if (r < 0)
                return r;
        /* A file is written beside the one it replaces: all of them may be there at once. */
        if (bytes + (files + 256) * sv.f_frsize > (uint64_t) sv.f_bavail * sv.f_frsize)
                return -ENOSPC;

        for (size_t i = 0; i < m.n; i++) {
                r = restore_entry(c, b, &m.entries[i]);
                if (r < 0)
                        return r;
        }
        index = calloc(m.n ?: 1, sizeof(*index));
        if (!index)
                return -ENOMEM;
        for (size_t i = 0; i < m.n; i++)
                index[i] = &m.entries[i];
        qsort(index, m.n, sizeof(*index), cmp_entries);
        r = remove_extra(b, st.st_dev, "", index, m.n);
        if (r < 0)
                return r;
        /* Directories last, deepest first: their mtimes change with what they hold. */
        for (size_t i = m.n; i > 0; i--)
                if (m.entries[i - 1].type == 'd') {
                        r = restore_attrs(b, &m.entries[i - 1]);
                        if (r < 0)
                                return r;
                }
        if (syncfs(b) < 0)
                return -errno;
        if (ret_bytes)
                *ret_bytes = bytes;
        return 0;
}
