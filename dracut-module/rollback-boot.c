/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * rollback-boot: the early-boot step, run by the dracut hook after LVM has
 * activated the volumes and before root is mounted.  For every volume in the
 * pool's metadata it re-arms the snapshots and, when a revert is pending or a
 * merge was running, starts the merge, so that root is mounted from the
 * merging device.  It logs what it did to the kernel log.
 */
#include <dirent.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "dm.h"

#include "log.h"
#include "macro.h"
#include "rollback.h"
#include "tables.h"

/*
 * At shutdown systemd-shutdown removes every device-mapper device that is
 * neither open nor under "/", so our snapshot devices went before the root
 * file system's last writes (its final unmount, in the initramfs), which
 * then reached the origin untracked.  A process whose argv[0] starts with
 * '@' is spared by systemd-shutdown: it keeps the snapshot devices open
 * until the initramfs kills it right before unmounting root, and the
 * snapshots see every write.
 */
static int hold_snapshots(char *argv0) {
        struct dirent *de;
        unsigned n = 0;
        DIR *d;

        d = opendir("/sys/block");
        if (!d)
                return log_error_errno(-errno, "cannot list block devices: %m");
        while ((de = readdir(d))) {
                char path[PATH_MAX], uuid[160];

                if (strncmp(de->d_name, "dm-", 3) != 0 || rbdm_sysfs(de->d_name, "uuid", uuid, sizeof(uuid)) < 0 ||
                    strncmp(uuid, RB_DM_UUID_PREFIX "SNAP-", strlen(RB_DM_UUID_PREFIX "SNAP-")) != 0)
                        continue;
                snprintf(path, sizeof(path), "/dev/%s", de->d_name);
                /* Left open on purpose: that is the hold. */
                if (open(path, O_RDONLY) >= 0)
                        n++;
                else
                        log_warning_errno(-errno, "cannot hold %s open: %m", path);
        }
        closedir(d);
        if (n == 0)
                return 0;
        switch (fork()) {
        case -1:
                return log_error_errno(-errno, "cannot fork the holder: %m");
        case 0:
                (void) setsid();
                for (int fd = 0; fd < 3; fd++)
                        (void) close(fd);
                argv0[0] = '@';
                for (;;)
                        pause();
        default:
                log_info("holding %u snapshot device(s) until root is unmounted", n);
                return 0;
        }
}

/* As dracut waits for root: the pool's device may come up after us (udev, a slow disk, LVM). */
static int open_pool_waiting(const char *pool, unsigned wait_sec, struct pool **ret, int *ret_lock) {
        uint64_t deadline = now_usec(CLOCK_MONOTONIC) + (uint64_t) wait_sec * 1000000;
        bool said = false;
        int r;

        for (;;) {
                r = rb_pool_open_locked(pool, ret, ret_lock);
                if (r != -ENXIO || now_usec(CLOCK_MONOTONIC) >= deadline)
                        return r;
                if (!said) {
                        log_info("waiting up to %u s for the rollback pool to appear", wait_sec);
                        said = true;
                }
                (void) usleep(250 * 1000);
        }
}

static const char *kernel_release(void) {
        static struct utsname u;

        return uname(&u) < 0 ? "unknown" : u.release;
}

/* Where a failed upgrade's volume is mounted for its automatic revert. */
#define AUTO_REVERT_DIR "/run/rollback-auto-revert"

/* Boot assessment (docs/boot-assessment.md): 1 when a failed upgrade was reverted and this boot must restart. */
static int assess_boot(struct pool *p, const char *volume, const struct rb_boot_report *rep) {
        _cleanup_free_ char *snapshot = NULL;
        int r;

        if (rep->trial == TRIAL_COUNTED) {
                log_info("%s: trial boot %u of %u after upgrade snapshot '%s'; it is good once "
                         "boot-complete.target is reached", volume, rep->trial_boots, rep->trial_limit,
                         rep->trial_snapshot);
                return 0;
        }
        if (rep->trial != TRIAL_REVERT)
                return 0;
        log_error("%s: %u boots in a row after upgrade snapshot '%s' were not marked good (none reached "
                  "boot-complete.target): reverting to it automatically", volume, rep->trial_boots,
                  rep->trial_snapshot);
        r = rb_auto_revert(p, volume, AUTO_REVERT_DIR, &snapshot);
        if (r < 0) {
                log_error_errno(r, "%s: the automatic revert to '%s' failed (%m); this boot goes on with the "
                                "upgrade, the next one tries again (rollbackctl revert by hand)", volume,
                                rep->trial_snapshot);
                return 0;
        }
        log_error("%s: reverted to snapshot '%s' with its /boot; rebooting into its kernel, which merges it",
                  volume, snapshot);
        return 1;
}

/*
 * Arms every volume of the pool, starting pending merges: the exit status
 * (see --help).  view: the snapshot this boot runs, whose boot is no trial.
 */
