/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * rollbackctl: snapshots of the root volume that can be reverted.
 *
 * Verbs talk to rollbackd over D-Bus; without a system bus (early boot,
 * rescue shells, the test guests) or with --no-daemon they run the same
 * library operations in-process.
 */
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <systemd/sd-bus.h>
#include <time.h>
#include <unistd.h>

#include "bus.h"
#include "log.h"
#include "macro.h"
#include "pool.h"
#include "rollback.h"

/* Exit codes, documented in --help and rollbackctl(8). */
enum {
        EXIT_FAIL = 1,
        EXIT_USAGE = 2,
        EXIT_NOT_FOUND = 3,
        EXIT_BUSY = 4,
        EXIT_NO_SPACE = 5,
        EXIT_INVALID_SNAPSHOT = 6,
};

static bool arg_json;
static bool arg_no_daemon;
static const char *arg_pool;
static const char *arg_name;
static const char *arg_description;
static uint64_t arg_size;
static uint64_t arg_expect_writes;
static bool arg_upgrade;
static bool arg_now;
static bool arg_keep_boot;
static bool arg_force;
static uint64_t arg_extent_size;
static enum backend arg_backend = BACKEND_AUTO;
static bool arg_backend_set;
static unsigned arg_timeout;

static int exit_code(int r) {
        switch (-r) {
        case 0:
                return 0;
        case ENOENT:
        case ENODEV:
        case ENOMEDIUM:
        case ENXIO:
                return EXIT_NOT_FOUND;
        case EBUSY:
        case EADDRINUSE:
        case EALREADY:
        case EINPROGRESS:
                return EXIT_BUSY;
        case ENOSPC:
        case EDQUOT:
                return EXIT_NO_SPACE;
        case ESTALE:
                return EXIT_INVALID_SNAPSHOT;
        case EINVAL:
                return EXIT_USAGE;
        default:
                return EXIT_FAIL;
        }
}

static int help(void) {
        printf("Usage: rollbackctl [OPTIONS] COMMAND [ARGS...]\n"
               "\n"
               "Block-level snapshots of the root volume, taken before package upgrades, that\n"
               "can be merged back (reverted) at the next boot while the system runs.\n"
               "\n"
               "Commands:\n"
               "  init DEVICE             Format DEVICE (an LV) as the rollback pool\n"
               "       [--extent-size SIZE] [--backend auto|rollback|upstream] [--force]\n"
               "  snapshot [VOLUME]       Take a snapshot of VOLUME (default: the volume\n"
               "                          mounted at /), keeping the filesystem mounted\n"
               "       [--name NAME] [--size SIZE] [--description TEXT] [--upgrade]\n"
               "       [--expect-writes SIZE]  Size the COW for a change about to write SIZE\n"
               "                          (refused with status 5 if the pool cannot hold it)\n"
               "  list                    List snapshots with their COW fill\n"
               "  status                  Show the pool, merge progress and snapshots\n"
               "  revert NAME [--now]     Merge snapshot NAME back into its volume at the next\n"
               "                          boot; --now at once, if the volume is not in use.\n"
               "                          /boot gets the copy NAME holds back first, so that\n"
               "       [--keep-boot]      the old kernel boots; --keep-boot leaves it as it is\n"
               "  cancel-revert [VOLUME]  Forget a pending revert, and put back the /boot it\n"
               "       [--keep-boot]      replaced; --keep-boot leaves /boot as it is\n"
               "  delete NAME             Delete a snapshot and free its extents\n"
               "  boot NAME               Boot snapshot NAME once, from its GRUB entry, without\n"
               "                          merging it: its writes are discarded (grub-reboot)\n"

               "  wait [--timeout SEC]    Wait until running merges are done, with progress\n"
               "  mark-good [VOLUME]      This boot is good: the upgrade on trial is kept\n"
               "  trial-failed [CHECK]    A health check failed: reboot a trial boot into the\n"
               "                          next one (failed_check_reboot=1)\n"
               "  config [KEY[=VALUE]...] Show or change pool settings\n"
               "\n"
               "Options:\n"
               "  -h --help               Show this help\n"
               "     --version            Show the version\n"
               "     --json               Print list and status as JSON (stable keys)\n"
               "     --pool DEVICE|UUID=UUID  Use this pool, not the one init recorded\n"
               "     --no-daemon          Do the work in-process instead of via rollbackd\n"
               "\n"
               "SIZE takes the suffixes K, M, G, T (powers of 1024).\n"
               "Settings (config): autoextend_threshold, autoextend_percent, pool_warn_percent,\n"
               "retain, snapshot_percent, full_wait_seconds, auto_revert_after, failed_check_reboot,\n"
               "chunk_sectors, backend.\n"
               "\n"
               "Exit status: 0 success, 1 failure, 2 bad usage, 3 not found (pool, volume or\n"
               "snapshot), 4 busy (in use or merging), 5 no space left in the pool,\n"
               "6 the snapshot is invalid (overflowed) and cannot be reverted to.\n"
               "\n"
               "See rollbackctl(8).\n");
        return 0;
}

static int parse_size(const char *s, uint64_t *ret) {
        char *end;
        unsigned long long v;
        uint64_t mult = 1;

        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno != 0 || end == s || s[0] == '-')
                return -EINVAL;
        switch (*end) {
        case 0: break;
        case 'K': case 'k': mult = 1ULL << 10; end++; break;
        case 'M': case 'm': mult = 1ULL << 20; end++; break;
        case 'G': case 'g': mult = 1ULL << 30; end++; break;
        case 'T': case 't': mult = 1ULL << 40; end++; break;
        default: return -EINVAL;
        }
        if (*end == 'i' && end[1] == 'B')
                end += 2;
        else if (*end == 'B')
                end++;
        if (*end != 0 || v == 0 || v > UINT64_MAX / mult)
                return -EINVAL;
        *ret = v * mult;
        return 0;
}

static void format_bytes(char buf[16], uint64_t b) {
        static const char *const units = "KMGTP";
        double v = b;
        int u = -1;

        while (v >= 1024 && u < 4) {
                v /= 1024;
                u++;
        }
        if (u < 0)
                snprintf(buf, 16, "%" PRIu64 "B", b);
        else
                snprintf(buf, 16, "%.1f%c", v, units[u]);
}

