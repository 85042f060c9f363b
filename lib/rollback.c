/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <blkid/blkid.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>

#include "dm.h"
#include "crash-point.h"
#include "rollback.h"
#include "strv.h"
#include "tables.h"

static const char *const merge_state_table[_MERGE_STATE_MAX] = {
        [MERGE_NONE] = "none",
        [MERGE_RUNNING] = "running",
        [MERGE_FAILED] = "failed",
        [MERGE_DONE] = "done",
        [MERGE_PENDING] = "pending",
};

DEFINE_STRING_TABLE(merge_state, enum merge_state, _MERGE_STATE_MAX);

int rb_lock(int *ret_fd) {
        int fd;

        fd = open(RB_LOCK_PATH, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        if (flock(fd, LOCK_EX) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        *ret_fd = fd;
        return 0;
}

static bool is_our_device(const char *kname) {
        char path[PATH_MAX], uuid[160] = "";
        FILE *f;

        snprintf(path, sizeof(path), "/sys/class/block/%s/dm/uuid", kname);
        f = fopen(path, "re");
        if (!f)
                return false;
        if (!fgets(uuid, sizeof(uuid), f))
                uuid[0] = 0;
        fclose(f);
        return strncmp(uuid, RB_DM_UUID_PREFIX, strlen(RB_DM_UUID_PREFIX)) == 0;
}

int rb_pool_recorded(uint8_t ret_uuid[16]) {
        _cleanup_free_ char *line = NULL;
        size_t n = 0;
        FILE *f;
        int r;

        f = fopen(RB_POOL_ID_PATH, "re");
        if (!f)
                return -errno;
        r = getline(&line, &n, f) < 0 ? -EINVAL : 0;
        fclose(f);
        if (r < 0)
                return r;
        line[strcspn(line, "\n")] = 0;
        return pool_uuid_from_string(line, ret_uuid);
}

int rb_pool_record(const uint8_t uuid[16]) {
        char text[POOL_UUID_STRING_MAX], tmp[] = RB_POOL_ID_PATH ".XXXXXX";
        _cleanup_close_ int fd = -1;
        int r;

        if (mkdir(RB_POOL_ID_DIR, 0755) < 0 && errno != EEXIST)
                return -errno;
        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
                return -errno;
        pool_uuid_to_string(uuid, text);
        r = dprintf(fd, "%s\n", text) < 0 || fchmod(fd, 0644) < 0 || fsync(fd) < 0 ? -errno : 0;
        if (r == 0 && rename(tmp, RB_POOL_ID_PATH) < 0)
                r = -errno;
        if (r < 0)
                (void) unlink(tmp);
        return r;
}

int rb_device_signature(int fd, char **ret_type) {
        const char *type = NULL;
        blkid_probe pr;
        int r;

        pr = blkid_new_probe();
        if (!pr)
                return -ENOMEM;
        r = blkid_probe_set_device(pr, fd, 0, 0);
        if (r < 0) {
                blkid_free_probe(pr);
                return -EIO;
        }
        blkid_probe_enable_superblocks(pr, true);
        blkid_probe_set_superblocks_flags(pr, BLKID_SUBLKS_TYPE);
        blkid_probe_enable_partitions(pr, true);
        blkid_probe_set_partitions_flags(pr, BLKID_PARTS_MAGIC);
        r = blkid_do_safeprobe(pr);
        if (r == 0 && blkid_probe_lookup_value(pr, "TYPE", &type, NULL) < 0 &&
            blkid_probe_lookup_value(pr, "PTTYPE", &type, NULL) < 0)
                type = "unknown";
        /* -2: several signatures at once, which is a signature too. */
        if (r == -2)
                type = "ambivalent";
        if (type) {
                *ret_type = strdup(type);
                blkid_free_probe(pr);
                return *ret_type ? 1 : -ENOMEM;
        }
        blkid_free_probe(pr);
        return r < 0 ? -EIO : 0;
}

/* A suspended dm device blocks every read until it is resumed: reading it would hang us. */
static bool is_suspended_dm(const char *kname) {
        char path[PATH_MAX];
        int c = '0';
        FILE *f;

        snprintf(path, sizeof(path), "/sys/class/block/%s/dm/suspended", kname);
        f = fopen(path, "re");
        if (!f)
                return false;
        c = fgetc(f);
        fclose(f);
        return c == '1';
}

/* A block device that may hold a pool: not a loop, CD, RAM disk, one of our own or a suspended one. */
static bool pool_candidate(const char *kname) {
        return kname[0] != '.' && strncmp(kname, "loop", 4) != 0 && strncmp(kname, "sr", 2) != 0 &&
               strncmp(kname, "ram", 3) != 0 && !is_our_device(kname) && !is_suspended_dm(kname);
}

int rb_pool_find(const uint8_t *want, char **ret_path, unsigned *ret_foreign) {
        _cleanup_free_ char *found = NULL;
        uint8_t recorded[16];
        unsigned matches = 0, foreign = 0;
        struct dirent *de;
        DIR *d;

        if (!want && rb_pool_recorded(recorded) >= 0)
                want = recorded;
        d = opendir("/sys/class/block");
        if (!d)
                return -errno;
        while ((de = readdir(d))) {
                char path[PATH_MAX];
                uint8_t uuid[16];
                int fd, r;

                if (!pool_candidate(de->d_name))
                        continue;
                snprintf(path, sizeof(path), "/dev/%s", de->d_name);
                fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
                if (fd < 0)
                        continue;
                r = pool_probe(fd, uuid);
                close(fd);
                if (r == -ENOMEDIUM)
                        continue;
                if (want && (r < 0 || memcmp(uuid, want, 16) != 0)) {
                        foreign++;
                        continue;
                }
                matches++;
                free(found);
                found = strdup(path);
                if (!found) {
                        closedir(d);
                        return -ENOMEM;
                }
        }
        closedir(d);
        if (ret_foreign)
                *ret_foreign = foreign;
        if (matches == 0)
                return want ? -ENXIO : -ENOMEDIUM;
        /* Without an identity any of them could be the foreign one; with one, a clone. */
        if (matches > 1)
                return -ENOTUNIQ;
        *ret_path = TAKE_PTR(found);
        return 0;
}

int rb_pool_open(const char *path, struct pool **ret) {
        _cleanup_free_ char *found = NULL;
        uint8_t uuid[16];
        unsigned foreign = 0;
        struct pool *p;
        int r;

        if (!path || strncmp(path, "UUID=", 5) == 0) {
                if (path && pool_uuid_from_string(path + 5, uuid) < 0)
                        return -EINVAL;
                r = rb_pool_find(path ? uuid : NULL, &found, &foreign);
                if (r < 0)
                        return r;
                path = found;
        }
        r = pool_open(path, true, &p);
        if (r < 0)
                return r;
        p->foreign = foreign;
        *ret = p;
        return 0;
}

int rb_pool_reload(struct pool *p) {
        struct pool *fresh;
        int r;

        r = pool_load(p->fd, &fresh);
        if (r < 0)
                return r;
        pool_meta_done(&p->meta);
        p->meta = fresh->meta;
        p->geo = fresh->geo;
        p->seq = fresh->seq;
        p->slot = fresh->slot;
        fresh->meta = (struct pool_meta) {};
        pool_free(fresh);
        return 0;
}

/* The device of the filesystem mounted at /, from the last matching mountinfo line. */
static int root_devnum(dev_t *ret) {
        FILE *f;
        char line[4096];
        unsigned ma, mi;
        bool found = false;

        f = fopen("/proc/self/mountinfo", "re");
        if (!f)
                return -errno;
        while (fgets(line, sizeof(line), f)) {
                char root[PATH_MAX], mnt[PATH_MAX];

                if (sscanf(line, "%*u %*u %u:%u %4095s %4095s", &ma, &mi, root, mnt) == 4 &&
                    strcmp(mnt, "/") == 0) {
                        *ret = makedev(ma, mi);
                        found = true;
                }
        }
        fclose(f);
        return found ? 0 : -ENOENT;
}

int rb_volume_resolve(const char *arg, char **ret_name) {
        _cleanup_free_ char *name = NULL;
        struct rbdm_info info;
        dev_t devnum;
        int r;

        if (!arg || arg[0] == '/') {
                if (arg) {
                        struct stat st;

                        if (stat(arg, &st) < 0)
                                return -errno;
                        if (!S_ISBLK(st.st_mode))
                                return -ENOTBLK;
                        devnum = st.st_rdev;
                } else {
                        r = root_devnum(&devnum);
                        if (r < 0)
                                return r;
                }
                r = rbdm_name_from_devnum(devnum, &name);
                if (r < 0) {
                        /* Not a dm device: say which one it is. */
                        _cleanup_free_ char *dev = blkid_devno_to_devname(devnum);

                        return r == -ENODEV || dev ? -ENOTBLK : r;
                }
        } else {
                name = strdup(arg);
                if (!name)
                        return -ENOMEM;
        }
        r = rbdm_info(name, &info);
        if (r < 0)
                return r;
        if (!info.exists || !info.live_table)
                return -ENODEV;
        if (strncmp(info.uuid, RB_DM_UUID_PREFIX, strlen(RB_DM_UUID_PREFIX)) == 0)
                return -EISDIR; /* one of our own devices: not a volume */
        *ret_name = TAKE_PTR(name);
        return 0;
}

static void load_module(const char *module) {
        pid_t pid;

        pid = fork();
        if (pid < 0)
                return;
        if (pid == 0) {
                int null = open("/dev/null", O_RDWR);
                if (null >= 0) {
                        dup2(null, STDOUT_FILENO);
                        dup2(null, STDERR_FILENO);
                }
                execlp("modprobe", "modprobe", "-q", module, (char *) NULL);
                _exit(127);
        }
        (void) waitpid(pid, NULL, 0);
}

static int backend_available(enum backend b, bool need_merge) {
        const struct backend_targets *t = backend_targets(b);
        int r;

        r = rbdm_has_target(t->origin);
        if (r == 0) {
                load_module(t->module);
                r = rbdm_has_target(t->origin);
        }
        if (r <= 0)
                return r;
        r = rbdm_has_target(t->snapshot);
        if (r <= 0 || !need_merge)
                return r;
        return rbdm_has_target(t->merge);
}

int rb_backend_resolve(enum backend want, bool need_merge, enum backend *ret) {
        int r;

        if (want == BACKEND_AUTO) {
                r = backend_available(BACKEND_ROLLBACK, need_merge);
                if (r > 0) {
                        *ret = BACKEND_ROLLBACK;
                        return 0;
                }
                want = BACKEND_UPSTREAM;
        }
        r = backend_available(want, need_merge);
        if (r == 0 && need_merge && want == BACKEND_ROLLBACK) {
                /* The COW format is the same: a merge can always be done by upstream's target. */
                want = BACKEND_UPSTREAM;
                r = backend_available(want, need_merge);
        }
        if (r < 0)
                return r;
        if (r == 0)
                return -EOPNOTSUPP;
        *ret = want;
        return 0;
}

/* What the volume's dm device is now. */
struct stack {
        char *table;
        enum backend backend;   /* of its origin or merge table; invalid when plain */
        bool merging;
        char *real_name;
        char *real_table;       /* the volume's own table, wherever it is now */
        char real_devt[32];
        uint64_t sectors;
};

static void stack_done(struct stack *st) {
        free(st->table);
        free(st->real_name);
        free(st->real_table);
}

static int stack_read(const char *volume, struct stack *st) {
        char target[32];
        int r;

        *st = (struct stack) { .backend = _BACKEND_INVALID };
        r = rbdm_table(volume, false, &st->table);
        if (r < 0)
                return r;
        r = rbdm_table_target(st->table, target);
        if (r < 0)
                return r;
        st->backend = backend_of_target(target, &st->merging);
        r = name_real(volume, &st->real_name);
        if (r < 0)
                return r;
        if (st->backend < 0) {
                st->real_table = strdup(st->table);
                if (!st->real_table)
                        return -ENOMEM;
        } else {
                r = rbdm_table(st->real_name, false, &st->real_table);
                if (r < 0)
                        return r;
                r = rbdm_devt(st->real_name, st->real_devt);
                if (r < 0)
                        return r;
        }
        st->sectors = rbdm_table_sectors(st->real_table);
        return st->sectors > 0 ? 0 : -EINVAL;
}

static int zero_cow_header(struct pool *p, const struct snapshot *s) {
        size_t len = 2 * 512 * (size_t) s->chunk_sectors;
        _cleanup_free_ void *zero = calloc(1, len);
        uint64_t off = (p->geo.data_offset + s->extents[0].start * p->geo.extent_sectors) * 512;

        if (!zero)
                return -ENOMEM;
        /* A zeroed header makes the kernel start a new store, never adopt an old one. */
        if (pwrite(p->fd, zero, len, off) != (ssize_t) len)
                return errno > 0 ? -errno : -EIO;
        if (fdatasync(p->fd) < 0)
                return -errno;
        return 0;
}

static int make_snapshot_name(struct pool *p, char **ret) {
        char buf[64];
        time_t t = time(NULL);
        struct tm tm;

        localtime_r(&t, &tm);
        strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
        for (int i = 0; i < 100; i++) {
                char name[80];

                if (i == 0)
                        snprintf(name, sizeof(name), "%s", buf);
                else
                        snprintf(name, sizeof(name), "%s-%d", buf, i);
                if (!pool_find_snapshot(p, name)) {
                        *ret = strdup(name);
                        return *ret ? 0 : -ENOMEM;
                }
        }
        return -EEXIST;
}

static bool name_is_reserved(const char *name) {
        size_t n = strlen(name);

        return (n >= 5 && strcmp(name + n - 5, "-real") == 0) || (n >= 4 && strcmp(name + n - 4, "-cow") == 0);
}

/* Creates (inactive or live) one of our devices with a table. */
static int device_create(const char *name, const char *uuid, const char *table, bool resume) {
        int r;

        r = rbdm_create(name, uuid);
        if (r < 0)
                return r;
        r = rbdm_load(name, table);
        if (r >= 0 && resume)
                r = rbdm_resume(name);
        if (r < 0)
                (void) rbdm_remove(name);
        return r;
}

static int cow_device_create(struct pool *p, const struct snapshot *s, bool *created) {
        _cleanup_free_ char *name = NULL, *uuid = NULL, *table = NULL;
        struct rbdm_info info;
        int r;

        *created = false;
        if ((r = name_cow(s, &name)) < 0 || (r = uuid_cow(s, &uuid)) < 0 ||
            (r = table_cow(&p->geo, p->devnum, s, &table)) < 0)
                return r;
        r = rbdm_info(name, &info);
        if (r < 0)
                return r;
        if (info.exists)
                return 0;
        r = device_create(name, uuid, table, true);
        if (r < 0)
                return r;
        *created = true;
        return 0;
}

static int snapshot_table(const struct stack *st, enum backend b, const struct snapshot *s, bool merge,
                          char **ret) {
        _cleanup_free_ char *cow = NULL;
        char cow_devt[32];
        int r;

        r = name_cow(s, &cow);
        if (r < 0)
                return r;
        r = rbdm_devt(cow, cow_devt);
        if (r < 0)
                return r;
        return (merge ? table_merge : table_snapshot)(b, st->sectors, st->real_devt, cow_devt,
                                                      s->chunk_sectors, ret);
}

static void remove_named(int (*namer)(const struct snapshot *, char **), const struct snapshot *s) {
        _cleanup_free_ char *name = NULL;
        struct rbdm_info info;

        if (namer(s, &name) < 0 || rbdm_info(name, &info) < 0 || !info.exists)
                return;
        (void) rbdm_remove(name);
}

/* A device to resume or remove while the volume above it is suspended, udev waited for later. */
struct deferred {
        const char *name;
        uint32_t *cookie;
};

static int resume_deferred_step(void *userdata) {
        struct deferred *d = userdata;

        return rbdm_resume_deferred(d->name, d->cookie);
}

static int remove_deferred_step(void *userdata) {
        struct deferred *d = userdata;

        return rbdm_remove_deferred(d->name, d->cookie);
}

/* With suspend, the volume is suspended meanwhile: no origin write is half-way through the snapshot. */
static int remove_snapshot_device(const char *volume, bool suspend, const char *snap_name) {
        uint32_t cookie = 0;
        int r;

        if (suspend)
                r = rbdm_swap(volume, &(const struct rbdm_swap) {
                        .step = remove_deferred_step,
                        .userdata = &(struct deferred) { snap_name, &cookie },
                        .cookie = &cookie,
                });
        else
                r = rbdm_remove_deferred(snap_name, &cookie);
        (void) rbdm_udev_wait(cookie);
        return r;
}

int rb_snapshot_create(struct pool *p, const char *volume, const struct rb_create *c, char **ret_name) {
        _cleanup_free_ char *name = NULL, *snap_name = NULL, *snap_uuid = NULL, *origin = NULL,
                            *snap_table = NULL, *real_uuid = NULL;
        _cleanup_(stack_done) struct stack st = {};
        struct rbdm_info info;
        struct snapshot *s;
        struct volume *v;
        enum backend b;
        bool armed, volume_added = false, real_created = false, cow_created = false, snap_created = false;
        uint32_t cookie = 0;
        uint64_t size, extents;
        int r;

        if (p->devnum == 0)
                return -ENOTBLK;
        if (c->name) {
                if (!snapshot_name_is_valid(c->name) || name_is_reserved(c->name))
                        return -EINVAL;
                if (pool_find_snapshot(p, c->name))
                        return -EEXIST;
                name = strdup(c->name);
                if (!name)
                        return -ENOMEM;
        } else {
                r = make_snapshot_name(p, &name);
                if (r < 0)
                        return r;
        }

        /* The pool refuses a document naming a volume it could not name itself. */
        if (!dm_name_is_valid(volume))
                return -EINVAL;
        r = rbdm_info(volume, &info);
        if (r < 0)
                return r;
        if (!info.exists)
                return -ENODEV;
        r = stack_read(volume, &st);
        if (r < 0)
                return r;
        if (st.merging)
                return -EINPROGRESS;
        armed = st.backend >= 0;
        if (armed)
                b = st.backend;
        else {
                r = rb_backend_resolve(p->meta.settings.backend, false, &b);
                if (r < 0)
                        return r;
        }

        v = pool_find_volume(p, volume);
        if (!v) {
                v = pool_add_volume(p, volume, info.uuid[0] ? info.uuid : NULL, st.real_table);
                if (!v)
                        return -ENOMEM;
                volume_added = true;
        } else if (!armed) {
                free(v->table);
                v->table = strdup(st.real_table);
                if (!v->table)
                        return -ENOMEM;
        }

        size = c->size ? c->size : st.sectors * 512 / 100 * p->meta.settings.snapshot_percent;
        extents = (size + p->geo.extent_sectors * 512 - 1) / (p->geo.extent_sectors * 512);
        if (extents == 0)
                extents = 1;

        s = pool_add_snapshot(p);
        if (!s)
                return -ENOMEM;
        s->name = TAKE_PTR(name);
        s->volume = strdup(volume);
        s->description = c->description ? strdup(c->description) : NULL;
        s->created_usec = now_usec(CLOCK_REALTIME);
        s->chunk_sectors = p->meta.settings.chunk_sectors;
        s->state = SNAPSHOT_CREATING;
        s->upgrade = c->upgrade;
        if (!s->volume || (c->description && !s->description))
                goto fail_nomem;
        r = snapshot_id_new(&s->id);
        if (r < 0)
                goto fail;
        r = pool_allocate_extents(p, extents, &s->extents, &s->n_extents);
        if (r < 0)
                goto fail;
        r = zero_cow_header(p, s);
        if (r < 0)
                goto fail;
        /* Owns its extents before it is live: a crash now leaves no COW on free extents. */
        s->state = SNAPSHOT_CREATING;
        r = pool_commit(p);
        if (r < 0)
                goto fail;
        rb_crash_point("create-recorded");

        if (!armed) {
                r = uuid_real(v, &real_uuid);
                if (r < 0)
                        goto fail;
                r = device_create(st.real_name, real_uuid, st.real_table, true);
                if (r < 0)
                        goto fail;
                real_created = true;
                r = rbdm_devt(st.real_name, st.real_devt);
                if (r < 0)
                        goto undo;
        }
        r = cow_device_create(p, s, &cow_created);
        if (r < 0)
                goto undo;
        if ((r = name_snapshot(s, &snap_name)) < 0 || (r = uuid_snapshot(s, &snap_uuid)) < 0 ||
            (r = snapshot_table(&st, b, s, false, &snap_table)) < 0)
                goto undo;
        r = device_create(snap_name, snap_uuid, snap_table, false);
        if (r < 0)
                goto undo;
        snap_created = true;
        if (!armed) {
                r = table_origin(b, st.sectors, st.real_devt, &origin);
                if (r < 0)
                        goto undo;
        }

        /* The volume is frozen while the snapshot starts: its first state is a clean one. */
        r = rbdm_swap(volume, &(const struct rbdm_swap) {
                .table = origin,
                .step = resume_deferred_step,
                .userdata = &(struct deferred) { snap_name, &cookie },
                .cookie = &cookie,
        });
        (void) rbdm_udev_wait(cookie);
        if (r < 0)
                goto undo;
        rb_crash_point("create-live");

        s->state = SNAPSHOT_ACTIVE;
        r = pool_commit(p);
        if (r < 0)
                goto undo_live;
        if (ret_name) {
                *ret_name = strdup(s->name);
                if (!*ret_name)
                        return -ENOMEM;
        }
        return 0;

undo_live:
        /* Live, but not recorded: take it all down again. */
        if (!armed)
                (void) rbdm_replace(volume, st.real_table);
        (void) remove_snapshot_device(volume, armed, snap_name);
        snap_created = false;
undo:
        if (snap_created)
                (void) rbdm_remove(snap_name);
        if (cow_created)
                remove_named(name_cow, s);
        if (real_created)
                (void) rbdm_remove(st.real_name);
        /* Recorded as creating: forget it again (if this fails too, the next command marks it invalid). */
        pool_remove_snapshot(p, s);
        if (volume_added)
                pool_remove_volume(p, pool_find_volume(p, volume));
        if (pool_commit(p) < 0)
                goto fail;
        return r;
fail_nomem:
        r = -ENOMEM;
fail:
        (void) rb_pool_reload(p);
        return r;
}

/* Puts the volume back on its own table and removes the -real device. */
static int disarm(const char *volume, const struct stack *st) {
        int r;

        r = rbdm_replace(volume, st->real_table);
        if (r < 0)
                return r;
        return rbdm_remove(st->real_name);
}

int rb_snapshot_delete(struct pool *p, const char *name) {
        _cleanup_free_ char *snap_name = NULL, *volume = NULL;
        _cleanup_(stack_done) struct stack st = {};
        struct rbdm_info info, vinfo;
        struct snapshot *s;
        struct volume *v;
        bool last;
        int r;

        s = pool_find_snapshot(p, name);
        if (!s)
                return -ENOENT;
        if (s->state == SNAPSHOT_MERGING)
                return -EINPROGRESS;
        volume = strdup(s->volume);
        if (!volume)
                return -ENOMEM;
        r = name_snapshot(s, &snap_name);
        if (r < 0)
                return r;
        r = rbdm_info(snap_name, &info);
        if (r < 0)
                return r;
        if (info.exists && info.open_count > 0)
                return -EADDRINUSE;
        last = pool_count_snapshots(p, volume, false) == 1;

        r = rbdm_info(volume, &vinfo);
        if (r < 0)
                return r;
        if (vinfo.exists) {
                r = stack_read(volume, &st);
                if (r < 0)
                        return r;
        }
        /* Invalid before its device goes: a crash from here on never re-arms it as if it had seen every write. */
        if (s->state != SNAPSHOT_INVALID) {
                s->state = SNAPSHOT_INVALID;
                r = pool_commit(p);
                if (r < 0)
                        return r;
        }
        rb_crash_point("delete-invalidated");
        if (info.exists) {
                r = remove_snapshot_device(volume, vinfo.exists && st.backend >= 0, snap_name);
                if (r < 0)
                        return r;
        }
        if (last && vinfo.exists && st.backend >= 0 && !st.merging) {
                r = disarm(volume, &st);
                if (r < 0)
                        return r;
        }
        remove_named(name_cow, s);
        rb_crash_point("delete-removed");

        v = pool_find_volume(p, volume);
        if (v && v->revert && strcmp(v->revert, name) == 0) {
                free(v->revert);
                v->revert = NULL;
        }
        pool_remove_snapshot(p, s);
        if (last && v && !v->merging)
                pool_remove_volume(p, v);
        return pool_commit(p);
}

int rb_snapshot_usage(struct pool *p, const struct snapshot *s, struct rb_usage *ret) {
        _cleanup_free_ char *dev = NULL, *status = NULL;
        unsigned long long a, t, m;
        const char *params;
        struct rbdm_info info;
        int r, skip = 0;

        *ret = (struct rb_usage) {};
        if (s->state == SNAPSHOT_MERGING)
                dev = strdup(s->volume);
        else
                r = name_snapshot(s, &dev);
        if (!dev)
                return -ENOMEM;
        r = rbdm_info(dev, &info);
        if (r < 0)
                return r;
        if (!info.exists || !info.live_table)
                return 0;
        r = rbdm_table(dev, true, &status);
        if (r < 0)
                return r;
        ret->present = true;
        /* "start len target <status>" */
        if (sscanf(status, "%*u %*u %*s %n", &skip) < 0 || skip == 0)
                return -EIO;
        params = status + skip;
        if (sscanf(params, "%llu/%llu %llu", &a, &t, &m) == 3) {
                ret->allocated = a;
                ret->total = t;
                ret->metadata = m;
        } else
                ret->invalid = true;    /* Invalid, Overflow, Merge failed */
        return 0;
}

static unsigned invalidate_volume_snapshots(struct pool *p, const char *volume) {
        unsigned n = 0;

        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                struct snapshot *s = &p->meta.snapshots[i];

                if (strcmp(s->volume, volume) == 0 && s->state != SNAPSHOT_INVALID) {
                        s->state = SNAPSHOT_INVALID;
                        n++;
                }
        }
        return n;
}

/* Removes a device of ours unless something (a mount, a device above) still holds it. */
static void remove_unused(const char *name) {
        struct rbdm_info info;

        if (rbdm_info(name, &info) >= 0 && info.exists && info.open_count == 0)
                (void) rbdm_remove(name);
}

/*
 * The devices left of a volume's stack once its table was replaced (LVM's
 * lvextend, lvchange --refresh, pvmove load their own): snapshots first,
 * then their COWs and the -real device beneath, so a new snapshot can arm
 * the volume again.  What is in use stays until it is not.
 */
static void remove_stale_stack(struct pool *p, const char *volume, const struct stack *st) {
        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                struct snapshot *s = &p->meta.snapshots[i];
                _cleanup_free_ char *snap = NULL, *cow = NULL;

                if (strcmp(s->volume, volume) != 0)
                        continue;
                if (name_snapshot(s, &snap) >= 0)
                        remove_unused(snap);
                if (name_cow(s, &cow) >= 0)
                        remove_unused(cow);
        }
        remove_unused(st->real_name);
}