static int arm_volumes(struct pool *p, const char *view) {
        int r, failed = 0, blocked = 0, reverted = 0;
        size_t n;
        char **names;

        /* rb_boot_volume() rewrites the arrays: walk a copy of the names. */
        n = p->meta.n_volumes;
        names = calloc(n + 1, sizeof(char *));
        if (!names)
                return 1;
        for (size_t i = 0; i < n; i++)
                names[i] = strdup(p->meta.volumes[i].name);

        for (size_t i = 0; i < n; i++) {
                struct rb_boot_report rep;

                if (!names[i])
                        continue;
                r = rb_boot_volume(p, names[i], view == NULL, &rep);
                if (rep.written_unarmed)
                        log_error("%s: mounted read-write while its snapshots were not armed (a boot without the "
                                  "pool or without rollback: ext mount count %u, at most %u with rollback), so "
                                  "they missed writes: %u snapshot(s) marked invalid%s%s%s%s",
                                  names[i], rep.mount_count, rep.mount_count_max, rep.untracked,
                                  rep.revert_refused ? ", the pending revert of '" : "",
                                  rep.revert_refused ?: "", rep.revert_refused ? "' refused" : "",
                                  rep.merging && !rep.merge_started ?
                                          ", the merge under way goes on (stopped, the volume would stay half merged)" : "");
                if (r == -ENODEV)
                        log_warning("%s: not active, its snapshots are left as they are", names[i]);
                else if (r < 0 && rep.merge_blocked) {
                        log_error_errno(r, "%s: the merge of snapshot '%s' %s cannot be loaded (%m). "
                                        "The volume must not be mounted: %s. Fix the cause (the pool's "
                                        "device, the dm-rollback or dm-snapshot module) and reboot; "
                                        "rd.rollback=0 boots without rollback, marking the snapshots invalid%s.",
                                        names[i], rep.merging,
                                        rep.merge_started ? "asked for" : "under way",
                                        rep.merge_started ? "the revert stays pending for the next boot"
                                                          : "it is half merged",
                                        rep.merge_started ? "" : " and leaving the volume half merged");
                        blocked++;
                } else if (r < 0) {
                        log_error_errno(r, "%s: cannot arm its snapshots (%m): %u marked invalid",
                                        names[i], rep.invalidated);
                        failed++;
                } else if (rep.already)
                        log_info("%s: already armed", names[i]);
                else {
                        log_info("%s: %u snapshot(s) armed with %s targets", names[i], rep.armed,
                                 backend_to_string(rep.backend));
                        /* A kernel installed by an upgrade whose DKMS build failed: the COW format is the same. */
                        if (p->meta.settings.backend == BACKEND_AUTO && rep.backend == BACKEND_UPSTREAM)
                                log_warning("%s: no dm-rollback module for this kernel (%s; did its DKMS build "
                                            "fail?): the snapshots and merges go on with the upstream dm-snapshot "
                                            "targets, on the same COWs", names[i], kernel_release());
                        if (rep.merging)
                                log_info("%s: merging snapshot '%s' (%s)", names[i], rep.merging,
                                         rep.merge_started ? "revert requested" : "continuing");
                        if (rep.invalidated > 0)
                                log_error("%s: %u snapshot(s) could not be re-armed and are now invalid",
                                          names[i], rep.invalidated);
                        if (assess_boot(p, names[i], &rep) > 0)
                                reverted++;
                }
                free(rep.trial_snapshot);
                free(rep.merging);
                free(rep.revert_refused);
                free(names[i]);
        }
        free(names);
        /* 3: the hook stops the boot rather than mount a volume the merge has not finished with. */
        return blocked ? 3 : reverted ? 4 : failed ? 1 : 0;
}

/* sysexits.h's EX_TEMPFAIL: the hook runs --view again once udev has settled again. */
#define EXIT_TRY_AGAIN 75

/*
 * rd.rollback.boot=NAME: root is the view of snapshot NAME, made here, in
 * dracut's initqueue, since dracut waits for root before its pre-mount hook
 * (which then finds the volumes armed).  The volume is armed but not
 * mounted; a revert pending or a merge under way is left for a normal boot.
 */