static const char *error_text(int r) {
        switch (-r) {
        case ENOMEDIUM: return "no rollback pool found; create one with 'rollbackctl init DEVICE'";
        case ENOTUNIQ: return "more than one device holds the rollback pool; choose one with --pool";
        case ENXIO: return "the rollback pool recorded in " RB_POOL_ID_PATH " is not here; choose one with --pool";
        case EBADMSG: return "the pool's metadata is damaged in both slots";
        case EUCLEAN: return "the pool's header or metadata is inconsistent (damaged or not written by rollback); refusing to use it";
        case EOPNOTSUPP: return "no usable snapshot targets in the kernel (dm-rollback or dm-snapshot)";
        case ENOSPC: return "not enough free space in the pool";
        case ENOTBLK: return "not a device-mapper volume (rollback snapshots LVs and other dm devices: name one, as vg0-root)";
        case EISDIR: return "that is one of rollback's own devices, not a volume";
        case EADDRINUSE: return "the device is in use";
        case EDQUOT: return "the volume has no room for the copy of /boot that its snapshot must hold";
        case ESTALE: return "the snapshot is invalid (" RB_INVALID_WHY "): it cannot be reverted to";
        default: return NULL;
        }
}

static int log_op_error(int r, const char *what) {
        const char *t = error_text(r);

        if (r == -ENOMEDIUM && arg_pool) {
                log_error("%s: %s is not a rollback pool", what, arg_pool);
                return exit_code(r);
        }

        if (t)
                log_error("%s: %s", what, t);
        else
                log_error_errno(r, "%s: %m", what);
        return exit_code(r);
}

/* Direct mode: the operations under the lock, on the pool. */
struct op {
        enum op_kind { OP_CREATE, OP_DELETE, OP_REVERT, OP_CANCEL, OP_LIST, OP_STATUS, OP_POLL, OP_MARK_GOOD } kind;
        const char *volume;
        const char *name;
        struct rb_create create;
        bool now;
        bool keep_boot;
        char *result;           /* JSON text or a name */
};

static int op_direct(struct op *op) {
        _cleanup_pool_ struct pool *p = NULL;
        _cleanup_close_ int lock = -1;
        _cleanup_free_ char *volume = NULL;
        json_object *j = NULL;
        int r;

        r = rb_pool_open_locked(arg_pool, &p, &lock);
        if (r < 0)
                return r;
        if (p->foreign > 0)
                log_warning("Ignoring %u other device(s) with a rollback pool signature; using %s", p->foreign,
                            p->path);
        (void) rb_refresh_states(p, NULL);
        switch (op->kind) {
        case OP_CREATE:
                r = rb_volume_resolve(op->volume, &volume);
                if (r < 0)
                        return r;
                r = rb_snapshot_create(p, volume, &op->create, &op->result);
                if (r >= 0 && op->create.upgrade)
                        (void) rb_apply_retention(p, volume, NULL);
                return r;
        case OP_DELETE:
                return rb_snapshot_delete(p, op->name);
        case OP_REVERT:
                return rb_revert(p, op->name, op->now, op->keep_boot);
        case OP_CANCEL:
                if (op->volume) {
                        r = rb_volume_resolve(op->volume, &volume);
                        if (r < 0)
                                return r;
                }
                return rb_cancel_revert(p, volume, op->keep_boot);
        case OP_MARK_GOOD:
                r = rb_volume_resolve(op->volume, &volume);
                if (r < 0)
                        return r;
                r = rb_trial_mark_good(p, volume, &op->result);
                return r < 0 ? r : 0;
        case OP_POLL:
                for (size_t i = 0; i < p->meta.n_volumes; i++) {
                        struct rb_merge_progress mp;
                        _cleanup_free_ char *v = strdup(p->meta.volumes[i].name);

                        if (!v)
                                return -ENOMEM;
                        (void) rb_merge_poll(p, v, true, &mp);
                }
                _fallthrough_;
        case OP_STATUS:
                r = rb_status_json(p, &j);
                break;
        case OP_LIST:
                r = rb_list_json(p, &j);
                break;
        }
        if (r < 0)
                return r;
        op->result = strdup(json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN));
        json_object_put(j);
        return op->result ? 0 : -ENOMEM;
}

static int op_bus(sd_bus *bus, struct op *op) {
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        const char *s;
        int r;

        /* A snapshot copies /boot and a revert puts it back: more than the default 25 s on a slow disk. */
        (void) sd_bus_set_method_call_timeout(bus, RB_BUS_LONG_CALL_USEC);

        switch (op->kind) {
        case OP_CREATE:
                if (op->create.expected_writes > 0)
                        r = sd_bus_call_method(bus, RB_BUS_NAME, RB_BUS_PATH, RB_BUS_INTERFACE,
                                               "CreateSnapshotEx", &error, &reply, "ssstbt", op->volume ?: "",
                                               op->create.name ?: "", op->create.description ?: "",
                                               op->create.size, op->create.upgrade,
                                               op->create.expected_writes);
                else
                        r = sd_bus_call_method(bus, RB_BUS_NAME, RB_BUS_PATH, RB_BUS_INTERFACE,
                                               "CreateSnapshot", &error, &reply, "ssstb", op->volume ?: "",
                                               op->create.name ?: "", op->create.description ?: "",
                                               op->create.size, op->create.upgrade);
                break;
        case OP_DELETE:
                r = sd_bus_call_method(bus, RB_BUS_NAME, RB_BUS_PATH, RB_BUS_INTERFACE, "DeleteSnapshot",
                                       &error, &reply, "s", op->name);
                break;
        case OP_REVERT:
                if (op->keep_boot)
                        r = sd_bus_call_method(bus, RB_BUS_NAME, RB_BUS_PATH, RB_BUS_INTERFACE, "RevertEx",
                                               &error, &reply, "sbb", op->name, op->now, op->keep_boot);
                else
                        r = sd_bus_call_method(bus, RB_BUS_NAME, RB_BUS_PATH, RB_BUS_INTERFACE, "Revert",
                                               &error, &reply, "sb", op->name, op->now);
                break;
        case OP_CANCEL:
                if (op->keep_boot)
                        r = sd_bus_call_method(bus, RB_BUS_NAME, RB_BUS_PATH, RB_BUS_INTERFACE, "CancelRevertEx",
                                               &error, &reply, "sb", op->volume ?: "", op->keep_boot);
                else
                        r = sd_bus_call_method(bus, RB_BUS_NAME, RB_BUS_PATH, RB_BUS_INTERFACE, "CancelRevert",
                                               &error, &reply, "s", op->volume ?: "");
                break;
        case OP_MARK_GOOD:
                r = sd_bus_call_method(bus, RB_BUS_NAME, RB_BUS_PATH, RB_BUS_INTERFACE, "MarkGood",
                                       &error, &reply, "s", op->volume ?: "");
                break;
        case OP_LIST:
                r = sd_bus_call_method(bus, RB_BUS_NAME, RB_BUS_PATH, RB_BUS_INTERFACE, "ListSnapshots",
                                       &error, &reply, "");
                break;
        case OP_STATUS:
        case OP_POLL:
                r = sd_bus_call_method(bus, RB_BUS_NAME, RB_BUS_PATH, RB_BUS_INTERFACE, "GetStatus",
                                       &error, &reply, "");
                break;
        default:
                return -EINVAL;
        }
        if (r < 0)
                return sd_bus_error_get_errno(&error) > 0 ? -sd_bus_error_get_errno(&error) : r;
        if (op->kind == OP_DELETE || op->kind == OP_REVERT || op->kind == OP_CANCEL)
                return 0;
        r = sd_bus_message_read(reply, "s", &s);
        if (r < 0)
                return r;
        /* MarkGood: "" when no trial was open. */
        if (op->kind == OP_MARK_GOOD && !s[0])
                return 0;
        op->result = strdup(s);
        return op->result ? 0 : -ENOMEM;
}

