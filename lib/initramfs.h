/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* The file rollback's dracut module installs: an initramfs without it cannot start a merge. */
#define RB_INITRAMFS_HOOK "rollback-pre-mount.sh"

/*
 * Whether the initramfs at path holds a file whose path ends in name: 1
 * yes, 0 no; -ENOPKG when its decompressor is not installed here and
 * -EMEDIUMTYPE when it is in no format known here (cannot tell).
 */
int initramfs_has(const char *path, const char *name);