int rb_refresh_states(struct pool *p, unsigned *ret_changed) {
        unsigned changed = 0;

        /*
         * We hold the lock, so whoever was creating these died on the way:
         * whether or not their device went live, they may have missed writes.
         */
        for (size_t i = 0; i < p->meta.n_snapshots; i++)
                if (p->meta.snapshots[i].state == SNAPSHOT_CREATING) {
                        p->meta.snapshots[i].state = SNAPSHOT_INVALID;
                        changed++;
                }

        /*
         * A volume back on its own table (booted without the early-boot hook)
         * has been written untracked: its snapshots no longer match it.  A
         * merge it was under is over too: resumed later, it would copy the
         * snapshot's chunks over what was written since.
         */
        for (size_t i = 0; i < p->meta.n_volumes; i++) {
                struct volume *v = &p->meta.volumes[i];
                _cleanup_(stack_done) struct stack st = {};
                struct rbdm_info info;

                if (rbdm_info(v->name, &info) < 0 || !info.exists || !info.live_table ||
                    stack_read(v->name, &st) < 0 || st.backend >= 0)
                        continue;
                changed += invalidate_volume_snapshots(p, v->name);
                remove_stale_stack(p, v->name, &st);
                free(v->merging);
                v->merging = NULL;
                free(v->revert);
                v->revert = NULL;
        }

        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                struct snapshot *s = &p->meta.snapshots[i];
                struct rb_usage u;

                if (s->state != SNAPSHOT_ACTIVE)
                        continue;
                if (rb_snapshot_usage(p, s, &u) < 0 || !u.present || !u.invalid)
                        continue;
                s->state = SNAPSHOT_INVALID;
                changed++;
        }
        if (ret_changed)
                *ret_changed = changed;
        return changed > 0 ? pool_commit(p) : 0;
}