static int run_op(struct op *op) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;

        if (!arg_no_daemon && !arg_pool && rb_bus_open_daemon(&bus) >= 0)
                return op_bus(bus, op);
        if (geteuid() != 0)
                return -EPERM;
        return op_direct(op);
}

static json_object *parse_result(struct op *op) {
        return op->result ? json_tokener_parse(op->result) : NULL;
}

static const char *jstr(json_object *o, const char *key) {
        json_object *v;

        if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
                return NULL;
        return json_object_get_string(v);
}

static uint64_t juint(json_object *o, const char *key) {
        json_object *v;

        return json_object_object_get_ex(o, key, &v) ? json_object_get_uint64(v) : 0;
}

static double jdouble(json_object *o, const char *key) {
        json_object *v;

        return json_object_object_get_ex(o, key, &v) ? json_object_get_double(v) : 0.0;
}

static bool jbool(json_object *o, const char *key) {
        json_object *v;

        return json_object_object_get_ex(o, key, &v) && json_object_get_boolean(v);
}

static void print_json(json_object *j) {
        puts(json_object_to_json_string_ext(j, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED));
}

static void print_snapshot_table(json_object *a) {
        size_t n = json_object_array_length(a);

        if (n == 0) {
                printf("No snapshots.\n");
                return;
        }
        printf("%-24s %-16s %-19s %8s %6s %-8s %s\n", "NAME", "VOLUME", "CREATED", "SIZE", "USED",
               "STATE", "DESCRIPTION");
        for (size_t i = 0; i < n; i++) {
                json_object *o = json_object_array_get_idx(a, i);
                char size[16], created[32], state[32];
                time_t t = juint(o, "created_usec") / 1000000;
                struct tm tm;

                localtime_r(&t, &tm);
                strftime(created, sizeof(created), "%Y-%m-%d %H:%M:%S", &tm);
                format_bytes(size, juint(o, "size_bytes"));
                snprintf(state, sizeof(state), "%s%s", jstr(o, "state") ?: "?",
                         jbool(o, "revert_pending") ? "*" : "");
                printf("%-24s %-16s %-19s %8s %5.1f%% %-8s %s\n", jstr(o, "name"), jstr(o, "volume"), created,
                       size, jdouble(o, "used_percent"), state, jstr(o, "description") ?: "");
        }
        for (size_t i = 0; i < n; i++)
                if (jbool(json_object_array_get_idx(a, i), "revert_pending")) {
                        printf("* pending revert: merged back at the next boot\n");
                        break;
                }
}

/* Runs list or status and parses its JSON: 0, or the exit code once the failure is said. */
static int fetch_json(enum op_kind kind, const char *what, json_object **ret) {
        struct op op = { .kind = kind };
        int r;

        r = run_op(&op);
        if (r < 0)
                return log_op_error(r, what);
        *ret = parse_result(&op);
        free(op.result);
        return *ret ? 0 : log_op_error(-EBADMSG, what);
}

static int verb_list(int argc, char *argv[]) {
        json_object *j;
        int r;

        if (argc > 1) {
                log_error("list takes no arguments");
                return EXIT_USAGE;
        }
        r = fetch_json(OP_LIST, "Failed to list snapshots", &j);
        if (r != 0)
                return r;
        if (arg_json)
                print_json(j);
        else
                print_snapshot_table(j);
        json_object_put(j);
        return 0;
}

static void print_merge(json_object *v) {
        json_object *m;

        if (!json_object_object_get_ex(v, "merge", &m) || !m)
                return;
        printf("  merging %s: %s, %.1f%% (%" PRIu64 " of %" PRIu64 " chunks left)", jstr(m, "snapshot"),
               jstr(m, "state"), jdouble(m, "percent"), juint(m, "chunks_remaining"), juint(m, "chunks_total"));
        if (json_object_object_get_ex(m, "eta_seconds", &v) && v)
                printf(", about %" PRIu64 " s left", json_object_get_uint64(v));
        printf("\n");
}

static void print_auto_reverted(json_object *status) {
        json_object *vols, *a;

        json_object_object_get_ex(status, "volumes", &vols);
        for (size_t i = 0; i < json_object_array_length(vols); i++) {
                json_object *v = json_object_array_get_idx(vols, i);

                if (!json_object_object_get_ex(v, "auto_reverted", &a) || !a)
                        continue;
                printf("AUTOMATIC REVERT: %s was reverted to snapshot %s because %" PRIu64 " boots in a row after "
                       "the upgrade were not marked good (none reached boot-complete.target).\n",
                       jstr(v, "name"), jstr(a, "snapshot"), juint(a, "boots"));
        }
}

static void print_trial(json_object *v) {
        json_object *t;

        if (!json_object_object_get_ex(v, "trial", &t) || !t)
                return;
        if (juint(t, "limit") == 0)
                printf("  upgrade %s on trial, automatic revert off\n", jstr(t, "snapshot"));
        else
                printf("  upgrade %s on trial: %" PRIu64 " boot(s) since, none marked good; after %" PRIu64 ", the "
                       "next boot reverts to it\n", jstr(t, "snapshot"), juint(t, "boots"), juint(t, "limit"));
}

