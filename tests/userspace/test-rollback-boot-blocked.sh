# SPDX-License-Identifier: GPL-2.0-or-later
# A merge that cannot be loaded at boot stops the boot instead of letting a
# half-merged (or untracked) root be mounted: rollback-boot exits 3 with a
# clear message, nothing is invalidated, and the next boot that has the
# targets again merges as asked.  Both a revert asked for and a merge under
# way.  A "reboot" is every dm device removed and LVM activating anew.
. ./lib.sh
. ./lib-userspace.sh
ctl="rollbackctl --no-daemon"

reboot_volumes() {
        must dmsetup remove_all
        must lvm vgchange -q -ay vg0
}

# boot_without_targets WHAT: rollback-boot finds neither dm-rollback nor dm-snapshot.
boot_without_targets() {
        must rmmod dm_rollback
        must rmmod dm_snapshot
        must mv /lib/modules/dm-rollback.ko /lib/modules/dm-snapshot.ko /tmp/
        rollback-boot 2> /tmp/boot.err
        rc=$?
        cat /tmp/boot.err
        [ $rc = 3 ] || fail "rollback-boot exited $rc, not 3, with $1 that cannot be loaded"
        grep -q "must not be mounted" /tmp/boot.err || fail "no message that the volume must not be mounted"
        dmsetup table vg0-root | grep -q " linear " || fail "vg0-root is not left as LVM made it"
        dmsetup ls | grep -q rollback- && fail "devices left: $(dmsetup ls)"
        grep -q "$2" /tmp/boot.err || fail "the message does not say '$2'"
        grep -q "invalid" /tmp/boot.err && grep -q "marked invalid" /tmp/boot.err &&
                fail "snapshots were invalidated"
        must insmod /tmp/dm-snapshot.ko
        must insmod /tmp/dm-rollback.ko
        must mv /tmp/dm-rollback.ko /tmp/dm-snapshot.ko /lib/modules/
}

make_lvm
populate
# Enough changed to merge for a while: the merge is caught under way below.
dd if=/dev/urandom of=/mnt/usr/lib/big bs=1M count=6 2>/dev/null
sync
tree_sums /mnt > /tmp/sums-pre
must $ctl init /dev/mapper/vg0-pool
must $ctl snapshot --name pre vg0-root
churn
dd if=/dev/urandom of=/mnt/usr/lib/big bs=1M count=6 conv=notrunc 2>/dev/null
sync
must $ctl snapshot --name post vg0-root
must $ctl revert pre
umount /mnt

step "a revert asked for, no targets at boot: the boot stops, the revert stays pending"
reboot_volumes
boot_without_targets "a revert" "the revert stays pending"

# rollbackctl is not run while the volume is unarmed: it would (rightly)
# take that for a boot without rollback and invalidate the snapshots.
step "the next boot merges, post armed; cut off under way"
reboot_volumes
must rollback-boot
uses_target vg0-root rollback-merge || fail "no rollback-merge at boot: $(dmsetup table vg0-root)"
uses_target rollback-post rollback-snap || fail "post is not armed: it was invalidated"
must dmsetup message vg0-root 0 merge_throttle 500
left=$(merge_left vg0-root) || fail "no merge"
# What follows needs only the merge recorded as under way, which
# rollback-boot does before it starts it; usually it is half way too.
echo "cut off with $left sectors left"

step "a merge under way, no targets at boot: the boot stops, the merge stays"
reboot_volumes
boot_without_targets "a merge under way" "it is half merged"

step "the next boot finishes the merge"
reboot_volumes
must rollback-boot
uses_target vg0-root rollback-merge || fail "the merge was not loaded again"
uses_target rollback-post rollback-snap || fail "post is not armed: it was invalidated"
left2=$(merge_left vg0-root) || fail "no merge"
# One chunk of slack: the count rises by one while a batch is prepared.
[ "$left2" -le $((left + 8)) ] || fail "the merge started over: $left2 sectors left, $left before"
must dmsetup message vg0-root 0 merge_throttle 0
must $ctl wait --timeout 300
must mount /dev/mapper/vg0-root /mnt
tree_sums /mnt > /tmp/sums-now
cmp -s /tmp/sums-pre /tmp/sums-now || fail "the merged volume is not the pre state"
umount /mnt

step "a merge under way, then a boot without rollback that writes: the merge is given up, never resumed"
must $ctl revert post
reboot_volumes
must rollback-boot
uses_target vg0-root rollback-merge || fail "no merge of post"
must dmsetup message vg0-root 0 merge_throttle 500
reboot_volumes
must mount /dev/mapper/vg0-root /mnt
echo "written with rd.rollback=0" > /mnt/unmerged
umount /mnt
$ctl status > /tmp/status || fail "status"
cat /tmp/status
head -n 1 /tmp/status | grep -q "WARNING: snapshot post of vg0-root is invalid" ||
        fail "status does not begin with the invalid snapshot"
[ "$($ctl --json list | json_field state)" = invalid ] || fail "post is not invalid: $($ctl list)"
$ctl --json status | grep -q '"merge": {' && fail "a merge is still recorded"
reboot_volumes
must rollback-boot
uses_target vg0-root rollback-merge && fail "the given-up merge was resumed over the new writes"
must mount /dev/mapper/vg0-root /mnt
grep -q "rd.rollback=0" /mnt/unmerged || fail "the write of the boot without rollback is lost"

step "a merge recorded but not loaded (cut off as it finished): wait says so, it does not wait forever"
must $ctl delete post
must $ctl snapshot --name third vg0-root
dd if=/dev/urandom of=/mnt/usr/lib/big bs=1M count=6 conv=notrunc 2>/dev/null
umount /mnt
must $ctl revert third --now
must dmsetup message vg0-root 0 merge_throttle 500
must dmsetup suspend vg0-root
must dmsetup reload vg0-root --table "0 $(sectors /dev/mapper/vg0-root) rollback-origin /dev/mapper/rollback-vg0-root-real"
must dmsetup resume vg0-root
timeout 60 $ctl wait 2> /tmp/err
rc=$?
cat /tmp/err
[ $rc = 4 ] || fail "wait exited $rc, not 4"
grep -q "next boot" /tmp/err || fail "wait does not say the merge goes on at the next boot"
pass
