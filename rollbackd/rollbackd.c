/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * rollbackd: serves rollbackctl on the system bus (org.rollback1, see
 * docs/dbus.md) and watches the pool: it extends COWs before they fill,
 * warns when the pool runs low, marks overflowed snapshots invalid, and
 * finishes merges.
 */
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-event.h>
#include <unistd.h>

#include "boot-copy.h"
#include "keepalive.h"
#include "bus.h"
#include "dm.h"
#include "log.h"
#include "macro.h"
#include "rollback.h"

static uint64_t arg_interval_usec = 2 * 1000000;
static const char *arg_pool;

#define FILL_SAMPLES 64

/* What a snapshot's COW held when last looked at, for its write rate. */
struct fill_sample {
        char id[33];
        uint64_t allocated;     /* sectors */
        uint64_t usec;          /* CLOCK_MONOTONIC */
};

struct daemon {
        sd_bus *bus;
        sd_event *event;
        bool pool_warned;
        bool auto_revert_announced;     /* this run said so once */
        unsigned foreign_warned;        /* other devices with the magic, last warned about */
        struct fill_sample samples[FILL_SAMPLES];
};

static int check_root(sd_bus_message *m, sd_bus_error *error) {
        _cleanup_(sd_bus_creds_unrefp) sd_bus_creds *creds = NULL;
        uid_t uid;
        int r;

        r = sd_bus_query_sender_creds(m, SD_BUS_CREDS_EUID, &creds);
        if (r < 0)
                return r;
        r = sd_bus_creds_get_euid(creds, &uid);
        if (r < 0)
                return r;
        if (uid != 0)
                return sd_bus_error_set_errnof(error, EPERM, "Only root may change snapshots");
        return 0;
}

static int reply_error(sd_bus_error *error, int r, const char *what) {
        return sd_bus_error_set_errnof(error, r, "%s: %s", what, strerror(-r));
}

static int method_create(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_pool_ struct pool *p = NULL;
        _cleanup_close_ int lock = -1;
        _cleanup_free_ char *volume = NULL, *name = NULL;
        const char *vol_arg, *name_arg, *desc;
        struct rb_create c = {};
        uint64_t size, expected_writes = 0;
        int upgrade, r;

        r = check_root(m, error);
        if (r < 0)
                return r;
        r = sd_bus_message_read(m, "ssstb", &vol_arg, &name_arg, &desc, &size, &upgrade);
        if (r < 0)
                return r;
        /* CreateSnapshotEx: CreateSnapshot's arguments, then the writes expected. */
        if (sd_bus_message_has_signature(m, "ssstbt")) {
                r = sd_bus_message_read(m, "t", &expected_writes);
                if (r < 0)
                        return r;
        }
        c = (struct rb_create) {
                .name = name_arg[0] ? name_arg : NULL,
                .description = desc[0] ? desc : NULL,
                .size = size,
                .expected_writes = expected_writes,
                .upgrade = upgrade,
        };
        r = rb_pool_open_locked(arg_pool, &p, &lock);
        if (r < 0)
                return reply_error(error, r, "Cannot open the pool");
        r = rb_volume_resolve(vol_arg[0] ? vol_arg : NULL, &volume);
        if (r < 0)
                return reply_error(error, r, "Cannot find the volume");
        r = rb_snapshot_create(p, volume, &c, &name);
        if (r < 0)
                return reply_error(error, r, "Cannot take the snapshot");
        if (expected_writes > 0)
                log_info("Took snapshot %s of %s, its COW sized for %" PRIu64 " MiB to be written.", name, volume,
                         expected_writes >> 20);
        else
                log_info("Took snapshot %s of %s.", name, volume);
        if (upgrade) {
                unsigned deleted;

                r = rb_apply_retention(p, volume, &deleted);
                if (r < 0)
                        log_warning_errno(r, "Failed to apply retention to %s: %m", volume);
                else if (deleted > 0)
                        log_info("Deleted %u old upgrade snapshot(s) of %s (retain=%u).", deleted, volume,
                                 p->meta.settings.retain);
        }
        return sd_bus_reply_method_return(m, "s", name);
}