int rb_cancel_revert(struct pool *p, const char *volume) {
        unsigned n = 0;

        for (size_t i = 0; i < p->meta.n_volumes; i++) {
                struct volume *v = &p->meta.volumes[i];

                if ((volume && strcmp(v->name, volume) != 0) || !v->revert)
                        continue;
                free(v->revert);
                v->revert = NULL;
                n++;
        }
        if (n == 0)
                return -ENOENT;
        return pool_commit(p);
}

struct merge_swap {
        struct pool *pool;
        struct volume *volume;
        struct snapshot *snapshot;
        const struct stack *stack;
        enum backend backend;
        const char *table;
        bool untracked;         /* out: the snapshot's device is gone */
};

/* With the volume suspended: its snapshot device goes, the merge table comes. */
static int merge_swap_step(void *userdata) {
        struct merge_swap *m = userdata;
        struct pool *p = m->pool;

        remove_named(name_snapshot, m->snapshot);
        m->untracked = true;
        if (m->backend != m->stack->backend)
                for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                        struct snapshot *o = &p->meta.snapshots[i];
                        _cleanup_free_ char *n = NULL, *t = NULL;

                        if (o == m->snapshot || strcmp(o->volume, m->volume->name) != 0 ||
                            o->state != SNAPSHOT_ACTIVE)
                                continue;
                        if (name_snapshot(o, &n) < 0 || snapshot_table(m->stack, m->backend, o, false, &t) < 0)
                                continue;
                        /* Same COW, the other implementation: the format is the same. */
                        (void) rbdm_remove(n);
                        if (rbdm_create(n, NULL) < 0)
                                continue;
                        if (rbdm_load(n, t) < 0 || rbdm_resume(n) < 0)
                                (void) rbdm_remove(n);
                }
        return rbdm_load(m->volume->name, m->table);
}

