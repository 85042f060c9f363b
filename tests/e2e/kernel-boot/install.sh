# SPDX-License-Identifier: GPL-2.0-or-later
# Guest (busybox harness): lays out the disk as an installer would, LVM with a
# root LV and a pool LV, and copies the root filesystem image onto the LV.
#   vda: the disk   vdb: root.ext4
. ./lib.sh
must lvm pvcreate -q /dev/vda
must lvm vgcreate -q vg0 /dev/vda
must lvm lvcreate -q -y -L 1400M -n root vg0
must lvm lvcreate -q -y -L 700M -n pool vg0
step "copying the root filesystem"
must dd if=/dev/vdb of=/dev/mapper/vg0-root bs=4M 2>/dev/null
must e2fsck -fy /dev/mapper/vg0-root > /dev/null
must resize2fs /dev/mapper/vg0-root 2>/dev/null
step "the rollback pool"
must rollbackctl --no-daemon init /dev/mapper/vg0-pool
# A deliberately small first COW (14 MiB): the upgrade's writes outgrow it,
# and rollbackd must grow it while writes wait rather than lose it.
must rollbackctl --no-daemon config snapshot_percent=1
lvm lvs
pass