static int method_delete(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_pool_ struct pool *p = NULL;
        _cleanup_close_ int lock = -1;
        const char *name;
        int r;

        r = check_root(m, error);
        if (r < 0)
                return r;
        r = sd_bus_message_read(m, "s", &name);
        if (r < 0)
                return r;
        r = rb_pool_open_locked(arg_pool, &p, &lock);
        if (r < 0)
                return reply_error(error, r, "Cannot open the pool");
        r = rb_snapshot_delete(p, name);
        if (r < 0)
                return reply_error(error, r, "Cannot delete the snapshot");
        log_info("Deleted snapshot %s.", name);
        return sd_bus_reply_method_return(m, "");
}

static int method_revert(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_pool_ struct pool *p = NULL;
        _cleanup_close_ int lock = -1;
        const char *name;
        int now, keep_boot = false, r;

        r = check_root(m, error);
        if (r < 0)
                return r;
        r = sd_bus_message_read(m, "sb", &name, &now);
        if (r < 0)
                return r;
        /* RevertEx: Revert's arguments, then whether /boot stays as it is. */
        if (sd_bus_message_has_signature(m, "sbb")) {
                r = sd_bus_message_read(m, "b", &keep_boot);
                if (r < 0)
                        return r;
        }
        r = rb_pool_open_locked(arg_pool, &p, &lock);
        if (r < 0)
                return reply_error(error, r, "Cannot open the pool");
        r = rb_revert(p, name, now, keep_boot);
        if (r < 0)
                return reply_error(error, r, "Cannot revert");
        log_info(now ? "Merging snapshot %s now." : "Snapshot %s will be merged at the next boot.", name);
        return sd_bus_reply_method_return(m, "");
}

static int method_cancel_revert(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_pool_ struct pool *p = NULL;
        _cleanup_close_ int lock = -1;
        _cleanup_free_ char *volume = NULL;
        const char *vol_arg;
        int keep_boot = false, r;

        r = check_root(m, error);
        if (r < 0)
                return r;
        r = sd_bus_message_read(m, "s", &vol_arg);
        if (r < 0)
                return r;
        /* CancelRevertEx: CancelRevert's argument, then whether /boot stays as the revert made it. */
        if (sd_bus_message_has_signature(m, "sb")) {
                r = sd_bus_message_read(m, "b", &keep_boot);
                if (r < 0)
                        return r;
        }
        r = rb_pool_open_locked(arg_pool, &p, &lock);
        if (r < 0)
                return reply_error(error, r, "Cannot open the pool");
        if (vol_arg[0]) {
                r = rb_volume_resolve(vol_arg, &volume);
                if (r < 0)
                        return reply_error(error, r, "Cannot find the volume");
        }
        r = rb_cancel_revert(p, volume, keep_boot);
        if (r < 0)
                return reply_error(error, r, "Cannot cancel the revert");
        log_info("Cancelled the pending revert.");
        return sd_bus_reply_method_return(m, "");
}

static int method_mark_good(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_pool_ struct pool *p = NULL;
        _cleanup_close_ int lock = -1;
        _cleanup_free_ char *volume = NULL, *snapshot = NULL;
        const char *vol_arg;
        int r;

        r = check_root(m, error);
        if (r < 0)
                return r;
        r = sd_bus_message_read(m, "s", &vol_arg);
        if (r < 0)
                return r;
        r = rb_pool_open_locked(arg_pool, &p, &lock);
        if (r < 0)
                return reply_error(error, r, "Cannot open the pool");
        r = rb_volume_resolve(vol_arg[0] ? vol_arg : NULL, &volume);
        if (r < 0)
                return reply_error(error, r, "Cannot find the volume");
        r = rb_trial_mark_good(p, volume, &snapshot);
        if (r < 0)
                return reply_error(error, r, "Cannot mark the boot good");
        if (snapshot)
                log_info("This boot of %s is good: the upgrade of snapshot %s is no longer on trial.", volume,
                         snapshot);
        return sd_bus_reply_method_return(m, "s", snapshot ?: "");
}

static int reply_json(sd_bus_message *m, sd_bus_error *error, bool status) {
        _cleanup_pool_ struct pool *p = NULL;
        _cleanup_close_ int lock = -1;
        json_object *j;
        int r;

        r = rb_pool_open_locked(arg_pool, &p, &lock);
        if (r < 0)
                return reply_error(error, r, "Cannot open the pool");
        r = status ? rb_status_json(p, &j) : rb_list_json(p, &j);
        if (r < 0)
                return reply_error(error, r, "Cannot read the snapshots");
        r = sd_bus_reply_method_return(m, "s", json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN));
        json_object_put(j);
        return r;
}

static int method_list(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return reply_json(m, error, false);
}

static int method_status(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return reply_json(m, error, true);
}

