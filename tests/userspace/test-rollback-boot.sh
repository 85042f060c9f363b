# SPDX-License-Identifier: GPL-2.0-or-later
# rollback-boot across reboots (driven by boot-host; arg: the phase).
#   setup    LVM, pool, snapshots pre and post around a change, revert pre
#   merge    as early boot: LVM activates, rollback-boot starts the merge;
#            the volume mounted while merging (throttled, so it still is)
#            shows the pre state at once
#   again    the next boot: post is re-armed, all is as it was
#   broken   no snapshot targets at boot (modules unloaded, their files
#            gone): post is marked invalid; then a new snapshot, with the
#            targets back
#   unarmed  booted without the hook: the volume is written untracked, and
#            the snapshot is reported invalid
#   nomodule a new snapshot fifth, a change, a revert of fifth pending
#   nomodule-boot  a kernel without dm-rollback (its DKMS build failed):
#            rollback-boot says so and merges on the upstream targets
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
        must $ctl snapshot --name pre --size 16M vg0-root
        uses_target vg0-root rollback-origin || fail "vg0-root is not a rollback-origin"
        uses_target rollback-pre rollback-snap || fail "rollback-pre is not a rollback-snap"
        churn
        # Enough to merge for several batches of 256 chunks.
        dd if=/dev/urandom of=/mnt/usr/lib/big.so bs=1M count=6 conv=fsync 2>/dev/null
        tree_sums /mnt > /tmp/state/sums-post
        must $ctl snapshot --name post --size 16M vg0-root
        must $ctl revert pre
        $ctl status
        umount /mnt
        checksum /dev/mapper/rollback-post > /tmp/state/post-device || fail "cannot read snapshot post"
        save_state
        ;;
merge)
        load_state
        must lvm vgchange -q -ay vg0
        # The merge would be done before dmsetup could throttle it: until it
        # is throttled, its writes wait in a suspended device under the volume.
        must dmsetup create gate --table "$(dmsetup table vg0-root)"
        must dmsetup reload vg0-root --table "0 $(sectors /dev/mapper/gate) linear /dev/mapper/gate 0"
        must dmsetup resume vg0-root
        must dmsetup suspend gate
        # Named: the search for the pool would read the held volume.  In the
        # background: another merge target could block it until the gate opens.
        rollback-boot --pool /dev/mapper/vg0-pool &
        boot=$!
        for i in $(seq 150); do
                uses_target vg0-root rollback-merge && break
                sleep 0.2
        done
        if uses_target vg0-root rollback-merge; then
                initial=$(merge_left vg0-root)
                # 128 KiB/s: a batch of 1 MiB, then 8 s of sleep.
                must dmsetup message vg0-root 0 merge_throttle 128
        fi
        must dmsetup resume gate
        wait $boot
        echo "rollback-boot exit $?"
        uses_target vg0-root rollback-merge || fail "no rollback-merge table at boot"
        uses_target rollback-post rollback-snap || fail "post is not armed as a rollback-snap"
        [ -n "$initial" ] || fail "no merge at boot"
        [ "$initial" -ge $((3 * 256 * 8)) ] || fail "only $initial sectors to merge: not several batches"
        $ctl status
        step "mounted while merging, the volume shows the pre state"
        left=$initial
        for i in $(seq 100); do
                left=$(merge_left vg0-root) || fail "no merge running"
                [ "$left" -lt "$initial" ] && break
                sleep 0.2
        done
        [ "$left" -gt 0 ] && [ "$left" -lt "$initial" ] || fail "merge not running ($left of $initial left)"
        echo "merging: $left of $initial sectors left"
        must mount /dev/mapper/vg0-root /mnt
        tree_sums /mnt > /tmp/sums-now
        cmp -s /tmp/state/sums-pre /tmp/sums-now || fail "the merging volume does not show the pre state"
        echo "written during the merge" > /mnt/during-merge
        sync
        left=$(merge_left vg0-root) || fail "no merge running"
        [ "$left" -gt 0 ] && [ "$left" -lt "$initial" ] || fail "merge done before the checks ($left of $initial left)"
        echo "still merging: $left of $initial sectors left"
        must dmsetup message vg0-root 0 merge_throttle 0
        must $ctl wait --timeout 300
        $ctl status
        dmsetup info rollback-pre > /dev/null 2>&1 && fail "pre's devices are left"
        [ "$($ctl --json list | json_field name)" = post ] || fail "post should be the only snapshot"
        tree_sums /mnt | grep -v during-merge > /tmp/sums-now
        cmp -s /tmp/state/sums-pre /tmp/sums-now || fail "the merged volume is not the pre state"
        umount /mnt
        must e2fsck -fn /dev/mapper/vg0-root
        same_sum /dev/mapper/rollback-post "$(cat /tmp/state/post-device)" "post changed"
        uses_target vg0-root rollback-origin || fail "vg0-root is not a rollback-origin after the merge"
        ;;
