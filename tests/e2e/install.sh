# SPDX-License-Identifier: GPL-2.0-or-later
# Guest (busybox harness): installs the image as an installer would, on the
# disk the host partitioned.  LAYOUT (the argument) is
#   directory: vda1 is LVM's, /boot is a directory of the root
#   separate:  vda1 is /boot (ext4), vda2 is LVM's
# then GRUB into the MBR (grub-install and update-grub of the image itself,
# run in it), and rollback's pool on its own LV.
#   vda: the disk   vdb: root.ext4   vdc: boot.ext4 (separate)
. ./lib.sh
layout=$1
pv=/dev/vda1
[ "$layout" = separate ] && pv=/dev/vda2
step "LVM on $pv: a root LV and a pool LV"
must lvm pvcreate -q "$pv"
must lvm vgcreate -q vg0 "$pv"
must lvm lvcreate -q -y -L 3600M -n root vg0
must lvm lvcreate -q -y -l 100%FREE -n pool vg0
step "copying the filesystems"
must dd if=/dev/vdb of=/dev/mapper/vg0-root bs=4M 2>/dev/null
must e2fsck -fy /dev/mapper/vg0-root > /dev/null
must resize2fs /dev/mapper/vg0-root 2>/dev/null
mkdir -p /mnt
must mount /dev/mapper/vg0-root /mnt
if [ "$layout" = separate ]; then
        must dd if=/dev/vdc of=/dev/vda1 bs=4M 2>/dev/null
        must e2fsck -fy /dev/vda1 > /dev/null
        must resize2fs /dev/vda1 2>/dev/null
        must mount /dev/vda1 /mnt/boot
fi
must mount --bind /dev /mnt/dev
must mount -t proc proc /mnt/proc
must mount -t sysfs sys /mnt/sys
must mount -t tmpfs run /mnt/run
step "GRUB"
must chroot /mnt env DM_DISABLE_UDEV=1 grub-install /dev/vda
must chroot /mnt env DM_DISABLE_UDEV=1 update-grub
grep -E '^[[:space:]]*linux' /mnt/boot/grub/grub.cfg | head -n 2
umount /mnt/run /mnt/sys /mnt/proc /mnt/dev
[ "$layout" = separate ] && must umount /mnt/boot
must umount /mnt
step "the rollback pool"
must rollbackctl --no-daemon init /dev/mapper/vg0-pool
# A deliberately small first COW: the upgrade's writes outgrow it, and
# rollbackd must grow it while writes wait rather than lose it.
must rollbackctl --no-daemon config snapshot_percent=1
lvm lvs
pass