static int verb_status(int argc, char *argv[]) {
        json_object *j, *pool, *vols, *snaps;
        char ext[16];
        int r;

        if (argc > 1) {
                log_error("status takes no arguments");
                return EXIT_USAGE;
        }
        r = fetch_json(OP_STATUS, "Failed to get status", &j);
        if (r != 0)
                return r;
        if (arg_json) {
                print_json(j);
                json_object_put(j);
                return 0;
        }
        /* What the admin must know first: a throwaway boot, a revert that happened by itself, snapshots that no longer can. */
        if (jstr(j, "snapshot_boot"))
                printf("SNAPSHOT BOOT: this boot runs snapshot %s through a view: what is written now is discarded "
                       "at shutdown. GRUB's default entry boots the volume again.\n", jstr(j, "snapshot_boot"));
        print_auto_reverted(j);
        json_object_object_get_ex(j, "snapshots", &snaps);
        for (size_t i = 0; i < json_object_array_length(snaps); i++) {
                json_object *s = json_object_array_get_idx(snaps, i);

                if (strcmp(jstr(s, "state") ?: "", snapshot_state_to_string(SNAPSHOT_INVALID)) == 0)
                        printf("WARNING: snapshot %s of %s is invalid (" RB_INVALID_WHY "): it cannot be "
                               "reverted to.\n",
                               jstr(s, "name"), jstr(s, "volume"));
        }
        json_object_object_get_ex(j, "pool", &pool);
        format_bytes(ext, juint(pool, "extent_size_bytes"));
        printf("Pool %s (%s): %" PRIu64 " extents of %s, %" PRIu64 " free, %.0f%% used, backend %s\n",
               jstr(pool, "device"), jstr(pool, "uuid"), juint(pool, "extents_total"), ext,
               juint(pool, "extents_free"), jdouble(pool, "used_percent"), jstr(pool, "backend"));
        json_object_object_get_ex(j, "volumes", &vols);
        for (size_t i = 0; i < json_object_array_length(vols); i++) {
                json_object *v = json_object_array_get_idx(vols, i);

                printf("Volume %s: targets %s%s%s\n", jstr(v, "name"), jstr(v, "backend") ?: "none",
                       jstr(v, "revert_pending") ? ", revert pending to " : "", jstr(v, "revert_pending") ?: "");
                print_merge(v);
                print_trial(v);
        }
        print_snapshot_table(snaps);
        json_object_put(j);
        return 0;
}

static int verb_snapshot(int argc, char *argv[]) {
        struct op op = { .kind = OP_CREATE };
        int r;

        if (argc > 2) {
                log_error("snapshot takes at most one VOLUME");
                return EXIT_USAGE;
        }
        if (arg_name && !snapshot_name_is_valid(arg_name)) {
                log_error("invalid snapshot name '%s': use letters, digits, '.', '_', '+', '-', at most %d",
                          arg_name, POOL_NAME_MAX);
                return EXIT_USAGE;
        }
        op.volume = argc > 1 ? argv[1] : NULL;
        op.create = (struct rb_create) {
                .name = arg_name,
                .description = arg_description,
                .size = arg_size,
                .expected_writes = arg_expect_writes,
                .upgrade = arg_upgrade,
        };
        r = run_op(&op);
        if (r == -EEXIST) {
                log_error("a snapshot named '%s' already exists", arg_name);
                return EXIT_FAIL;
        }
        if (r == -EINPROGRESS) {
                log_error("the volume is being merged; try again when 'rollbackctl wait' returns");
                return EXIT_BUSY;
        }
        if (r == -ENODEV) {
                log_error("no device-mapper volume '%s'", op.volume ?: "/");
                return EXIT_NOT_FOUND;
        }
        if (r == -EINVAL && arg_name) {
                log_error("invalid snapshot name '%s': names ending in -real or -cow are reserved", arg_name);
                return EXIT_USAGE;
        }
        if (r == -ENOSPC && arg_expect_writes > 0) {
                char expected[16];

                format_bytes(expected, arg_expect_writes);
                log_error("Failed to take a snapshot: the pool cannot hold the %s this change is expected to "
                          "write, with its margin, in the new COW and the volume's other snapshots; free space "
                          "with 'rollbackctl delete' or give the pool more",
                          expected);
                return EXIT_NO_SPACE;
        }
        if (r < 0)
                return log_op_error(r, "Failed to take a snapshot");
        printf("%s\n", op.result);
        free(op.result);
        return 0;
}

static int need_name(int argc, char *argv[], const char *verb) {
        if (argc != 2) {
                log_error("%s takes exactly one snapshot NAME", verb);
                return -EINVAL;
        }
        return 0;
}

static int verb_delete(int argc, char *argv[]) {
        struct op op = { .kind = OP_DELETE };
        int r;

        if (need_name(argc, argv, "delete") < 0)
                return EXIT_USAGE;
        op.name = argv[1];
        r = run_op(&op);
        if (r == -ENOENT) {
                log_error("no snapshot named '%s'", op.name);
                return EXIT_NOT_FOUND;
        }
        if (r == -EINPROGRESS) {
                log_error("snapshot '%s' is being merged and cannot be deleted", op.name);
                return EXIT_BUSY;
        }
        if (r < 0)
                return log_op_error(r, "Failed to delete the snapshot");
        return 0;
}

static int verb_revert(int argc, char *argv[]) {
        struct op op = { .kind = OP_REVERT, .now = arg_now, .keep_boot = arg_keep_boot };
        int r;

        if (need_name(argc, argv, "revert") < 0)
                return EXIT_USAGE;
        op.name = argv[1];
        r = run_op(&op);
        switch (-r) {
        case 0:
                if (arg_now)
                        printf("Merging '%s' back into its volume; 'rollbackctl wait' follows it.\n", op.name);
                else
                        printf("'%s' will be merged back at the next boot; 'rollbackctl cancel-revert' undoes this.\n",
                               op.name);
                return 0;
        case ENOENT:
                log_error("no snapshot named '%s'", op.name);
                return EXIT_NOT_FOUND;
        case EALREADY:
                log_error("snapshot '%s' is already being merged", op.name);
                return EXIT_BUSY;
        case EINPROGRESS:
                log_error("the volume of '%s' is already being merged", op.name);
                return EXIT_BUSY;
        case EADDRINUSE:
                log_error("the volume of '%s' is in use (mounted?); revert without --now to merge at the next boot",
                          op.name);
                return EXIT_BUSY;
        case EROFS:
                log_error("this boot runs a snapshot through a view, where the /boot that '%s' holds cannot be put "
                          "back; boot GRUB's default entry and revert there (--keep-boot reverts the volume alone)",
                          op.name);
                return EXIT_BUSY;
        case ENODATA:
                log_error("'%s' holds no copy of /boot (taken by an older rollback, or of a read-only root), and the "
                          "next boot could start a kernel the reverted root lacks; nothing was changed "
                          "(--keep-boot reverts the volume alone)", op.name);
                return EXIT_INVALID_SNAPSHOT;
        case EILSEQ:
                log_error("the copy of /boot that '%s' holds is damaged; nothing was changed "
                          "(--keep-boot reverts the volume alone)", op.name);
                return EXIT_INVALID_SNAPSHOT;
        case EXDEV:
                log_error("/boot is its own filesystem now and was not when '%s' was taken, or the other way round "
                          "(is /boot mounted as it was?); nothing was changed (--keep-boot reverts the volume alone)",
                          op.name);
                return EXIT_INVALID_SNAPSHOT;
        case ENOEXEC:
                log_error("no kernel in the /boot that '%s' holds has an initramfs with rollback's hook, so no boot "
                          "could start the merge; nothing was changed (--keep-boot reverts the volume alone)",
                          op.name);
                return EXIT_INVALID_SNAPSHOT;
        case ENOSPC:
                log_error("/boot has no room for the files that '%s' puts back; nothing was changed", op.name);
                return EXIT_NO_SPACE;
        default:
                return log_op_error(r, "Failed to revert");
        }
}