/*
 * Loads the merge table: the volume is not in use, so the stack can be
 * rebuilt freely.  On failure, ret_untracked says whether the snapshot
 * stopped tracking the volume's writes on the way.
 */
static int merge_now(struct pool *p, struct volume *v, struct snapshot *s, bool *ret_untracked) {
        struct merge_swap m = {};
        _cleanup_(stack_done) struct stack st = {};
        _cleanup_free_ char *merge = NULL;
        struct rbdm_info info;
        enum backend b;
        int r;

        r = rb_backend_resolve(p->meta.settings.backend, true, &b);
        if (r < 0)
                return r;
        r = stack_read(v->name, &st);
        if (r < 0)
                return r;
        if (st.backend < 0 || st.merging)
                return -EBUSY;

        /* Other snapshots must be of the merging backend to see the merge's writes. */
        if (b != st.backend) {
                for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                        struct snapshot *o = &p->meta.snapshots[i];
                        _cleanup_free_ char *n = NULL;

                        if (o == s || strcmp(o->volume, v->name) != 0 || name_snapshot(o, &n) < 0)
                                continue;
                        if (rbdm_info(n, &info) >= 0 && info.exists && info.open_count > 0)
                                return -EADDRINUSE;
                }
        }

        r = snapshot_table(&st, b, s, true, &merge);
        if (r < 0)
                return r;
        m = (struct merge_swap) { .pool = p, .volume = v, .snapshot = s, .stack = &st, .backend = b, .table = merge };
        r = rbdm_swap(v->name, &(const struct rbdm_swap) { .step = merge_swap_step, .userdata = &m });
        *ret_untracked = m.untracked;
        return r;
}