again)
        load_state
        early_boot
        uses_target vg0-root rollback-origin || fail "vg0-root is not a rollback-origin"
        uses_target rollback-post rollback-snap || fail "post is not armed as a rollback-snap"
        same_sum /dev/mapper/rollback-post "$(cat /tmp/state/post-device)" "post changed"
        must mount /dev/mapper/vg0-root /mnt
        grep -q merge /mnt/during-merge || fail "the write made during the merge is lost"
        tree_sums /mnt | grep -v during-merge > /tmp/sums-now
        cmp -s /tmp/state/sums-pre /tmp/sums-now || fail "the volume changed across the reboot"
        umount /mnt
        must $ctl snapshot --name third vg0-root
        uses_target rollback-third rollback-snap || fail "third is not a rollback-snap"
        ;;
broken)
        load_state
        must lvm vgchange -q -ay vg0
        must rmmod dm_rollback
        must rmmod dm_snapshot
        must mv /lib/modules/dm-rollback.ko /lib/modules/dm-snapshot.ko /tmp/
        rollback-boot 2> /tmp/boot.err && fail "rollback-boot succeeded without snapshot targets"
        cat /tmp/boot.err
        grep -q "2 marked invalid" /tmp/boot.err || fail "the invalidation was not reported"
        [ "$($ctl --json list | json_field state | tr '\n' ' ')" = "invalid invalid " ] ||
                fail "snapshots not marked invalid: $($ctl list)"
        expect_rc 6 $ctl revert post
        dmsetup table vg0-root | grep -q " linear " || fail "vg0-root is not plain"
        must insmod /tmp/dm-snapshot.ko
        must insmod /tmp/dm-rollback.ko
        must $ctl delete post
        must $ctl delete third
        must $ctl snapshot --name fourth vg0-root
        uses_target vg0-root rollback-origin || fail "vg0-root is not a rollback-origin"
        uses_target rollback-fourth rollback-snap || fail "fourth is not a rollback-snap"
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
nomodule)
        load_state
        early_boot
        must $ctl delete fourth
        must mount /dev/mapper/vg0-root /mnt
        tree_sums /mnt > /tmp/state/sums-fifth
        must $ctl snapshot --name fifth vg0-root
        uses_target rollback-fifth rollback-snap || fail "fifth is not a rollback-snap"
        echo "after fifth" > /mnt/after-fifth
        umount /mnt
        must $ctl revert fifth
        save_state
        ;;
nomodule-boot)
        load_state
        must lvm vgchange -q -ay vg0
        must rmmod dm_rollback
        must mv /lib/modules/dm-rollback.ko /tmp/
        rollback-boot 2> /tmp/boot.err || fail "rollback-boot failed without dm-rollback: $(cat /tmp/boot.err)"
        cat /tmp/boot.err
        grep -q "no dm-rollback module for this kernel ($(uname -r);" /tmp/boot.err ||
                fail "rollback-boot does not say why it uses the upstream targets"
        uses_target vg0-root snapshot-merge || fail "vg0-root is not merging on snapshot-merge: $(dmsetup table)"
        must $ctl wait --timeout 120
        must mount /dev/mapper/vg0-root /mnt
        tree_sums /mnt > /tmp/sums-now
        umount /mnt
        cmp -s /tmp/state/sums-fifth /tmp/sums-now || fail "the upstream merge did not bring fifth back"
        ;;
esac
pass