static int verb_mark_good(int argc, char *argv[]) {
        struct op op = { .kind = OP_MARK_GOOD };
        int r;

        if (argc > 2) {
                log_error("mark-good takes at most one VOLUME");
                return EXIT_USAGE;
        }
        op.volume = argc > 1 ? argv[1] : NULL;
        if (!op.volume && rb_view_booted(&op.result) > 0) {
                printf("This boot runs snapshot %s, whose writes are discarded: it is no trial boot, so nothing "
                       "is marked good.\n", op.result);
                free(op.result);
                return 0;
        }
        r = run_op(&op);
        /* Run at every boot by rollback-mark-good.service: a machine with no pool has nothing on trial. */
        if (r == -ENOMEDIUM) {
                printf("No rollback pool: no upgrade is on trial.\n");
                return 0;
        }
        if (r < 0)
                return log_op_error(r, "Failed to mark the boot good");
        if (op.result)
                printf("The upgrade of snapshot %s is good: no automatic revert to it.\n", op.result);
        else
                printf("No upgrade is on trial.\n");
        free(op.result);
        return 0;
}

/* The first volume with a trial open, from status JSON: NULL when none. */
static json_object *find_trial(json_object *status, const char **ret_volume) {
        json_object *vols, *t;

        if (!json_object_object_get_ex(status, "volumes", &vols))
                return NULL;
        for (size_t i = 0; i < json_object_array_length(vols); i++) {
                json_object *v = json_object_array_get_idx(vols, i);

                if (json_object_object_get_ex(v, "trial", &t) && t) {
                        *ret_volume = jstr(v, "name");
                        return t;
                }
        }
        return NULL;
}

/* OnFailure= of a health check: a trial boot that failed one is rebooted into the next trial (or the revert). */
static int verb_trial_failed(int argc, char *argv[]) {
        const char *check = argc > 1 ? argv[1] : "a health check", *volume = NULL;
        json_object *j, *t;
        uint64_t boots, limit;
        int r;

        if (argc > 2) {
                log_error("trial-failed takes at most one CHECK (the unit that failed)");
                return EXIT_USAGE;
        }
        r = fetch_json(OP_STATUS, "Failed to get status", &j);
        if (r != 0)
                return r;
        t = find_trial(j, &volume);
        if (!t) {
                log_warning("%s failed; no upgrade is on trial, so this boot counts for nothing.", check);
                json_object_put(j);
                return 0;
        }
        boots = juint(t, "boots");
        limit = juint(t, "limit");
        log_error("%s failed on trial boot %" PRIu64 " of %" PRIu64 " of %s after upgrade snapshot %s: this boot is "
                  "not marked good.", check, boots, limit, volume, jstr(t, "snapshot"));
        if (!jbool(t, "failed_check_reboot")) {
                log_info("failed_check_reboot=0: the system stays up; it reverts at the boot after trial %" PRIu64 ".",
                         limit);
                json_object_put(j);
                return 0;
        }
        log_warning("Rebooting into %s.", boots >= limit ? "the automatic revert" : "the next trial boot");
        json_object_put(j);
        fflush(NULL);
        execlp("systemctl", "systemctl", "reboot", NULL);
        log_error_errno(-errno, "Failed to run systemctl reboot: %m");
        return EXIT_FAIL;
}

static int verb_cancel_revert(int argc, char *argv[]) {
        struct op op = { .kind = OP_CANCEL, .keep_boot = arg_keep_boot };
        int r;

        if (argc > 2) {
                log_error("cancel-revert takes at most one VOLUME");
                return EXIT_USAGE;
        }
        op.volume = argc > 1 ? argv[1] : NULL;
        r = run_op(&op);
        switch (-r) {
        case 0:
                return 0;
        case ENOENT:
                log_error("no revert is pending");
                return EXIT_NOT_FOUND;
        case ENODATA:
        case EILSEQ:
        case EXDEV:
                log_error("the copy of the /boot that the revert replaced is %s; nothing was changed "
                          "(--keep-boot forgets the revert and leaves /boot as it is)",
                          r == -ENODATA ? "gone" : r == -EILSEQ ? "damaged" : "of another /boot filesystem layout");
                return EXIT_FAIL;
        case ENOSPC:
                log_error("/boot has no room for the files that the revert replaced; nothing was changed");
                return EXIT_NO_SPACE;
        default:
                return log_op_error(r, "Failed to cancel the revert");
        }
        return 0;
}

static void draw_progress(const char *name, double percent, int64_t eta) {
        char bar[41];
        int fill = (int) (percent * 40 / 100);

        for (int i = 0; i < 40; i++)
                bar[i] = i < fill ? '#' : '.';
        bar[40] = 0;
        if (eta >= 0)
                fprintf(stderr, "\r%s [%s] %5.1f%% %4" PRId64 " s left ", name, bar, percent, eta);
        else
                fprintf(stderr, "\r%s [%s] %5.1f%%           ", name, bar, percent);
}

/* How long wait watches a merge that does not move before it says so: a table swap stops it for a moment. */
#define WAIT_STOPPED_SEC 10U

