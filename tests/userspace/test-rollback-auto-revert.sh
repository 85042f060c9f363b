# SPDX-License-Identifier: GPL-2.0-or-later
# Boot assessment (docs/boot-assessment.md), with /boot its own filesystem
# named in the root's fstab: an upgrade snapshot opens a trial; boots that
# are not marked good are counted before root is mounted, and the one after
# auto_revert_after of them reverts by itself (exit 4: reboot), /boot back
# first; the next boot merges, and root and /boot are as before the
# upgrade.  A good upgrade, marked good, is never reverted however many
# boots follow.  A failed health check reboots a trial boot.  A "reboot" is
# every dm device removed and LVM activating anew.
. ./lib.sh
. ./lib-userspace.sh
ctl="rollbackctl --no-daemon"

boot_sums() {
        (cd "${1:-/mnt/boot}" && find . ! -name . ! -path './lost+found*' | sort | xargs stat -c '%F %a %Y %N' &&
                find . -type f ! -path './lost+found/*' | sort | xargs md5sum)
}

mount_root() {
        must mount /dev/mapper/vg0-root /mnt
        must mount /dev/vdb /mnt/boot
}

# reboot_into WANT: root goes down, LVM activates, rollback-boot exits WANT.
reboot_into() {
        grep -q ' /mnt/boot ' /proc/mounts && must umount /mnt/boot
        grep -q ' /mnt ' /proc/mounts && must umount /mnt
        must dmsetup remove_all
        must lvm vgchange -q -ay vg0
        rollback-boot > /tmp/boot.log 2>&1
        rc=$?
        cat /tmp/boot.log
        [ "$rc" = "$1" ] || fail "rollback-boot exited $rc, not $1"
        # It never leaves the volume mounted: this boot mounts it once, as the next one checks.
        grep -q /dev/mapper/vg0-root /proc/mounts && fail "rollback-boot left the volume mounted"
}

trial_boots() {
        $ctl --json status > /tmp/status.json || fail "status --json"
        tr -d ' \n' < /tmp/status.json | sed -n 's/.*"trial":{"snapshot":"[^"]*","boots":\([0-9]*\).*/\1/p'
}

POOL_SIZE=100M
mkdir -p /run
make_lvm
populate
mkdir -p /mnt/boot
# Named by UUID, as installers write it; early boot resolves it with no udev links.
boot_uuid=5e1f0c2a-7b3d-4c8e-9a6f-0d2b4e6f8a1c
must mkfs.ext4 -q -F -U $boot_uuid /dev/vdb
must mount /dev/vdb /mnt/boot
echo "UUID=$boot_uuid /boot ext4 defaults 0 2" > /mnt/etc/fstab
mkdir -p /mnt/boot/grub
dd if=/dev/urandom of=/mnt/boot/vmlinuz-6.1.0-1 bs=64k count=16 2>/dev/null
fake_initramfs /mnt/boot/initrd.img-6.1.0-1 var/lib/dracut/hooks/pre-mount/10-rollback-pre-mount.sh
echo "set default=6.1.0-1" > /mnt/boot/grub/grub.cfg
sync
tree_sums /mnt > /tmp/sums-pre
boot_sums > /tmp/boot-pre

step "an upgrade snapshot opens a trial"
must $ctl init /dev/mapper/vg0-pool
must $ctl snapshot --name keep --size 16M vg0-root
[ -z "$(trial_boots)" ] || fail "a snapshot that is no upgrade's opened a trial"
must $ctl snapshot --upgrade --name up --size 48M vg0-root
[ "$(trial_boots)" = 0 ] || fail "no trial after an upgrade snapshot: $(cat /tmp/status.json)"

step "the upgrade: a new kernel that will not come up"
dd if=/dev/urandom of=/mnt/boot/vmlinuz-6.1.0-2 bs=64k count=16 2>/dev/null
rm /mnt/boot/initrd.img-6.1.0-1
echo "set default=6.1.0-2" > /mnt/boot/grub/grub.cfg
churn
sync