int rb_revert(struct pool *p, const char *name, bool now) {
        bool untracked = false;
        struct snapshot *s;
        struct volume *v;
        struct rb_usage u;
        struct rbdm_info info;
        int r;

        s = pool_find_snapshot(p, name);
        if (!s)
                return -ENOENT;
        if (s->state != SNAPSHOT_ACTIVE)
                return s->state == SNAPSHOT_MERGING ? -EALREADY : -ESTALE;
        r = rb_snapshot_usage(p, s, &u);
        if (r < 0)
                return r;
        if (u.invalid) {
                s->state = SNAPSHOT_INVALID;
                (void) pool_commit(p);
                return -ESTALE;
        }
        v = pool_find_volume(p, s->volume);
        if (!v)
                return -EBADMSG;
        if (v->merging)
                return -EINPROGRESS;

        if (!now) {
                free(v->revert);
                v->revert = strdup(name);
                if (!v->revert)
                        return -ENOMEM;
                return pool_commit(p);
        }

        r = rbdm_info(v->name, &info);
        if (r < 0)
                return r;
        if (!info.exists)
                return -ENODEV;
        if (info.open_count > 0)
                return -EADDRINUSE;

        /* Recorded first: a crash from here on resumes the merge at boot. */
        free(v->revert);
        v->revert = NULL;
        v->merging = strdup(name);
        if (!v->merging)
                return -ENOMEM;
        v->merge_start_usec = now_usec(CLOCK_REALTIME);
        v->merge_start_chunks = u.allocated > u.metadata ? (u.allocated - u.metadata) / s->chunk_sectors : 0;
        s->state = SNAPSHOT_MERGING;
        r = pool_commit(p);
        if (r < 0)
                goto fail;
        rb_crash_point("revert-recorded");
        r = merge_now(p, v, s, &untracked);
        if (r < 0) {
                /* Nothing merged; but once its device went, the volume was written past it. */
                s = pool_find_snapshot(p, name);
                v = pool_find_volume(p, s->volume);
                s->state = untracked ? SNAPSHOT_INVALID : SNAPSHOT_ACTIVE;
                free(v->merging);
                v->merging = NULL;
                (void) pool_commit(p);
                return r;
        }
        return 0;
fail:
        (void) rb_pool_reload(p);
        return r;
}