static int verb_wait(int argc, char *argv[]) {
        bool tty = isatty(STDERR_FILENO), drawn = false;
        time_t deadline = arg_timeout ? time(NULL) + arg_timeout : 0, stopped_since = 0;

        if (argc > 1) {
                log_error("wait takes no arguments");
                return EXIT_USAGE;
        }
        for (;;) {
                struct op op = { .kind = OP_POLL };
                json_object *j, *vols;
                bool merging = false, failed = false, pending = false, moving = false;
                _cleanup_free_ char *stopped = NULL;
                int r;

                r = run_op(&op);
                if (r < 0)
                        return log_op_error(r, "Failed to get merge progress");
                j = parse_result(&op);
                free(op.result);
                if (!j || !json_object_object_get_ex(j, "volumes", &vols))
                        return log_op_error(-EBADMSG, "Failed to get merge progress");
                for (size_t i = 0; i < json_object_array_length(vols); i++) {
                        json_object *m, *eta;

                        if (!json_object_object_get_ex(json_object_array_get_idx(vols, i), "merge", &m) || !m)
                                continue;
                        if (strcmp(jstr(m, "state") ?: "", merge_state_to_string(MERGE_FAILED)) == 0) {
                                failed = true;
                                continue;
                        }
                        /* Nothing moves it in this boot: waiting would be forever. */
                        if (strcmp(jstr(m, "state") ?: "", merge_state_to_string(MERGE_PENDING)) == 0) {
                                pending = true;
                                continue;
                        }
                        merging = true;
                        /* Suspended, or stopped by its target: maybe for a moment (a table swap), maybe for good. */
                        if (strcmp(jstr(m, "state") ?: "", merge_state_to_string(MERGE_STOPPED)) == 0) {
                                if (!stopped)
                                        stopped = strdup(jstr(m, "snapshot") ?: "?");
                        } else
                                moving = true;
                        if (tty) {
                                json_object_object_get_ex(m, "eta_seconds", &eta);
                                draw_progress(jstr(m, "snapshot"), jdouble(m, "percent"),
                                              eta ? json_object_get_int64(eta) : -1);
                                drawn = true;
                        }
                }
                json_object_put(j);
                if (failed) {
                        if (drawn)
                                fputc('\n', stderr);
                        log_error("a merge failed: the snapshot became invalid; see 'rollbackctl status'");
                        return EXIT_INVALID_SNAPSHOT;
                }
                if (!merging && pending) {
                        if (drawn)
                                fputc('\n', stderr);
                        log_error("a merge is recorded but not loaded: it goes on at the next boot");
                        return EXIT_BUSY;
                }
                if (!merging)
                        break;
                if (moving || !stopped)
                        stopped_since = 0;
                else if (!stopped_since)
                        stopped_since = time(NULL);
                else if (time(NULL) - stopped_since >= WAIT_STOPPED_SEC) {
                        if (drawn)
                                fputc('\n', stderr);
                        log_error("the merge of snapshot '%s' has been stopped for %u s (its volume is suspended, "
                                  "or its target stopped it): it goes on when the volume is resumed, or at the next boot",
                                  stopped, WAIT_STOPPED_SEC);
                        return EXIT_BUSY;
                }
                if (deadline && time(NULL) >= deadline) {
                        if (drawn)
                                fputc('\n', stderr);
                        log_error("timed out with a merge still running");
                        return EXIT_BUSY;
                }
                usleep(500 * 1000);
        }
        if (drawn)
                fprintf(stderr, "\rmerge done%60s\n", "");
        return 0;
}

static int verb_init(int argc, char *argv[]) {
        _cleanup_close_ int fd = -1;
        struct pool_settings settings;
        uint64_t size = 0;
        char magic[8];
        struct stat st;
        int r;

        if (argc != 2) {
                log_error("init takes exactly one DEVICE");
                return EXIT_USAGE;
        }
        if (arg_extent_size && (arg_extent_size % 4096 != 0 || arg_extent_size < 65536)) {
                log_error("--extent-size must be a multiple of 4K and at least 64K");
                return EXIT_USAGE;
        }
        fd = open(argv[1], O_RDWR | O_CLOEXEC | O_EXCL);
        if (fd < 0) {
                r = -errno;
                if (r == -EBUSY) {
                        log_error("%s is in use (mounted or held by another device)", argv[1]);
                        return EXIT_BUSY;
                }
                return log_op_error(r, argv[1]);
        }
        if (fstat(fd, &st) < 0)
                return log_op_error(-errno, argv[1]);
        if (S_ISBLK(st.st_mode)) {
                if (ioctl(fd, BLKGETSIZE64, &size) < 0)
                        return log_op_error(-errno, argv[1]);
        } else if (S_ISREG(st.st_mode))
                size = st.st_size;
        else {
                log_error("%s is not a block device", argv[1]);
                return EXIT_USAGE;
        }
        if (!arg_force && pread(fd, magic, 8, 0) == 8 && memcmp(magic, POOL_MAGIC, 8) == 0) {
                log_error("%s already holds a rollback pool; --force formats it again, losing its snapshots",
                          argv[1]);
                return EXIT_FAIL;
        }
        if (!arg_force) {
                _cleanup_free_ char *type = NULL;

                r = rb_device_signature(fd, &type);
                if (r < 0)
                        return log_op_error(r, argv[1]);
                if (r > 0) {
                        log_error("%s carries a %s signature; --force formats it anyway, destroying that",
                                  argv[1], type);
                        return EXIT_FAIL;
                }
        }
        pool_settings_default(&settings);
        if (arg_backend_set)
                settings.backend = arg_backend;
        r = pool_format(fd, size, arg_extent_size ? arg_extent_size / 512 : POOL_EXTENT_SECTORS_DEFAULT, &settings);
        if (r == -ENOSPC) {
                log_error("%s is too small for a pool (it needs room for the metadata and one extent)", argv[1]);
                return EXIT_NO_SPACE;
        }
        if (r < 0)
                return log_op_error(r, "Failed to format the pool");
        printf("Formatted %s as a rollback pool.\n", argv[1]);
        /* From now on only this pool is used, whatever else carries the magic. */
        if (S_ISBLK(st.st_mode)) {
                uint8_t uuid[16];

                r = pool_probe(fd, uuid);
                if (r >= 0)
                        r = rb_pool_record(uuid);
                if (r < 0)
                        log_warning_errno(r, "Could not record the pool's identity in " RB_POOL_ID_PATH
                                          " (%m): the pool is found by its signature alone");
        }
        return 0;
}

