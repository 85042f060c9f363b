# SPDX-License-Identifier: GPL-2.0-or-later
# Writes the pool never sees (driven by evidence-host; arg: the phase).
#   setup           LVM, an ext4 volume, the pool, snapshot pre
#   tracked         as a normal boot: rollback-boot arms pre, the volume is
#                   mounted read-only, remounted read-write and written, a
#                   command runs; pre must still be active at the next boot
#   tracked-quiet   the same with no command: only rollback-boot recorded
#   tracked-revert  the same, and a revert of pre asked for
#   untracked       the pool's LV is not activated: rollback-boot finds no
#                   pool, and the volume is mounted read-write and written
#                   with pre not armed
#   after           the pool is back: rollback-boot sees the higher mount
#                   count, says so in one error line, marks pre invalid and
#                   refuses the pending revert; the boot goes on
#   merge-recorded  snapshots a and b; a revert --now of a killed once the
#                   merge is recorded (merging, not loaded)
#   untracked-merge without the pool again, the volume mounted read-write
#                   twice and written
#   after-merge     the merge under way is not stopped (stopped, root would
#                   stay half merged) but b is invalid, and the line says so
. ./lib.sh
. ./lib-userspace.sh
phase=$1
ctl="rollbackctl --no-daemon"
says="mounted read-write while its snapshots were not armed"
mkdir -p /mnt

# s_mnt_count: le16 at 0x34 in the superblock at 1024.
mount_count() {
        dd if=/dev/mapper/vg0-root bs=1 skip=1076 count=2 2>/dev/null | od -An -tu2 | tr -d ' '
}

# What LVM does at boot, then what the dracut hook does.
early_boot() {
        must lvm vgchange -q -ay vg0
        echo "mount count at boot: $(mount_count)"
        rollback-boot 2> /tmp/boot.err
        echo "rollback-boot exit $?"
        cat /tmp/boot.err
}

# What a boot does with root: mounted read-only, then read-write, written.
use_root() {
        must mount -o ro /dev/mapper/vg0-root /mnt
        must mount -o remount,rw /mnt
        echo "$phase $(date +%s%N)" >> /mnt/boots
        sync
}

tracked_boot() {
        early_boot
        grep -q "$says" /tmp/boot.err && fail "a boot with rollback was taken for one without"
        uses_target vg0-root rollback-origin || fail "vg0-root is not a rollback-origin"
        uses_target rollback-pre rollback-snap || fail "pre is not armed"
        [ "$($ctl --json list | json_field state)" = active ] || fail "pre is not active: $($ctl list)"
        use_root
}

case $phase in
setup)
        make_lvm
        populate
        must $ctl init /dev/mapper/vg0-pool
        must $ctl snapshot --name pre --size 16M vg0-root
        umount /mnt
        echo "mount count: $(mount_count)"
        ;;
tracked)
        tracked_boot
        # A command while it is mounted records the count as it is.
        must $ctl list
        umount /mnt
        ;;
tracked-quiet)
        tracked_boot
        umount /mnt
        ;;
tracked-revert)
        tracked_boot
        must $ctl revert pre
        [ "$($ctl --json list | json_field revert_pending)" = true ] || fail "the revert is not pending"
        umount /mnt
        ;;
untracked)
        # Only the volume: rollback-boot finds no pool, as when its device is missing.
        must lvm lvchange -q -ay vg0/root
        rollback-boot
        echo "rollback-boot exit $?"
        dmsetup table vg0-root | grep -q " linear " || fail "vg0-root is not on its own table"
        must mount /dev/mapper/vg0-root /mnt
        echo "written with pre not armed" > /mnt/untracked
        umount /mnt
        echo "mount count: $(mount_count)"
        ;;
after)
        early_boot
        [ "$(grep -c "$says" /tmp/boot.err)" = 1 ] || fail "no error line about the untracked mount"
        grep "$says" /tmp/boot.err | grep -q "vg0-root.*ext mount count 5, at most 4" ||
                fail "the line does not name the volume and the counts"
        grep "$says" /tmp/boot.err | grep -q "revert of 'pre' refused" || fail "the line does not say the revert is refused"
        # At error priority in the kernel log (user facility: 8 + 3).
        dmesg -r | grep "$says" | grep -Eq '^<(3|11)>' || fail "not in the kernel log at error priority: $(dmesg -r | grep "$says")"
        $ctl list
        [ "$($ctl --json list | json_field state)" = invalid ] || fail "pre is not invalid: $($ctl list)"
        [ "$($ctl --json list | json_field revert_pending)" = false ] || fail "the revert is still pending"
        uses_target vg0-root rollback-merge && fail "the revert was merged over the untracked writes"
        dmsetup info rollback-pre > /dev/null 2>&1 && fail "pre is armed"
        must mount /dev/mapper/vg0-root /mnt
        grep -q "not armed" /mnt/untracked || fail "the untracked write is gone"
        umount /mnt
        expect_rc 6 $ctl revert pre
        ;;
merge-recorded)
        early_boot
        grep -q "$says" /tmp/boot.err && fail "the untracked mount was reported twice"
        must $ctl delete pre
        use_root
        must $ctl snapshot --name a vg0-root
        must $ctl snapshot --name b vg0-root
        churn
        umount /mnt
        ROLLBACK_CRASH_AT=revert-recorded $ctl revert a --now
        echo "revert --now exit $?"
        [ "$($ctl --json list | json_field state | tr '\n' ' ')" = "merging active " ] ||
                fail "not a merge recorded with b active: $($ctl list)"
        ;;
untracked-merge)
        must lvm lvchange -q -ay vg0/root
        rollback-boot
        echo "rollback-boot exit $?"
        must mount /dev/mapper/vg0-root /mnt
        echo "written with a merge recorded, not loaded" > /mnt/untracked
        umount /mnt
        must mount /dev/mapper/vg0-root /mnt
        umount /mnt
        echo "mount count: $(mount_count)"
        ;;
after-merge)
        early_boot
        grep "$says" /tmp/boot.err | grep -q "merge under way goes on" ||
                fail "no error line saying the merge under way goes on"
        uses_target vg0-root rollback-merge || fail "the merge under way was stopped"
        [ "$($ctl --json list | json_field state | tr '\n' ' ')" = "merging invalid " ] ||
                fail "not a merging with b invalid: $($ctl list)"
        must $ctl wait --timeout 120
        must $ctl delete b
        ;;
esac
pass