static int boot_view(const char *pool, const char *name) {
        _cleanup_pool_ struct pool *p = NULL;
        _cleanup_close_ int lock = -1;
        _cleanup_free_ char *volume = NULL;
        const struct snapshot *s;
        const struct volume *v;
        struct rbdm_info info;
        int r;

        /* Before LVM has activated the pool's LV, it is missing (recorded) or not found (unrecorded). */
        r = rb_pool_open_locked(pool, &p, &lock);
        if (r == -ENXIO || r == -ENOMEDIUM)
                return EXIT_TRY_AGAIN;
        if (r < 0) {
                log_error_errno(r, "cannot boot snapshot '%s': cannot open the pool: %m", name);
                return 1;
        }
        s = pool_find_snapshot(p, name);
        if (!s) {
                log_error("cannot boot snapshot '%s': the pool has no such snapshot (deleted since the GRUB menu "
                          "was made?)", name);
                return 1;
        }
        /* Arming rewrites the pool's arrays: s is not kept past it. */
        volume = strdup(s->volume);
        if (!volume)
                return 1;
        if (rbdm_info(volume, &info) < 0 || !info.exists)
                return EXIT_TRY_AGAIN;
        v = pool_find_volume(p, volume);
        if (v && (v->revert || v->merging)) {
                log_error("cannot boot snapshot '%s': %s is to be reverted to '%s'; boot GRUB's default entry, "
                          "which merges it", name, volume, v->revert ?: v->merging);
                return 1;
        }
        /*
         * Another volume that failed to arm is said and left, as in a normal
         * boot; one whose merge cannot be loaded must not be mounted, which
         * the snapshot's fstab may ask for.  The snapshot's own volume shows
         * in its device: the view needs it.
         */
        r = arm_volumes(p, name);
        if (r == 3)
                return 1;
        r = rb_view_create(p, name);
        if (r < 0) {
                log_error_errno(r, "cannot boot snapshot '%s': its view cannot be made (%m)%s", name,
                                r == -ESTALE ? ": the snapshot is not valid" :
                                r == -ENOPKG ? ": no brd (RAM disk) module for this kernel" : "");
                return 1;
        }
        log_info("booting snapshot '%s' of %s through a view whose writes are discarded at shutdown; %s is "
                 "not mounted", name, volume, volume);
        return 0;
}

int main(int argc, char *argv[]) {
        static const struct option options[] = {
                { "help", no_argument,       NULL, 'h' },
                { "pool", required_argument, NULL, 'p' },
                { "hold", no_argument,       NULL, 'H' },
                { "wait", required_argument, NULL, 'w' },
                { "view", required_argument, NULL, 'v' },
                {}
        };
        _cleanup_pool_ struct pool *p = NULL;
        _cleanup_close_ int lock = -1;
        const char *pool = NULL, *view = NULL;
        unsigned wait_sec = 0;
        int c, r;

        log_set_program("rollback");
        log_open_kmsg();
        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        printf("Usage: rollback-boot [--pool DEVICE|UUID=UUID] [--wait SECONDS]\n"
                               "       rollback-boot --view SNAPSHOT [--pool DEVICE|UUID=UUID]\n"
                               "       rollback-boot --hold\n\n"
                               "Re-arms rollback's snapshots and starts a pending merge, before root is mounted.\n"
                               "--hold (at shutdown) keeps the snapshot devices open until root is unmounted.\n"
                               "The pool is the one recorded in " RB_POOL_ID_PATH " unless --pool says otherwise.\n"
                               "--wait: how long to wait for that pool's device to appear.\n"
                               "--view (rd.rollback.boot=SNAPSHOT, before root is waited for) arms the volumes\n"
                               "as above, this boot counted as no trial, and makes the view of SNAPSHOT that\n"
                               "root is mounted from: its writes are kept in RAM and gone at shutdown.\n"
                               "Exit status: 0 done, 1 failed (boot goes on), 3 root must not be mounted,\n"
                               "4 a failed upgrade was reverted: reboot (into the pre-upgrade kernel);\n"
                               "with --view 0 the view is made, 1 it cannot be, 75 the pool or the volume is\n"
                               "not up yet: try again.\n");
                        return 0;
                case 'p':
                        pool = optarg;
                        break;
                case 'w':
                        if (safe_atou(optarg, &wait_sec) < 0) {
                                log_error("invalid --wait '%s' (seconds)", optarg);
                                return 2;
                        }
                        break;
                case 'v':
                        view = optarg;
                        break;
                case 'H':
                        log_set_program("rollback-hold");
                        return hold_snapshots(argv[0]) < 0 ? 1 : 0;
                default:
                        return 2;
                }

        if (view)
                return boot_view(pool, view);
        r = open_pool_waiting(pool, wait_sec, &p, &lock);
        if (r == -ENOMEDIUM) {
                log_info("no pool found, nothing to do");
                return 0;
        }
        if (r == -ENXIO) {
                /* Whether a revert is pending is written on the pool: without it, root may not be mounted. */
                log_error("the rollback pool %s did not appear in %u s. A revert or merge may be pending on it, "
                          "so root is not mounted. Attach the pool's device and try again; or boot with "
                          "rd.rollback=0 to go on without rollback, after which the snapshots no longer match "
                          "the volume: delete them once the pool is back.",
                          pool ?: "recorded in " RB_POOL_ID_PATH, wait_sec);
                return 3;
        }
        if (r < 0) {
                log_error_errno(r, "cannot open the pool: %m; snapshots are not armed this boot");
                return 1;
        }
        if (p->foreign > 0)
                log_warning("ignoring %u other device(s) with a rollback pool signature; using %s",
                            p->foreign, p->path);

        return arm_volumes(p, NULL);
}