static int verb_config(int argc, char *argv[]) {
        _cleanup_pool_ struct pool *p = NULL;
        _cleanup_close_ int lock = -1;
        bool changed = false;
        int r;

        if (geteuid() != 0) {
                log_error("config must be run as root");
                return EXIT_FAIL;
        }
        r = rb_pool_open_locked(arg_pool, &p, &lock);
        if (r < 0)
                return log_op_error(r, "Failed to open the pool");
        for (int i = 1; i < argc; i++) {
                _cleanup_free_ char *key = strdup(argv[i]);
                char *value = key ? strchr(key, '=') : NULL;
                bool found = false;

                if (!key)
                        return log_op_error(-ENOMEM, "config");
                if (value)
                        *value++ = 0;
                if (strcmp(key, "backend") == 0) {
                        found = true;
                        if (value) {
                                enum backend b = backend_from_string(value);
                                if (b < 0) {
                                        log_error("backend must be auto, rollback or upstream");
                                        return EXIT_USAGE;
                                }
                                p->meta.settings.backend = b;
                                changed = true;
                        } else
                                printf("backend=%s\n", backend_to_string(p->meta.settings.backend));
                }
                for (size_t k = 0; k < pool_settings_table_size && !found; k++) {
                        const struct pool_setting *t = &pool_settings_table[k];
                        unsigned *field = pool_setting_field(&p->meta.settings, t);
                        char *end;
                        unsigned long v;

                        if (strcmp(key, t->key) != 0)
                                continue;
                        found = true;
                        if (!value) {
                                printf("%s=%u\n", key, *field);
                                continue;
                        }
                        errno = 0;
                        v = strtoul(value, &end, 10);
                        if (errno || end == value || *end || !pool_setting_value_is_valid(t, v)) {
                                log_error("invalid value '%s' for %s", value, key);
                                return EXIT_USAGE;
                        }
                        *field = v;
                        changed = true;
                }
                if (!found) {
                        log_error("unknown setting '%s'; see 'rollbackctl --help'", key);
                        return EXIT_USAGE;
                }
        }
        if (argc == 1) {
                printf("backend=%s\n", backend_to_string(p->meta.settings.backend));
                for (size_t k = 0; k < pool_settings_table_size; k++)
                        printf("%s=%u\n", pool_settings_table[k].key,
                               pool_setting_value(&p->meta.settings, &pool_settings_table[k]));
        }
        if (changed) {
                r = pool_commit(p);
                if (r < 0)
                        return log_op_error(r, "Failed to write the pool metadata");
        }
        return 0;
}

/* The snapshot named name in list's JSON, or NULL. */
static json_object *find_snapshot(json_object *list, const char *name) {
        for (size_t i = 0; i < json_object_array_length(list); i++) {
                json_object *o = json_object_array_get_idx(list, i);

                if (strcmp(jstr(o, "name") ?: "", name) == 0)
                        return o;
        }
        return NULL;
}

#define GRUB_DIR "/boot/grub"
#define GRUB_SUBMENU_ID "rollback-snapshots"

/* Whether file has a line holding all of words. */
static bool file_has_line(const char *file, const char *const *words) {
        _cleanup_free_ char *line = NULL;
        size_t size = 0;
        bool found = false;
        FILE *f;

        f = fopen(file, "re");
        if (!f)
                return false;
        while (!found && getline(&line, &size, f) > 0) {
                found = true;
                for (const char *const *w = words; *w && found; w++)
                        found = strstr(line, *w) != NULL;
        }
        fclose(f);
        return found;
}

/* GRUB's menu has the submenu (grub.cfg, made by update-grub with /etc/grub.d/42_rollback) and its entry for name. */
static bool grub_has_entry(const char *name) {
        _cleanup_free_ char *id = NULL;

        if (asprintf(&id, "'rollback-%s'", name) < 0)
                return false;
        return file_has_line(GRUB_DIR "/grub.cfg", (const char *const[]) { "submenu ", "'" GRUB_SUBMENU_ID "'", NULL }) &&
               file_has_line(RB_BOOT_MENU, (const char *const[]) { "menuentry ", id, NULL });
}

/*
 * GRUB writes its environment block only on a plain disk or partition: not
 * on LVM, RAID or anything else of device-mapper's.  Asked of sysfs, as
 * grub-probe --target=abstraction (what grub-reboot asks) says nothing of
 * an LV whose table rollback has made an origin.
 */
static bool grub_can_save_env(void) {
        struct stat st;
        char path[96];

        if (stat(GRUB_DIR, &st) < 0)
                return true;
        /* A partition's own directory has no md/, its disk's has: "/.." from the partition is that disk. */
        for (const char *const *kind = (const char *const[]) { "dm", "md", "../md", NULL }; *kind; kind++) {
                snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/%s", major(st.st_dev), minor(st.st_dev), *kind);
                if (access(path, F_OK) == 0)
                        return false;
        }
        return true;
}

/* boot NAME: the next boot, and only it, runs snapshot NAME from its GRUB entry (grub-reboot). */
static int verb_boot(int argc, char *argv[]) {
        _cleanup_free_ char *entry = NULL;
        const char *name;
        json_object *j, *s;
        int r;

        if (argc != 2) {
                log_error("boot takes one snapshot NAME");
                return EXIT_USAGE;
        }
        name = argv[1];
        r = fetch_json(OP_LIST, "Failed to list snapshots", &j);
        if (r != 0)
                return r;
        s = find_snapshot(j, name);
        if (!s) {
                log_error("No snapshot named %s.", name);
                r = EXIT_NOT_FOUND;
        } else if (strcmp(jstr(s, "state") ?: "", snapshot_state_to_string(SNAPSHOT_ACTIVE)) != 0) {
                log_error("Snapshot %s is %s: only an active snapshot can be booted.", name, jstr(s, "state"));
                r = EXIT_INVALID_SNAPSHOT;
        } else if (!jstr(s, "boot_entry_kernel")) {
                log_error("Snapshot %s has no GRUB entry: only a snapshot of the root volume keeps the kernel that "
                          "ran when it was taken, in /boot/" "rollback/%s.", name, name);
                r = EXIT_FAIL;
        }
        for (size_t i = 0; r == 0 && s && i < json_object_array_length(j); i++) {
                json_object *o = json_object_array_get_idx(j, i);

                /* Early boot would refuse the view and stop: say it now. */
                if (strcmp(jstr(o, "volume") ?: "", jstr(s, "volume") ?: "") == 0 &&
                    (jbool(o, "revert_pending") || strcmp(jstr(o, "state") ?: "", "merging") == 0)) {
                        log_error("%s is to be reverted to %s: boot normally to merge it first, or cancel-revert.",
                                  jstr(s, "volume"), jstr(o, "name"));
                        r = EXIT_BUSY;
                }
        }
        json_object_put(j);
        if (r != 0)
                return r;
        if (!grub_can_save_env()) {
                log_error("GRUB cannot write its environment block on LVM or RAID, where " GRUB_DIR " is: it could "
                          "not clear a one-time entry, and every boot would run the snapshot. Choose %s under "
                          "\"Rollback snapshots\" in GRUB's menu instead.", name);
                return EXIT_FAIL;
        }
        /* The submenu comes with update-grub's next run after rollback was installed: this may be it. */
        if (!grub_has_entry(name)) {
                (void) rb_boot_menu_update();
                (void) rb_run((const char *const[]) { "update-grub", NULL }, true);
        }
        if (!grub_has_entry(name)) {
                log_error("GRUB's menu has no entry for %s, even after update-grub (is /etc/grub.d/42_rollback "
                          "executable?).", name);
                return EXIT_FAIL;
        }
        if (asprintf(&entry, GRUB_SUBMENU_ID ">rollback-%s", name) < 0)
                return log_op_error(-ENOMEM, "Failed to boot the snapshot");
        fflush(stdout);
        r = rb_run((const char *const[]) { "grub-reboot", entry, NULL }, false);
        if (r != 0)
                return log_op_error(r < 0 ? r : -EIO, "Failed to run grub-reboot");
        printf("The next boot, and only that one, runs snapshot %s with its own kernel; what it writes is discarded "
               "at shutdown. Reboot to start it.\n", name);
        return 0;
}