/* After a merge: the volume becomes an origin again (other snapshots) or plain. */
static int merge_finish(struct pool *p, struct volume *v, struct snapshot *s, const struct stack *st) {
        _cleanup_free_ char *volume = strdup(v->name), *origin = NULL;
        bool others = pool_count_snapshots(p, v->name, false) > 1;
        int r;

        if (!volume)
                return -ENOMEM;
        if (others) {
                r = table_origin(st->backend, st->sectors, st->real_devt, &origin);
                if (r < 0)
                        return r;
                r = rbdm_replace(volume, origin);
        } else
                r = disarm(volume, st);
        if (r < 0)
                return r;
        remove_named(name_cow, s);
        pool_remove_snapshot(p, s);
        v = pool_find_volume(p, volume);
        free(v->merging);
        v->merging = NULL;
        if (!others)
                pool_remove_volume(p, v);
        return pool_commit(p);
}

int rb_merge_poll(struct pool *p, const char *volume, bool finish, struct rb_merge_progress *ret) {
        _cleanup_(stack_done) struct stack st = {};
        struct snapshot *s;
        struct volume *v;
        struct rb_usage u;
        uint64_t remaining, elapsed;
        int r;

        *ret = (struct rb_merge_progress) { .state = MERGE_NONE, .eta_seconds = -1 };
        v = pool_find_volume(p, volume);
        if (!v || !v->merging)
                return 0;
        s = pool_find_snapshot(p, v->merging);
        if (!s)
                return -EBADMSG;
        r = stack_read(volume, &st);
        if (r < 0)
                return r;
        if (!st.merging) {
                /* Recorded, but not loaded (yet): at the next boot it will be. */
                ret->state = MERGE_PENDING;
                ret->chunks_total = ret->chunks_remaining = v->merge_start_chunks;
                return 0;
        }
        r = rb_snapshot_usage(p, s, &u);
        if (r < 0)
                return r;
        if (u.invalid) {
                ret->state = MERGE_FAILED;
                return 0;
        }
        remaining = u.allocated > u.metadata ? (u.allocated - u.metadata) / s->chunk_sectors : 0;
        ret->chunks_total = v->merge_start_chunks > remaining ? v->merge_start_chunks : remaining;
        ret->chunks_remaining = remaining;
        ret->percent = ret->chunks_total ? 100.0 * (ret->chunks_total - remaining) / ret->chunks_total : 100.0;
        elapsed = now_usec(CLOCK_REALTIME) - v->merge_start_usec;
        if (remaining < ret->chunks_total && elapsed > 0)
                ret->eta_seconds = (int64_t) ((double) remaining * elapsed / 1e6 /
                                              (ret->chunks_total - remaining));
        if (remaining > 0) {
                ret->state = MERGE_RUNNING;
                return 0;
        }
        ret->state = MERGE_DONE;
        ret->percent = 100.0;
        ret->eta_seconds = 0;
        if (!finish)
                return 0;
        return merge_finish(p, v, s, &st);
}

int rb_snapshot_extend(struct pool *p, const char *name, uint64_t count) {
        _cleanup_free_ struct extent_run *runs = NULL;
        _cleanup_free_ char *cow = NULL, *table = NULL;
        struct extent_run *all;
        struct snapshot *s;
        size_t n;
        int r;

        s = pool_find_snapshot(p, name);
        if (!s)
                return -ENOENT;
        if (s->state != SNAPSHOT_ACTIVE)
                return -ESTALE;
        r = pool_allocate_extents(p, count, &runs, &n);
        if (r < 0)
                return r;
        all = reallocarray(s->extents, s->n_extents + n, sizeof(*all));
        if (!all)
                return -ENOMEM;
        s->extents = all;
        for (size_t i = 0; i < n; i++) {
                struct extent_run *last = &s->extents[s->n_extents - 1];

                if (last->start + last->count == runs[i].start)
                        last->count += runs[i].count;
                else
                        s->extents[s->n_extents++] = runs[i];
        }
        /* Reserved on disk before the COW can use them. */
        r = pool_commit(p);
        if (r < 0) {
                (void) rb_pool_reload(p);
                return r;
        }
        if ((r = name_cow(s, &cow)) < 0 || (r = table_cow(&p->geo, p->devnum, s, &table)) < 0)
                return r;
        return rbdm_replace(cow, table);
}

/*
 * The upgrade snapshot of a volume that retention deletes next, or NULL:
 * while more than settings.retain are kept, an invalid one (it can never be
 * reverted to) goes before any valid one, the oldest first.  A merging
 * snapshot is not counted, and the one pending revert is never deleted.
 */
struct snapshot *rb_retention_victim(struct pool *p, const char *volume) {
        struct volume *v = pool_find_volume(p, volume);
        struct snapshot *victim = NULL;
        size_t n = 0;

