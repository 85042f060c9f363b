# SPDX-License-Identifier: GPL-2.0-or-later
# rollback-boot across reboots (driven by boot-host; arg: the phase).
#   setup    LVM, pool, snapshots pre and post around a change, revert pre
#   merge    as early boot: LVM activates, rollback-boot starts the merge;
#            the volume mounted while merging shows the pre state at once
#   again    the next boot: post is re-armed, all is as it was
#   broken   no snapshot targets at boot: post is marked invalid; then a
#            new snapshot, with the targets back
#   unarmed  booted without the hook: the volume is written untracked, and
#            the snapshot is reported invalid
. ./lib.sh
. ./lib-userspace.sh
phase=$1
ctl="rollbackctl --no-daemon"
mkdir -p /tmp/state /mnt /snap

save_state() { tar cf - -C /tmp/state . | dd of=/dev/vdb bs=1M conv=fsync 2>/dev/null; }
load_state() { dd if=/dev/vdb bs=1M 2>/dev/null | tar xf - -C /tmp/state; }

# What LVM does at boot, then what the dracut hook does.
early_boot() {
        must lvm vgchange -q -ay vg0
        rollback-boot
        echo "rollback-boot exit $?"
}

case $phase in
setup)
        make_lvm
        populate
        tree_sums /mnt > /tmp/state/sums-pre
        must $ctl init /dev/mapper/vg0-pool
        must $ctl snapshot --name pre vg0-root
        churn
        tree_sums /mnt > /tmp/state/sums-post
        must $ctl snapshot --name post vg0-root
        must $ctl revert pre
        $ctl status
        umount /mnt
        md5sum < /dev/mapper/rollback-post > /tmp/state/post-device
        save_state
        ;;
merge)
        load_state
        early_boot
        dmsetup table vg0-root | grep -q " snapshot-merge \| rollback-merge " || fail "no merge table at boot"
        dmsetup table rollback-post | grep -q " snapshot \| rollback-snap " || fail "post is not armed"
        $ctl status
        step "mounted while merging, the volume shows the pre state"
        must mount /dev/mapper/vg0-root /mnt
        tree_sums /mnt > /tmp/sums-now
        cmp -s /tmp/state/sums-pre /tmp/sums-now || fail "the merging volume does not show the pre state"
        echo "written during the merge" > /mnt/during-merge
        sync
        must $ctl wait --timeout 300
        $ctl status
        dmsetup info rollback-pre > /dev/null 2>&1 && fail "pre's devices are left"
        [ "$($ctl --json list | json_field name)" = post ] || fail "post should be the only snapshot"
        tree_sums /mnt | grep -v during-merge > /tmp/sums-now
        cmp -s /tmp/state/sums-pre /tmp/sums-now || fail "the merged volume is not the pre state"
        umount /mnt
        must e2fsck -fn /dev/mapper/vg0-root
        [ "$(md5sum < /dev/mapper/rollback-post)" = "$(cat /tmp/state/post-device)" ] || fail "post changed"
        ;;
again)
        load_state
        early_boot
        dmsetup table vg0-root | grep -q " snapshot-origin \| rollback-origin " || fail "vg0-root is no origin"
        [ "$(md5sum < /dev/mapper/rollback-post)" = "$(cat /tmp/state/post-device)" ] || fail "post changed"
        must mount /dev/mapper/vg0-root /mnt
        grep -q merge /mnt/during-merge || fail "the write made during the merge is lost"
        tree_sums /mnt | grep -v during-merge > /tmp/sums-now
        cmp -s /tmp/state/sums-pre /tmp/sums-now || fail "the volume changed across the reboot"
        umount /mnt
        must $ctl snapshot --name third vg0-root
        ;;
broken)
        load_state
        must lvm vgchange -q -ay vg0
        rmmod dm_rollback 2>/dev/null
        rmmod dm_snapshot || skip "dm-snapshot cannot be unloaded here"
        rollback-boot 2> /tmp/boot.err && fail "rollback-boot succeeded without snapshot targets"
        cat /tmp/boot.err
        grep -q "2 marked invalid" /tmp/boot.err || fail "the invalidation was not reported"
        [ "$($ctl --json list | json_field state | tr '\n' ' ')" = "invalid invalid " ] ||
                fail "snapshots not marked invalid: $($ctl list)"
        expect_rc 6 $ctl revert post
        dmsetup table vg0-root | grep -q " linear " || fail "vg0-root is not plain"
        must insmod /lib/modules/dm-snapshot.ko
        must insmod /lib/modules/dm-rollback.ko
        must $ctl delete post
        must $ctl delete third
        must $ctl snapshot --name fourth vg0-root
        ;;
unarmed)
        load_state
        must lvm vgchange -q -ay vg0
        must mount /dev/mapper/vg0-root /mnt
        echo "written with no snapshot armed" > /mnt/untracked
        umount /mnt
        $ctl list
        [ "$($ctl --json list | json_field state)" = invalid ] || fail "fourth is not reported invalid"
        expect_rc 6 $ctl revert fourth
        ;;
esac
pass
