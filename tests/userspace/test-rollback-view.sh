# SPDX-License-Identifier: GPL-2.0-or-later
# Booting a snapshot without merging it (docs/boot.md, "Booting a
# snapshot"), as GRUB's "Rollback snapshots" entry does with
# rd.rollback.boot=NAME: early boot arms the volume, counts no trial boot,
# and makes the snapshot's view, which reads as the snapshot and keeps its
# writes in RAM.  After such a boot the snapshot, the volume and the trial
# are as they were.  A pending revert or an unknown snapshot is refused.  A
# "reboot" is every dm device removed and LVM activating anew.
. ./lib.sh
. ./lib-userspace.sh
ctl="rollbackctl --no-daemon"

reboot_volumes() {
        grep -q ' /mnt ' /proc/mounts && must umount /mnt
        must dmsetup remove_all
        must lvm vgchange -q -ay vg0
}

# view_refused NAME WHY: rollback-boot --view NAME exits 1, saying WHY, and makes no view.
view_refused() {
        rollback-boot --view "$1" > /tmp/boot.log 2>&1
        rc=$?
        cat /tmp/boot.log
        [ $rc = 1 ] || fail "rollback-boot --view $1 exited $rc, not 1"
        grep -qF "$2" /tmp/boot.log || fail "the refusal does not say why"
        dmsetup info "rollback-$1-view" > /dev/null 2>&1 && fail "a view of $1 was made"
}

trial_boots() {
        $ctl --json status | tr -d ' \n' | sed -n 's/.*"trial":{"snapshot":"[^"]*","boots":\([0-9]*\).*/\1/p'
}

POOL_SIZE=100M
mkdir -p /run
make_lvm
populate
tree_sums /mnt > /tmp/sums-pre

step "an upgrade snapshot, then the upgrade"
must $ctl init /dev/mapper/vg0-pool
must $ctl snapshot --upgrade --name up --size 32M vg0-root
churn
tree_sums /mnt > /tmp/sums-post
must umount /mnt
snap_sum=$(md5sum < /dev/mapper/rollback-up)
vol_sum=$(md5sum < /dev/mapper/vg0-root)

step "an unknown snapshot cannot be booted"
reboot_volumes
view_refused nosuch "the pool has no such snapshot"

step "before LVM activates the pool's LV, the view waits (exit 75: the hook tries again)"
reboot_volumes
must lvm lvchange -q -an vg0/pool
for recorded in yes no; do
        # An image made elsewhere may have no pool recorded: then no pool is found yet.
        [ $recorded = no ] && mv /etc/rollback/pool-uuid /tmp/pool-uuid
        rollback-boot --view up > /tmp/boot.log 2>&1
        rc=$?
        [ $recorded = no ] && mv /tmp/pool-uuid /etc/rollback/pool-uuid
        [ $rc = 75 ] || fail "rollback-boot --view up without the pool (recorded: $recorded) exited $rc, not 75: $(cat /tmp/boot.log)"
done
must lvm lvchange -q -ay vg0/pool

step "booting snapshot up: the volume armed, no trial counted, root is the view"
# The RAM disk for the view's writes, as modprobe would load it (the guest has no modprobe).
[ -e /sys/module/brd ] || must insmod /lib/modules/brd.ko rd_nr=1 rd_size=65536 max_part=0
rollback-boot --view up > /tmp/boot.log 2>&1
rc=$?
cat /tmp/boot.log
[ $rc = 0 ] || fail "rollback-boot --view up exited $rc"
grep -q "booting snapshot 'up' of vg0-root through a view" /tmp/boot.log || fail "the view boot is not said"
uses_target vg0-root rollback-origin || fail "vg0-root is not armed: $(dmsetup table vg0-root)"
uses_target rollback-up-view snapshot || fail "the view is not a snapshot: $(dmsetup table rollback-up-view)"
dmsetup table rollback-up-view | grep -q " N 8$" || fail "the view's store is not transient"
[ "$(trial_boots)" = 0 ] || fail "the view boot was counted as trial boot $(trial_boots)"
# dracut's pre-mount hook runs the early-boot step again: nothing more to do, still no trial.
rollback-boot > /tmp/boot.log 2>&1 || fail "rollback-boot after the view: $(cat /tmp/boot.log)"
grep -q "already armed" /tmp/boot.log || fail "pre-mount did more than find the volume armed: $(cat /tmp/boot.log)"
[ "$(trial_boots)" = 0 ] || fail "pre-mount counted the view boot as trial boot $(trial_boots)"