static const sd_bus_vtable manager_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD_WITH_NAMES("CreateSnapshot", "ssstb",
                                 SD_BUS_PARAM(volume) SD_BUS_PARAM(name) SD_BUS_PARAM(description)
                                 SD_BUS_PARAM(size) SD_BUS_PARAM(upgrade),
                                 "s", SD_BUS_PARAM(name), method_create, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_NAMES("CreateSnapshotEx", "ssstbt",
                                 SD_BUS_PARAM(volume) SD_BUS_PARAM(name) SD_BUS_PARAM(description)
                                 SD_BUS_PARAM(size) SD_BUS_PARAM(upgrade) SD_BUS_PARAM(expected_writes),
                                 "s", SD_BUS_PARAM(name), method_create, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_NAMES("DeleteSnapshot", "s", SD_BUS_PARAM(name), "", , method_delete,
                                 SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_NAMES("Revert", "sb", SD_BUS_PARAM(name) SD_BUS_PARAM(now), "", , method_revert,
                                 SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_NAMES("RevertEx", "sbb", SD_BUS_PARAM(name) SD_BUS_PARAM(now) SD_BUS_PARAM(keep_boot),
                                 "", , method_revert, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_NAMES("CancelRevert", "s", SD_BUS_PARAM(volume), "", , method_cancel_revert,
                                 SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_NAMES("CancelRevertEx", "sb", SD_BUS_PARAM(volume) SD_BUS_PARAM(keep_boot), "", ,
                                 method_cancel_revert, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_NAMES("MarkGood", "s", SD_BUS_PARAM(volume), "s", SD_BUS_PARAM(snapshot),
                                 method_mark_good, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_NAMES("ListSnapshots", "", , "s", SD_BUS_PARAM(json), method_list,
                                 SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_NAMES("GetStatus", "", , "s", SD_BUS_PARAM(json), method_status,
                                 SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_SIGNAL_WITH_NAMES("SnapshotInvalidated", "s", SD_BUS_PARAM(name), 0),
        SD_BUS_SIGNAL_WITH_NAMES("SnapshotExtended", "st", SD_BUS_PARAM(name) SD_BUS_PARAM(size), 0),
        SD_BUS_SIGNAL_WITH_NAMES("MergeFinished", "ss", SD_BUS_PARAM(volume) SD_BUS_PARAM(snapshot), 0),
        SD_BUS_SIGNAL_WITH_NAMES("PoolLow", "d", SD_BUS_PARAM(used_percent), 0),
        SD_BUS_SIGNAL_WITH_NAMES("AutoReverted", "sst", SD_BUS_PARAM(volume) SD_BUS_PARAM(snapshot)
                                 SD_BUS_PARAM(trial_boots), 0),
        SD_BUS_VTABLE_END
};

/* Sectors a second written into s's COW since it was last looked at (0 the first time). */
static uint64_t fill_rate(struct daemon *d, const struct snapshot *s, uint64_t allocated) {
        uint64_t now = now_usec(CLOCK_MONOTONIC), rate = 0;
        struct fill_sample *slot = NULL, *oldest = &d->samples[0];

        for (size_t i = 0; i < FILL_SAMPLES && !slot; i++) {
                if (strcmp(d->samples[i].id, s->id) == 0)
                        slot = &d->samples[i];
                else if (d->samples[i].usec < oldest->usec)
                        oldest = &d->samples[i];
        }
        if (slot && now > slot->usec && allocated > slot->allocated)
                rate = (allocated - slot->allocated) * 1000000 / (now - slot->usec);
        if (!slot) {
                slot = oldest;
                snprintf(slot->id, sizeof(slot->id), "%s", s->id);
        }
        slot->allocated = allocated;
        slot->usec = now;
        return rate;
}

/*
 * Extends every snapshot over the threshold by rb_autoextend_step(): by
 * autoextend_percent of its size, or by what the writes at the rate seen
 * since the last look need, if more.
 */
static void autoextend(struct daemon *d, struct pool *p) {
        if (!pool_autoextend_enabled(&p->meta.settings))
                return;
        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                struct snapshot *s = &p->meta.snapshots[i];
                _cleanup_free_ char *name = NULL;
                struct rb_usage u;
                uint64_t add, rate;
                int r;

                if (s->state != SNAPSHOT_ACTIVE || rb_snapshot_usage(p, s, &u) < 0 || !u.present || u.invalid ||
                    u.total == 0)
                        continue;
                rate = fill_rate(d, s, u.allocated);
                if (!rb_autoextend_due(p, s, &u))
                        continue;
                add = rb_autoextend_step(p, s, &u, rate);
                if (add == 0) {
                        log_warning("Snapshot %s is %" PRIu64 "%% full and the pool has no free extents left: "
                                    "it will become invalid when full.", s->name, u.allocated * 100 / u.total);
                        continue;
                }
                name = strdup(s->name);
                if (!name)
                        return;
                r = rb_snapshot_extend(p, name, add);
                if (r < 0) {
                        log_error_errno(r, "Failed to extend snapshot %s: %m", name);
                        continue;
                }
                s = pool_find_snapshot(p, name);
                log_info("Extended snapshot %s by %" PRIu64 " extent(s) to %" PRIu64 " (it was %" PRIu64 "%% full, "
                         "written at %.1f MiB/s).", name, add, snapshot_extent_count(s), u.allocated * 100 / u.total,
                         rate / 2048.0);
                (void) sd_bus_emit_signal(d->bus, RB_BUS_PATH, RB_BUS_INTERFACE, "SnapshotExtended", "st", name,
                                          snapshot_extent_count(s) * p->geo.extent_sectors * 512);
        }
}

static void report_invalid(struct daemon *d, struct pool *p, const uint8_t *was) {
        for (size_t i = 0; i < p->meta.n_snapshots; i++) {
                const struct snapshot *s = &p->meta.snapshots[i];

                if (s->state != SNAPSHOT_INVALID || was[i] == SNAPSHOT_INVALID)
                        continue;
                if (was[i] == SNAPSHOT_MERGING)
                        log_error("The merge of snapshot %s into %s was abandoned: the volume was used without it "
                                  "(booted without rollback), so it is half merged; check its filesystem.",
                                  s->name, s->volume);
                else
                        log_error("Snapshot %s of %s became invalid (" RB_INVALID_WHY "): it can no longer be "
                                  "reverted to; delete it to free its extents.", s->name, s->volume);
                (void) sd_bus_emit_signal(d->bus, RB_BUS_PATH, RB_BUS_INTERFACE, "SnapshotInvalidated", "s",
                                          s->name);
        }
}

static void watch_pool_fill(struct daemon *d, struct pool *p) {
        uint64_t total = p->geo.extent_count, used = total - pool_free_extents(p);
        double percent = total ? 100.0 * used / total : 0;

        if (percent >= p->meta.settings.pool_warn_percent) {
                if (!d->pool_warned)
                        log_warning("The pool is %.0f%% full (%" PRIu64 " of %" PRIu64 " extents): delete old "
                                    "snapshots or extend the pool.", percent, used, total);
                d->pool_warned = true;
                (void) sd_bus_emit_signal(d->bus, RB_BUS_PATH, RB_BUS_INTERFACE, "PoolLow", "d", percent);
        } else
                d->pool_warned = false;
}

static void finish_merges(struct daemon *d, struct pool *p) {
        char status[256] = "Watching the pool.";

        for (size_t i = 0; i < p->meta.n_volumes; i++) {
                _cleanup_free_ char *volume = strdup(p->meta.volumes[i].name);
                _cleanup_free_ char *snapshot = p->meta.volumes[i].merging ?
                                                strdup(p->meta.volumes[i].merging) : NULL;
                struct rb_merge_progress mp;
                int r;

                if (!volume || !snapshot)
                        continue;
                r = rb_merge_poll(p, volume, true, &mp);
                if (r < 0) {
                        log_error_errno(r, "Failed to follow the merge of %s into %s: %m", snapshot, volume);
                        continue;
                }
                switch (mp.state) {
                case MERGE_DONE:
                        log_info("Merged snapshot %s into %s; its devices and extents are freed.", snapshot, volume);
                        (void) sd_bus_emit_signal(d->bus, RB_BUS_PATH, RB_BUS_INTERFACE, "MergeFinished", "ss",
                                                  volume, snapshot);
                        break;
                case MERGE_RUNNING:
                        snprintf(status, sizeof(status), "Merging %s into %s: %.1f%%.", snapshot, volume,
                                 mp.percent);
                        break;
                case MERGE_FAILED:
                        snprintf(status, sizeof(status), "Merge of %s into %s failed.", snapshot, volume);
                        break;
                case MERGE_STOPPED:
                        snprintf(status, sizeof(status), "Merge of %s into %s stopped at %.1f%% (volume suspended?).",
                                 snapshot, volume, mp.percent);
                        break;
                default:
                        break;
                }
                /* The pool was rewritten: stop walking the old arrays. */
                if (mp.state == MERGE_DONE)
                        break;
        }
        (void) sd_notifyf(false, "STATUS=%s", status);
}

/* Early boot reverted a failed upgrade by itself (rollback-boot): said once a run, to the journal and the bus. */
static void announce_auto_revert(struct daemon *d, const struct pool *p) {
        if (d->auto_revert_announced)
                return;
        for (size_t i = 0; i < p->meta.n_volumes; i++) {
                const struct volume *v = &p->meta.volumes[i];
                const char *snapshot = v->merging ?: v->revert;

                if (v->auto_reverted_boots == 0 || !snapshot)
                        continue;
                log_warning("%s was reverted automatically to snapshot %s: %" PRIu64 " boots after the upgrade "
                            "in a row were not marked good.", v->name, snapshot, v->auto_reverted_boots);
                (void) sd_bus_emit_signal(d->bus, RB_BUS_PATH, RB_BUS_INTERFACE, "AutoReverted", "sst", v->name,
                                          snapshot, v->auto_reverted_boots);
                d->auto_revert_announced = true;
        }
}

static void monitor(struct daemon *d) {
        _cleanup_pool_ struct pool *p = NULL;
        _cleanup_close_ int lock = -1;
        _cleanup_free_ uint8_t *was = NULL;
        int r;

        r = rb_pool_open_locked(arg_pool, &p, &lock);
        if (r < 0) {
                if (r != -ENOMEDIUM)
                        log_debug("No pool to watch: %s", strerror(-r));
                (void) sd_notify(false, "STATUS=No pool.");
                return;
        }
        if (p->foreign != d->foreign_warned)
                log_warning("Ignoring %u other device(s) with a rollback pool signature; using %s", p->foreign,
                            p->path);
        d->foreign_warned = p->foreign;
        was = calloc(p->meta.n_snapshots + 1, 1);
        if (!was)
                return;
        for (size_t i = 0; i < p->meta.n_snapshots; i++)
                was[i] = p->meta.snapshots[i].state;
        r = rb_refresh_states(p, NULL);
        if (r < 0)
                log_error_errno(r, "Failed to record invalid snapshots: %m");
        report_invalid(d, p, was);
        announce_auto_revert(d, p);
        autoextend(d, p);
        watch_pool_fill(d, p);
        finish_merges(d, p);
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        struct daemon *d = userdata;

        monitor(d);
        return sd_event_source_set_time(s, usec + arg_interval_usec);
}

/*
 * A device-mapper event (a snapshot overflowing, a merge ending, a table
 * replaced): checked at once rather than at the next tick.  Re-armed first,
 * so that an event during the check wakes the loop again; the check's own
 * table changes are events too, which the rate limit keeps from spinning.
 */
static int on_dm_event(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        int r;

        r = rbdm_event_arm(fd);
        if (r < 0) {
                log_warning_errno(r, "Failed to wait for device-mapper events, checking every %.1f s only: %m",
                                  arg_interval_usec / 1e6);
                return sd_event_source_set_enabled(s, SD_EVENT_OFF);
        }
        monitor(userdata);
        return 0;
}

static void watch_dm_events(struct daemon *d) {
        _cleanup_close_ int fd = -1;
        sd_event_source *s;
        int r;

        fd = rbdm_event_open();
        if (fd < 0) {
                log_warning_errno(fd, "Failed to wait for device-mapper events, checking every %.1f s only: %m",
                                  arg_interval_usec / 1e6);
                return;
        }
        r = sd_event_add_io(d->event, &s, fd, EPOLLIN, on_dm_event, d);
        if (r < 0) {
                log_warning_errno(r, "Failed to watch device-mapper events: %m");
                return;
        }
        (void) sd_event_source_set_io_fd_own(s, true);
        TAKE_FD(fd);
        /* At most 10 checks a second; past that the events wait for the window's end. */
        (void) sd_event_source_set_ratelimit(s, 1000000, 10);
        (void) sd_event_source_set_floating(s, true);
        sd_event_source_unref(s);
}

static int help(void) {
        printf("Usage: rollbackd [OPTIONS]\n"
               "\n"
               "The rollback daemon: D-Bus service org.rollback1 and pool monitor.\n"
               "\n"
               "  -h --help             Show this help\n"
               "     --version          Show the version\n"
               "     --interval SEC     How often to check COW fill and merges, besides at\n"
               "                        every device-mapper event [2]\n"
               "     --pool DEVICE      Use this pool instead of searching for it\n");
        return 0;
}

static int parse_argv(int argc, char *argv[]) {
        enum { ARG_VERSION = 0x100, ARG_INTERVAL, ARG_POOL };
        static const struct option options[] = {
                { "help",     no_argument,       NULL, 'h' },
                { "version",  no_argument,       NULL, ARG_VERSION },
                { "interval", required_argument, NULL, ARG_INTERVAL },
                { "pool",     required_argument, NULL, ARG_POOL },
                {}
        };
        int c;

        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("rollbackd %s\n", PROJECT_VERSION);
                        return 0;
                case ARG_INTERVAL: {
                        char *end;
                        double v = strtod(optarg, &end);

                        if (end == optarg || *end || v < 0.1 || v > 3600) {
                                log_error("invalid interval '%s' (seconds, 0.1 to 3600)", optarg);
                                return -EINVAL;
                        }
                        arg_interval_usec = v * 1e6;
                        break;
                }
                case ARG_POOL:
                        arg_pool = optarg;
                        break;
                default:
                        return -EINVAL;
                }
        if (optind < argc) {
                log_error("rollbackd takes no arguments");
                return -EINVAL;
        }
        return 1;
}

/*
 * A call that copies /boot (a snapshot, a revert) runs in the loop and may
 * outlast WatchdogSec= on a slow disk: killed there, a revert would stop
 * half-way.  The copy pings the watchdog as it goes, at most once a second.
 */
static void watchdog_keepalive(void) {
        static uint64_t last_usec;
        uint64_t now = now_usec(CLOCK_MONOTONIC);

        if (now - last_usec < 1000000)
                return;
        last_usec = now;
        (void) sd_notify(false, "WATCHDOG=1");
}

int main(int argc, char *argv[]) {
        struct daemon d = {};
        sd_event_source *timer = NULL;
        sigset_t mask;
        uint64_t now;
        int r;

        log_set_program("rollbackd");
        r = parse_argv(argc, argv);
        if (r <= 0)
                return r < 0 ? 2 : 0;

        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigprocmask(SIG_BLOCK, &mask, NULL);

        r = sd_event_default(&d.event);
        if (r < 0)
                return log_error_errno(r, "Failed to get an event loop: %m"), 1;
        /* Pings systemd's watchdog (WatchdogSec=) from the loop: a stuck daemon gets restarted. */
        (void) sd_event_set_watchdog(d.event, true);
        rb_set_keepalive(watchdog_keepalive);
        (void) sd_event_add_signal(d.event, NULL, SIGTERM, NULL, NULL);
        (void) sd_event_add_signal(d.event, NULL, SIGINT, NULL, NULL);

        r = sd_bus_open_system(&d.bus);
        if (r < 0)
                return log_error_errno(r, "Failed to connect to the system bus: %m"), 1;
        r = sd_bus_add_object_vtable(d.bus, NULL, RB_BUS_PATH, RB_BUS_INTERFACE, manager_vtable, &d);
        if (r < 0)
                return log_error_errno(r, "Failed to add the D-Bus object: %m"), 1;
        r = sd_bus_request_name(d.bus, RB_BUS_NAME, 0);
        if (r < 0)
                return log_error_errno(r, "Failed to acquire %s: %m", RB_BUS_NAME), 1;
        r = sd_bus_attach_event(d.bus, d.event, 0);
        if (r < 0)
                return log_error_errno(r, "Failed to attach the bus to the event loop: %m"), 1;

        (void) sd_event_now(d.event, CLOCK_MONOTONIC, &now);
        r = sd_event_add_time(d.event, &timer, CLOCK_MONOTONIC, now, 100000, on_timer, &d);
        if (r < 0)
                return log_error_errno(r, "Failed to add the monitor timer: %m"), 1;
        (void) sd_event_source_set_enabled(timer, SD_EVENT_ON);
        watch_dm_events(&d);

        (void) sd_notify(false, "READY=1\nSTATUS=Watching the pool.");
        log_info("Serving %s.", RB_BUS_NAME);
        r = sd_event_loop(d.event);
        (void) sd_notify(false, "STOPPING=1");
        sd_event_source_unref(timer);
        sd_bus_flush_close_unref(d.bus);
        sd_event_unref(d.event);
        return r < 0 ? 1 : 0;
}