for i in 1 2 3; do
        step "trial boot $i of 3, never marked good"
        reboot_into 0
        grep -q "trial boot $i of 3 after upgrade snapshot 'up'" /tmp/boot.log || fail "boot $i not said to be a trial"
        [ "$(trial_boots)" = "$i" ] || fail "trial boots $(trial_boots), not $i"
        mount_root
        $ctl status | grep "on trial" || fail "status does not show the trial"
done

step "a failed health check reboots a trial boot (failed_check_reboot=1), or leaves it up (0)"
mkdir -p /tmp/bin
printf '#!/bin/sh\necho "$*" > /tmp/systemctl-called\n' > /tmp/bin/systemctl
chmod +x /tmp/bin/systemctl
PATH=/tmp/bin:$PATH $ctl trial-failed check-network.service 2> /tmp/err || fail "trial-failed: $(cat /tmp/err)"
grep -q "check-network.service failed on trial boot 3 of 3" /tmp/err || fail "trial-failed says: $(cat /tmp/err)"
[ "$(cat /tmp/systemctl-called 2>/dev/null)" = reboot ] || fail "trial-failed did not reboot"
rm /tmp/systemctl-called
must $ctl config failed_check_reboot=0
PATH=/tmp/bin:$PATH must $ctl trial-failed check-network.service
[ -e /tmp/systemctl-called ] && fail "trial-failed rebooted with failed_check_reboot=0"
must $ctl config failed_check_reboot=1

step "the boot after the third reverts by itself and restarts"
reboot_into 4
grep -q "reverting to it automatically" /tmp/boot.log || fail "the automatic revert is not said"
$ctl --json status > /tmp/status.json
tr -d ' \n' < /tmp/status.json | grep -q '"revert_pending":"up"' || fail "no revert to up pending"
tr -d ' \n' < /tmp/status.json | grep -q '"auto_reverted":{"snapshot":"up","boots":3}' ||
        fail "status --json does not say the revert was automatic: $(cat /tmp/status.json)"
[ -z "$(trial_boots)" ] || fail "the trial is still open after the revert"
$ctl status | head -1 | grep -q "^AUTOMATIC REVERT: vg0-root was reverted to snapshot up" ||
        fail "status does not start with the automatic revert: $($ctl status)"
must mount /dev/vdb /snap
boot_sums /snap | cmp -s - /tmp/boot-pre || fail "/boot is not the pre-upgrade one"
must umount /snap

step "the next boot merges: root is as before the upgrade, the other snapshot survives"
reboot_into 0
grep -q "merging snapshot 'up' (revert requested)" /tmp/boot.log || fail "the boot did not start the merge"
must $ctl wait --timeout 120
mount_root
tree_sums /mnt > /tmp/sums-now
grep -v ' \./var/lib/rollback/' /tmp/sums-now | cmp -s - /tmp/sums-pre || fail "root is not the pre-upgrade one after the merge"
boot_sums | cmp -s - /tmp/boot-pre || fail "/boot changed after the merge"
[ "$(state keep)" = active ] || fail "snapshot keep is $(state keep) after the merge"

step "a good upgrade, marked good, is never reverted"
must $ctl snapshot --upgrade --name up2 --size 48M vg0-root
churn
reboot_into 0
$ctl mark-good vg0-root > /tmp/out || fail "mark-good failed"
grep -q "upgrade of snapshot up2 is good" /tmp/out || fail "mark-good did not end the trial of up2: $(cat /tmp/out)"
for i in 1 2 3 4 5; do
        reboot_into 0
        grep -q "trial boot" /tmp/boot.log && fail "boot $i after mark-good counted as a trial"
done
[ -z "$(trial_boots)" ] || fail "a trial is open after mark-good"
[ "$(state up2)" = active ] || fail "up2 is $(state up2)"
echo "PASS"