        if (p->meta.settings.retain == 0)
                return NULL;
        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                struct snapshot *s = &p->meta.snapshots[i];

                if (!s->upgrade || strcmp(s->volume, volume) != 0 || s->state == SNAPSHOT_MERGING)
                        continue;
                n++;
                if (v && v->revert && strcmp(v->revert, s->name) == 0)
                        continue;
                if (!victim ||
                    (s->state == SNAPSHOT_INVALID) > (victim->state == SNAPSHOT_INVALID) ||
                    ((s->state == SNAPSHOT_INVALID) == (victim->state == SNAPSHOT_INVALID) &&
                     s->created_usec < victim->created_usec))
                        victim = s;
        }
        return n > p->meta.settings.retain ? victim : NULL;
}

int rb_apply_retention(struct pool *p, const char *volume, unsigned *ret_deleted) {
        unsigned deleted = 0;
        struct snapshot *victim;

        if (ret_deleted)
                *ret_deleted = 0;
        while ((victim = rb_retention_victim(p, volume))) {
                _cleanup_free_ char *name = strdup(victim->name);
                int r;

                if (!name)
                        return -ENOMEM;
                r = rb_snapshot_delete(p, name);
                if (r < 0)
                        return r;
                deleted++;
                if (ret_deleted)
                        *ret_deleted = deleted;
        }
        return 0;
}

int rb_list_json(struct pool *p, json_object **ret) {
        json_object *a = json_object_new_array();

        if (!a)
                return -ENOMEM;
        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                const struct snapshot *s = &p->meta.snapshots[i];
                const struct volume *v = pool_find_volume(p, s->volume);
                json_object *o = json_object_new_object();
                uint64_t size = snapshot_extent_count(s) * p->geo.extent_sectors * 512;
                struct rb_usage u;
                _cleanup_free_ char *dev = NULL;
                const char *state = snapshot_state_to_string(s->state);

                if (rb_snapshot_usage(p, s, &u) < 0)
                        u = (struct rb_usage) {};
                if (s->state == SNAPSHOT_ACTIVE && u.invalid)
                        state = snapshot_state_to_string(SNAPSHOT_INVALID);
                json_object_object_add(o, "name", json_object_new_string(s->name));
                json_object_object_add(o, "volume", json_object_new_string(s->volume));
                json_object_object_add(o, "created_usec", json_object_new_uint64(s->created_usec));
                json_object_object_add(o, "description",
                                       s->description ? json_object_new_string(s->description) : NULL);
                json_object_object_add(o, "state", json_object_new_string(state));
                json_object_object_add(o, "upgrade", json_object_new_boolean(s->upgrade));
                json_object_object_add(o, "revert_pending",
                                       json_object_new_boolean(v && v->revert && strcmp(v->revert, s->name) == 0));
                json_object_object_add(o, "size_bytes", json_object_new_uint64(size));
                json_object_object_add(o, "used_bytes", json_object_new_uint64(u.allocated * 512));
                json_object_object_add(o, "used_percent",
                                       json_object_new_double(u.total ? 100.0 * u.allocated / u.total : 0.0));
                json_object_object_add(o, "chunk_sectors", json_object_new_uint64(s->chunk_sectors));
                if (s->state == SNAPSHOT_ACTIVE && name_snapshot(s, &dev) >= 0 && u.present) {
                        char path[PATH_MAX];

                        snprintf(path, sizeof(path), "/dev/mapper/%s", dev);
                        json_object_object_add(o, "device", json_object_new_string(path));
                } else
                        json_object_object_add(o, "device", NULL);
                json_object_array_add(a, o);
        }
        *ret = a;
        return 0;
}

int rb_status_json(struct pool *p, json_object **ret) {
        json_object *root = json_object_new_object(), *pool, *volumes, *snapshots;
        uint64_t extent_bytes = p->geo.extent_sectors * 512, free_extents = pool_free_extents(p);
        char uuid[POOL_UUID_STRING_MAX];
        int r;

        if (!root)
                return -ENOMEM;
        pool_uuid_to_string(p->geo.uuid, uuid);
        pool = json_object_new_object();
        json_object_object_add(pool, "device", json_object_new_string(p->path ? p->path : ""));
        json_object_object_add(pool, "uuid", json_object_new_string(uuid));
        json_object_object_add(pool, "extent_size_bytes", json_object_new_uint64(extent_bytes));
        json_object_object_add(pool, "extents_total", json_object_new_uint64(p->geo.extent_count));
        json_object_object_add(pool, "extents_free", json_object_new_uint64(free_extents));
        json_object_object_add(pool, "used_percent",
                               json_object_new_double(p->geo.extent_count ?
                                       100.0 * (p->geo.extent_count - free_extents) / p->geo.extent_count : 0.0));
        json_object_object_add(pool, "metadata_sequence", json_object_new_uint64(p->seq));
        json_object_object_add(pool, "backend",
                               json_object_new_string(backend_to_string(p->meta.settings.backend)));
        json_object_object_add(root, "pool", pool);

        volumes = json_object_new_array();
        for (size_t i = 0; i < p->meta.n_volumes; i++) {
                const struct volume *v = &p->meta.volumes[i];
                json_object *o = json_object_new_object(), *m;
                struct rb_merge_progress mp;
                _cleanup_(stack_done) struct stack st = {};

                json_object_object_add(o, "name", json_object_new_string(v->name));
                json_object_object_add(o, "backend",
                                       stack_read(v->name, &st) >= 0 && st.backend >= 0 ?
                                       json_object_new_string(backend_to_string(st.backend)) : NULL);
                json_object_object_add(o, "revert_pending", v->revert ? json_object_new_string(v->revert) : NULL);
                if (v->merging && rb_merge_poll(p, v->name, false, &mp) >= 0) {
                        m = json_object_new_object();
                        json_object_object_add(m, "snapshot", json_object_new_string(v->merging));
                        json_object_object_add(m, "state", json_object_new_string(merge_state_to_string(mp.state)));
                        json_object_object_add(m, "percent", json_object_new_double(mp.percent));
                        json_object_object_add(m, "chunks_total", json_object_new_uint64(mp.chunks_total));
                        json_object_object_add(m, "chunks_remaining", json_object_new_uint64(mp.chunks_remaining));
                        json_object_object_add(m, "eta_seconds",
                                               mp.eta_seconds >= 0 ? json_object_new_int64(mp.eta_seconds) : NULL);
                } else
                        m = NULL;
                json_object_object_add(o, "merge", m);
                json_object_array_add(volumes, o);
        }
        json_object_object_add(root, "volumes", volumes);
        r = rb_list_json(p, &snapshots);
        if (r < 0) {
                json_object_put(root);
                return r;
        }
        json_object_object_add(root, "snapshots", snapshots);
        *ret = root;
        return 0;
}