step "the view reads as the snapshot, and takes writes"
[ "$(md5sum < /dev/mapper/rollback-up-view)" = "$snap_sum" ] || fail "the view does not read as the snapshot"
snapshot_matches /dev/mapper/rollback-up-view /tmp/sums-pre || fail "the view does not hold the pre-upgrade files"
must mount /dev/mapper/rollback-up-view /snap
echo "written while the snapshot was booted" > /snap/etc/pkg-version
dd if=/dev/urandom of=/snap/usr/lib/view.so bs=64k count=32 2>/dev/null
must umount /snap
[ "$(md5sum < /dev/mapper/rollback-up)" = "$snap_sum" ] || fail "writing the view changed the snapshot"

step "the next boot: the view's writes are gone, snapshot and volume as they were"
reboot_volumes
rollback-boot > /tmp/boot.log 2>&1 || fail "the next boot: $(cat /tmp/boot.log)"
grep -q "trial boot 1 of 3 after upgrade snapshot 'up'" /tmp/boot.log || fail "the next boot is not trial 1"
[ "$(md5sum < /dev/mapper/rollback-up)" = "$snap_sum" ] || fail "the snapshot changed"
[ "$(md5sum < /dev/mapper/vg0-root)" = "$vol_sum" ] || fail "the volume changed"
snapshot_matches /dev/mapper/vg0-root /tmp/sums-post || fail "the volume lost the upgrade"

step "the snapshot's GRUB entry: in list, gone once its snapshot is"
# As a snapshot of root makes them (the guest's root is no volume).
for d in up gone alien; do
        mkdir -p /boot/rollback/$d
        : > /boot/rollback/$d/vmlinuz
        : > /boot/rollback/$d/initrd.img
        echo 6.1.0-50-amd64 > /boot/rollback/$d/release
        echo "$d, Linux 6.1.0-50-amd64" > /boot/rollback/$d/title
done
# alien is a snapshot of another pool: this one's refresh leaves it alone.
echo 0d1c2b3a-0000-4000-8000-000000000000 > /boot/rollback/alien/pool
$ctl --json list > /tmp/list.json || fail "list"
grep -q '"boot_entry_kernel": "6.1.0-50-amd64"' /tmp/list.json || fail "list does not show up's entry: $(cat /tmp/list.json)"
[ -e /boot/rollback/up/title ] || fail "the entry of an active snapshot went"
[ -e /boot/rollback/gone ] && fail "the entry of a snapshot not in the pool was kept"
[ -e /boot/rollback/alien/title ] || fail "the entry of another pool's snapshot went"
rm -r /boot/rollback/alien
# GRUB's submenu sources this menu: up's entry boots its view with its kernel.
grep -q "^menuentry 'up, Linux 6.1.0-50-amd64' --id 'rollback-up' {" /boot/rollback/.grub.cfg &&
        grep -q "^	linux \$rollback_boot/rollback/up/vmlinuz root=/dev/mapper/rollback-up-view ro rd.rollback.boot=up \$rollback_cmdline$" \
                /boot/rollback/.grub.cfg || fail "GRUB's menu of snapshots: $(cat /boot/rollback/.grub.cfg)"
grep -q "rollback-gone" /boot/rollback/.grub.cfg && fail "GRUB's menu still offers a snapshot not in the pool"
# GRUB cannot clear a one-time entry in an environment block on device-mapper.
mkdir -p /boot/grub
must mount -o ro,noload /dev/mapper/rollback-up /boot/grub
expect_rc 1 $ctl boot up
grep -q "on LVM or RAID" /tmp/err || fail "boot with GRUB's directory on device-mapper: $(cat /tmp/err)"
must umount /boot/grub

step "a pending revert is left to a normal boot"
must $ctl revert up
expect_rc 4 $ctl boot up
grep -q "is to be reverted to up" /tmp/err || fail "boot with a revert pending: $(cat /tmp/err)"
reboot_volumes
view_refused up "vg0-root is to be reverted to 'up'; boot GRUB's default entry"

step "the normal boot merges it, and its entry goes with it"
rollback-boot > /tmp/boot.log 2>&1 || fail "the normal boot: $(cat /tmp/boot.log)"
must $ctl wait --timeout 120
[ -e /boot/rollback/up ] && fail "the entry of the merged snapshot was kept"
grep -q "rollback-up" /boot/rollback/.grub.cfg && fail "GRUB's menu still offers the merged snapshot"
pass
