/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Evidence that a volume was written while its snapshots were not armed,
 * readable before root is mounted and without the pool: the mount count
 * ext2/3/4 keeps in its superblock (s_mnt_count), which the kernel raises at
 * every read-write mount and every remount from read-only to read-write.
 * See docs/states.md, "Writes the pool never sees".
 */

#include <stdbool.h>
#include <sys/types.h>

#include "pool.h"

/* s_mnt_count is 16 bits: a record may say one more than it can hold. */
#define EXT_MOUNT_COUNT_MAX 0xffffu

/* The mount count of the ext2/3/4 filesystem on fd; -ENOMEDIUM when fd holds none. */
int ext_mount_count(int fd, unsigned *ret);

/*
 * The mount count of the filesystem on the block device devnum, as
 * ext_mount_count(); -EAGAIN when it or a device beneath it is suspended
 * (the read would hang).
 */
int devnum_mount_count(dev_t devnum, unsigned *ret);

/* > 0 when the filesystem on devnum is mounted read-write now (its superblock options in mountinfo). */
int devnum_mounted_rw(dev_t devnum);

/*
 * Records in v the highest mount count its filesystem may show at the next
 * arming, the volume being armed now (every write tracked): the count now,
 * plus one for a read-write mount still to come when it is not mounted
 * read-write.  Unknown when the volume holds no ext filesystem or cannot be
 * read; left as it is while the volume is suspended.  Returns > 0 when the
 * record changed.
 */
int volume_record_mount_count(struct volume *v, dev_t devnum);