int rb_pool_open_locked(const char *path, struct pool **ret_pool, int *ret_lock) {
        _cleanup_close_ int lock = -1;
        int r;

        r = rb_lock(&lock);
        if (r < 0)
                return r;
        r = rb_pool_open(path, ret_pool);
        if (r < 0)
                return r;
        *ret_lock = TAKE_FD(lock);
        return 0;
}

struct arm {
        struct pool *pool;
        bool *live;
        struct rb_boot_report *report;
};

/* With the volume suspended: its snapshots start; one that does not is invalid. */
static int arm_step(void *userdata) {
        struct arm *a = userdata;
        struct pool *p = a->pool;

        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                _cleanup_free_ char *name = NULL;

                if (!a->live[i] || name_snapshot(&p->meta.snapshots[i], &name) < 0)
                        continue;
                if (rbdm_resume(name) < 0) {
                        (void) rbdm_remove(name);
                        remove_named(name_cow, &p->meta.snapshots[i]);
                        a->live[i] = false;
                        p->meta.snapshots[i].state = SNAPSHOT_INVALID;
                        a->report->invalidated++;
                } else
                        a->report->armed++;
        }
        return 0;
}

int rb_boot_volume(struct pool *p, const char *volume, struct rb_boot_report *ret) {
        _cleanup_(stack_done) struct stack st = {};
        _cleanup_free_ char *top = NULL, *real_uuid = NULL;
        struct snapshot *merging = NULL;
        struct rbdm_info info;
        struct volume *v;
        bool *live = NULL;
        int r;

        *ret = (struct rb_boot_report) { .backend = _BACKEND_INVALID };
        v = pool_find_volume(p, volume);
        if (!v)
                return -ENOENT;
        r = rbdm_info(volume, &info);
        if (r < 0)
                return r;
        if (!info.exists || !info.live_table)
                return -ENODEV;
        r = stack_read(volume, &st);
        if (r < 0)
                return r;
        if (st.backend >= 0) {
                ret->already = true;
                return 0;
        }

        /* A pending revert becomes a running merge, recorded before it starts. */
        if (v->merging)
                merging = pool_find_snapshot(p, v->merging);
        else if (v->revert) {
                merging = pool_find_snapshot(p, v->revert);
                if (merging && merging->state == SNAPSHOT_ACTIVE) {
                        v->merging = v->revert;
                        v->revert = NULL;
                        v->merge_start_usec = now_usec(CLOCK_REALTIME);
                        v->merge_start_chunks = 0;
                        merging->state = SNAPSHOT_MERGING;
                        ret->merge_started = true;
                } else {
                        free(v->revert);
                        v->revert = NULL;
                        merging = NULL;
                }
        }
        if (merging) {
                ret->merging = strdup(merging->name);
                if (!ret->merging)
                        return -ENOMEM;
        }
        /* LVM may have moved or grown the LV: its table now is the truth. */
        free(v->table);
        v->table = strdup(st.real_table);
        if (!v->table)
                return -ENOMEM;

        r = rb_backend_resolve(p->meta.settings.backend, merging != NULL, &ret->backend);
        if (r < 0)
                goto invalidate;
        r = pool_commit(p);
        if (r < 0)
                return r;

        r = uuid_real(v, &real_uuid);
        if (r < 0)
                goto invalidate;
        r = device_create(st.real_name, real_uuid, st.real_table, true);
        if (r < 0)
                goto invalidate;
        r = rbdm_devt(st.real_name, st.real_devt);
        if (r < 0)
                goto remove_real;

        live = calloc(p->meta.n_snapshots + 1, sizeof(bool));
        if (!live) {
                r = -ENOMEM;
                goto remove_real;
        }
        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                struct snapshot *s = &p->meta.snapshots[i];
                _cleanup_free_ char *name = NULL, *uuid = NULL, *table = NULL;
                bool created;

                if (strcmp(s->volume, volume) != 0 || (s->state != SNAPSHOT_ACTIVE && s != merging))
                        continue;
                if (cow_device_create(p, s, &created) < 0)
                        goto bad_snapshot;
                if (s == merging)
                        continue;
                if (name_snapshot(s, &name) < 0 || uuid_snapshot(s, &uuid) < 0 ||
                    snapshot_table(&st, ret->backend, s, false, &table) < 0 ||
                    device_create(name, uuid, table, false) < 0) {
                        remove_named(name_cow, s);
                        goto bad_snapshot;
                }
                live[i] = true;
                continue;
bad_snapshot:
                if (s == merging) {
                        r = -EIO;
                        goto remove_snapshots;
                }
                s->state = SNAPSHOT_INVALID;
                ret->invalidated++;
        }

        if (merging)
                r = snapshot_table(&st, ret->backend, merging, true, &top);
        else
                r = table_origin(ret->backend, st.sectors, st.real_devt, &top);
        if (r < 0)
                goto remove_snapshots;
        r = rbdm_swap(volume, &(const struct rbdm_swap) {
                .table = top,
                .step = arm_step,
                .userdata = &(struct arm) { p, live, ret },
        });
        if (r < 0)
                goto remove_snapshots;
        free(live);
        if (ret->merge_started) {
                struct rb_usage u;

                if (rb_snapshot_usage(p, merging, &u) >= 0 && u.allocated > u.metadata)
                        v->merge_start_chunks = (u.allocated - u.metadata) / merging->chunk_sectors;
        }
        return pool_commit(p);

remove_snapshots:
        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                struct snapshot *s = &p->meta.snapshots[i];

                if (strcmp(s->volume, volume) != 0)
                        continue;
                if (live[i])
                        remove_named(name_snapshot, s);
                remove_named(name_cow, s);
        }
remove_real:
        (void) rbdm_remove(st.real_name);
invalidate:
        free(live);
        ret->armed = 0;
        if (merging) {
                /*
                 * Mounted now, the volume would be half merged (a merge under
                 * way) or written untracked, losing the revert asked for.
                 * Leave the merge to the next boot, pending as it was; the
                 * caller stops this one.
                 */
                ret->merge_blocked = true;
                if (ret->merge_started) {
                        v->revert = v->merging;
                        v->merging = NULL;
                        merging->state = SNAPSHOT_ACTIVE;
                }
                (void) pool_commit(p);
                return r;
        }
        /* Nothing tracks writes to the volume now: none of its snapshots may be reverted to. */
        ret->invalidated += invalidate_volume_snapshots(p, volume);
        (void) pool_commit(p);
        return r;
}
