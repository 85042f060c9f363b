/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The one typed device-mapper API of the project, over libdevmapper.
 * Returns >= 0 or -errno; tables are text, one "start length target args"
 * line per target.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define RB_DM_UUID_PREFIX "ROLLBACK-"
#define RB_DM_NAME_PREFIX "rollback-"

struct rbdm_info {
        bool exists;
        bool suspended;
        bool live_table;
        bool inactive_table;
        int32_t open_count;
        uint32_t major;
        uint32_t minor;
        char uuid[129];
};

int rbdm_info(const char *name, struct rbdm_info *ret);
int rbdm_name_from_devnum(dev_t devnum, char **ret_name);
int rbdm_create(const char *name, const char *uuid);
int rbdm_load(const char *name, const char *table);
int rbdm_clear(const char *name);
int rbdm_suspend(const char *name);
int rbdm_resume(const char *name);
int rbdm_remove(const char *name);
/*
 * Resumes without waiting for udev: while a mounted volume is suspended
 * (frozen), udev's work may need that filesystem, so the cookie is waited
 * for only once everything is resumed.
 */
int rbdm_resume_deferred(const char *name, uint32_t *cookie);
int rbdm_remove_deferred(const char *name, uint32_t *cookie);
/* Waits for udev to finish with cookie, for RBDM_UDEV_TIMEOUT_SEC at most (then -ETIMEDOUT). */
#define RBDM_UDEV_TIMEOUT_SEC 30
int rbdm_udev_wait(uint32_t cookie);
/*
 * Device-mapper events of any device (a table event such as a snapshot
 * overflowing, a resume, a removal): rbdm_event_open() returns an fd of
 * /dev/mapper/control that polls readable once an event happened after it
 * was last armed; rbdm_event_arm() arms it again.
 */
int rbdm_event_open(void);
int rbdm_event_arm(int fd);
/*
 * The one place where a device is suspended.  Loads table (if any) as the
 * inactive table, suspends the device with memory locked, runs step (which
 * may load a table or change the devices beneath), and resumes.  If the
 * suspend, the step or the resume fails, the device is resumed on its old
 * table.  With cookie set, the resume does not wait for udev (see
 * rbdm_resume_deferred).
 */
struct rbdm_swap {
        const char *table;
        int (*step)(void *userdata);
        void *userdata;
        uint32_t *cookie;
};
int rbdm_swap(const char *name, const struct rbdm_swap *swap);
/* rbdm_swap() to a new table and nothing else. */
int rbdm_replace(const char *name, const char *table);
/* status = false: the table; true: the status lines. */
int rbdm_table(const char *name, bool status, char **ret);
int rbdm_message(const char *name, const char *message);
int rbdm_has_target(const char *target);
/* "major:minor" of a device, for table lines. */
int rbdm_devt(const char *name, char ret[32]);
uint64_t rbdm_table_sectors(const char *table);
/* A dm attribute of a block device by kernel name ("dm-3"), from sysfs: no ioctl, so it never blocks. */
bool rbdm_blocks_reads(const char *kname);
int rbdm_sysfs(const char *kname, const char *attr, char *buf, size_t size);
/* The target name of the first line of a table ("" when empty). */
int rbdm_table_target(const char *table, char ret[32]);
