# SPDX-License-Identifier: GPL-2.0-or-later
# Bad arguments, a wrong pool device and a failed snapshot creation give one
# clear line and an exit code, and change neither dm tables nor metadata.
. ./lib.sh
. ./lib-userspace.sh
ctl="rollbackctl --no-daemon"

make_lvm
populate
must lvm lvcreate -q -y -L 4M -n tiny vg0

step "no pool yet"
expect_rc 3 $ctl snapshot vg0-root
expect_rc 3 $ctl list

step "init refuses what it must not format"
expect_rc 4 $ctl init /dev/mapper/vg0-root
expect_rc 5 $ctl init /dev/mapper/vg0-tiny
expect_rc 3 $ctl init /dev/mapper/vg0-nothing
must $ctl init /dev/mapper/vg0-pool
expect_rc 1 $ctl init /dev/mapper/vg0-pool

# Tables and what the pool records.  A failed create commits, and then
# forgets, its record: the sequence number moves (sequence=no), the contents
# do not.
snapshot_state() {
        echo "$(dmsetup table | sort)"
        $ctl --json list | json_field name
        $ctl --json list | json_field state
        $ctl --json status | json_field extents_free
        [ "${1:-}" = sequence=no ] || $ctl --json status | json_field metadata_sequence
}
must $ctl snapshot --name keep vg0-root
before=$(snapshot_state)

step "wrong arguments change nothing"
expect_rc 3 $ctl snapshot vg0-nothing
expect_rc 1 $ctl snapshot /dev/vda
# The guest's / is the initramfs, on no block device (0:N), as tmpfs,
# overlayfs or a btrfs subvolume are: once "Input/output error".
expect_rc 1 $ctl snapshot
grep -q "not a device-mapper volume" /tmp/err || fail "a root on no block device: $(cat /tmp/err)"
expect_rc 1 $ctl snapshot rollback-keep
expect_rc 1 $ctl snapshot --name keep vg0-root
expect_rc 2 $ctl snapshot --name x-real vg0-root
# The name of the view a boot of snapshot x mounts as root (rollbackctl boot).
expect_rc 2 $ctl snapshot --name x-view vg0-root
expect_rc 3 $ctl boot nothing
expect_rc 2 $ctl boot
expect_rc 1 $ctl boot keep
grep -q "has no GRUB entry" /tmp/err || fail "boot of a snapshot with no entry: $(cat /tmp/err)"
expect_rc 5 $ctl snapshot --name huge --size 1T vg0-root
expect_rc 3 $ctl --pool /dev/mapper/vg0-root list
expect_rc 3 $ctl revert nothing
expect_rc 3 $ctl delete nothing
expect_rc 3 $ctl cancel-revert
expect_rc 2 $ctl config retain=lots
expect_rc 2 $ctl config colour=blue
[ "$(snapshot_state)" = "$before" ] || fail "state changed: $(snapshot_state)"

step "a snapshot whose device cannot be made is rolled back"
must dmsetup create rollback-clash --table "0 8 error"
expect_rc 4 $ctl snapshot --name clash vg0-root
must dmsetup remove rollback-clash
[ "$(snapshot_state sequence=no)" = "$(echo "$before" | head -n -1)" ] ||
        fail "a failed creation left something behind: $(snapshot_state sequence=no)"
dmsetup ls | grep -q clash-cow && fail "the COW device of the failed snapshot is left"

step "the first snapshot of a volume, failed, leaves the volume plain"
must $ctl delete keep
before=$(snapshot_state sequence=no)
must dmsetup create rollback-clash --table "0 8 error"
expect_rc 4 $ctl snapshot --name clash vg0-root
must dmsetup remove rollback-clash
[ "$(snapshot_state sequence=no)" = "$before" ] ||
        fail "a failed first snapshot left something behind: $(snapshot_state sequence=no)"
dmsetup table vg0-root | grep -q " linear " || fail "vg0-root is not linear"
grep -q " /mnt " /proc/mounts || fail "the filesystem went away"
umount /mnt
pass