static int verb_help(int argc, char *argv[]) {
        return help();
}

static const struct verb {
        const char *name;
        int (*run)(int argc, char *argv[]);
} verbs[] = {
        { "init",          verb_init },
        { "snapshot",      verb_snapshot },
        { "list",          verb_list },
        { "status",        verb_status },
        { "revert",        verb_revert },
        { "cancel-revert", verb_cancel_revert },
        { "mark-good",     verb_mark_good },
        { "trial-failed",  verb_trial_failed },
        { "delete",        verb_delete },
        { "boot",          verb_boot },
        { "wait",          verb_wait },
        { "config",        verb_config },
        { "help",          verb_help },
};

enum {
        ARG_VERSION = 0x100,
        ARG_JSON,
        ARG_POOL,
        ARG_NO_DAEMON,
        ARG_NAME,
        ARG_SIZE,
        ARG_EXPECT_WRITES,
        ARG_DESCRIPTION,
        ARG_UPGRADE,
        ARG_NOW,
        ARG_KEEP_BOOT,
        ARG_FORCE,
        ARG_EXTENT_SIZE,
        ARG_BACKEND,
        ARG_TIMEOUT,
};

/* Returns > 0 to go on, 0 to exit successfully, < 0 on a usage error. */
static int parse_argv(int argc, char *argv[]) {
        static const struct option options[] = {
                { "help",        no_argument,       NULL, 'h' },
                { "version",     no_argument,       NULL, ARG_VERSION },
                { "json",        no_argument,       NULL, ARG_JSON },
                { "pool",        required_argument, NULL, ARG_POOL },
                { "no-daemon",   no_argument,       NULL, ARG_NO_DAEMON },
                { "name",        required_argument, NULL, ARG_NAME },
                { "size",        required_argument, NULL, ARG_SIZE },
                { "expect-writes", required_argument, NULL, ARG_EXPECT_WRITES },
                { "description", required_argument, NULL, ARG_DESCRIPTION },
                { "upgrade",     no_argument,       NULL, ARG_UPGRADE },
                { "now",         no_argument,       NULL, ARG_NOW },
                { "keep-boot",   no_argument,       NULL, ARG_KEEP_BOOT },
                { "force",       no_argument,       NULL, ARG_FORCE },
                { "extent-size", required_argument, NULL, ARG_EXTENT_SIZE },
                { "backend",     required_argument, NULL, ARG_BACKEND },
                { "timeout",     required_argument, NULL, ARG_TIMEOUT },
                {}
        };
        int c;

        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("rollbackctl %s\n", PROJECT_VERSION);
                        return 0;
                case ARG_JSON:
                        arg_json = true;
                        break;
                case ARG_POOL:
                        arg_pool = optarg;
                        break;
                case ARG_NO_DAEMON:
                        arg_no_daemon = true;
                        break;
                case ARG_NAME:
                        arg_name = optarg;
                        break;
                case ARG_SIZE:
                        if (parse_size(optarg, &arg_size) < 0) {
                                log_error("invalid size '%s' (examples: 512M, 2G)", optarg);
                                return -EINVAL;
                        }
                        break;
                case ARG_EXPECT_WRITES:
                        if (parse_size(optarg, &arg_expect_writes) < 0) {
                                log_error("invalid size '%s' for --expect-writes (examples: 300M, 2G)", optarg);
                                return -EINVAL;
                        }
                        break;
                case ARG_DESCRIPTION:
                        arg_description = optarg;
                        break;
                case ARG_UPGRADE:
                        arg_upgrade = true;
                        break;
                case ARG_NOW:
                        arg_now = true;
                        break;
                case ARG_KEEP_BOOT:
                        arg_keep_boot = true;
                        break;
                case ARG_FORCE:
                        arg_force = true;
                        break;
                case ARG_EXTENT_SIZE:
                        if (parse_size(optarg, &arg_extent_size) < 0) {
                                log_error("invalid extent size '%s' (examples: 1M, 4M)", optarg);
                                return -EINVAL;
                        }
                        break;
                case ARG_BACKEND:
                        arg_backend = backend_from_string(optarg);
                        if (arg_backend < 0) {
                                log_error("invalid backend '%s': auto, rollback or upstream", optarg);
                                return -EINVAL;
                        }
                        arg_backend_set = true;
                        break;
                case ARG_TIMEOUT:
                        if (safe_atou(optarg, &arg_timeout) < 0 || arg_timeout > 1000000) {
                                log_error("invalid timeout '%s' (seconds)", optarg);
                                return -EINVAL;
                        }
                        break;
                default:
                        return -EINVAL;
                }
        return 1;
}

int main(int argc, char *argv[]) {
        int r;

        log_set_program("rollbackctl");
        r = parse_argv(argc, argv);
        if (r <= 0)
                return r < 0 ? EXIT_USAGE : 0;
        if (optind >= argc) {
                log_error("missing command; see 'rollbackctl --help'");
                return EXIT_USAGE;
        }
        for (size_t i = 0; i < ELEMENTSOF(verbs); i++)
                if (strcmp(verbs[i].name, argv[optind]) == 0)
                        return verbs[i].run(argc - optind, argv + optind);
        log_error("unknown command '%s'; see 'rollbackctl --help'", argv[optind]);
        return EXIT_USAGE;
}
