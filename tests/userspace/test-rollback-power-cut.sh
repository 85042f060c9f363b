# SPDX-License-Identifier: GPL-2.0-or-later
# Power cuts at the crash points of create, delete, revert --now, merge
# finish and boot arming (driven by power-cut-host; docs/states.md).
#   args: PREV NEXT, each a crash point or "-"; POINT:alone runs the
#   operation on the volume's only snapshot (keep deleted first): arming a
#   plain volume, disarming it, a merge finish onto its own table.
#   merge-running is no crash point: the cut comes while a revert --now is
#   merging (this script prints the line).
# This boot first recovers from the cut at PREV as a boot does (LVM, then
# rollback-boot), checks the invariants and runs the operation again; then
# (or, with PREV "-", after setting up LVM, a pool, a volume with data and a
# kept snapshot) it runs the operation of NEXT with ROLLBACK_CUT_AT=NEXT:
# rb_crash_point() prints "CUT-HERE at NEXT" and waits, and the host kills
# the machine there, nothing synced.
. ./lib.sh
. ./lib-userspace.sh
prev=${1%:alone}
next=${2%:alone}
prev_alone=
[ "$1" = "$prev" ] || prev_alone=1
next_alone=
[ "$2" = "$next" ] || next_alone=1
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

# A change to the volume, so that a revert shows.
change() {
        dd if=/dev/urandom of=/mnt/usr/lib/lib1.so bs=64k count=8 conv=notrunc 2>/dev/null
        echo "changed before $1" > /mnt/etc/pkg-version
        sync
}

# Writes all the time (to /mnt/scratch), as a running system does: the cut
# comes amid them, and kept snapshots copy the chunks they overwrite.
writer() {
        while :; do
                dd if=/dev/urandom of=/mnt/scratch bs=64k count=16 conv=notrunc,fsync 2>/dev/null
        done
}

# volume_is SUMS: the volume holds the files of SUMS (the writer's aside).
volume_is() {
        tree_sums /mnt | grep -v ' \./scratch$' > /tmp/sums-now
        grep -v ' \./scratch$' "$1" > /tmp/sums-want
        cmp -s /tmp/sums-want /tmp/sums-now || fail "the volume's files changed: $(diff /tmp/sums-want /tmp/sums-now)"
}

# merged NAME: the revert to NAME recorded before the cut is completed now
# (wait finishes it), and the volume holds NAME's files.
merged() {
        $ctl status
        # The merge's starting size is known whenever the cut came (the
        # percentage and the ETA are reckoned from it).
        total=$($ctl --json status | json_field chunks_total)
        [ -n "$total" ] && [ "$total" -gt 0 ] || fail "the merge of $1 has no starting size: '$total'"
        must $ctl wait --timeout 120
        [ "$(state "$1")" = gone ] || fail "$1 is $(state "$1") after its merge was finished"
        $ctl --json status | grep -q '"merge": {' && fail "a merge is still recorded"
        if [ -n "$prev_alone" ]; then
                dmsetup table vg0-root | grep -q " linear " ||
                        fail "vg0-root is not on its own table: $(dmsetup table vg0-root)"
        else
                uses_target vg0-root rollback-origin || fail "vg0-root is not armed: $(dmsetup table vg0-root)"
        fi
}

# revert_works NAME: a snapshot NAME again, and a revert --now to it takes
# the volume back.
revert_works() {
        tree_sums /mnt > /tmp/sums-r
        must $ctl snapshot --name "$1" vg0-root
        change again
        must umount /mnt
        must $ctl revert "$1" --now
        must $ctl wait --timeout 120
        [ "$(state "$1")" = gone ] || fail "$1 is $(state "$1") after its merge"
        must mount /dev/mapper/vg0-root /mnt
        volume_is /tmp/sums-r
}

if [ "$prev" = - ]; then
        step "setup"
        make_lvm
        populate
        tree_sums /mnt > /tmp/state/sums-keep
        must $ctl init /dev/mapper/vg0-pool
        must $ctl config chunk_sectors=8
        must $ctl snapshot --name keep --size 16M vg0-root
else
        step "recovery from a power cut at $1"
        load_state
        early_boot
        # Mounted once to replay its journal, then it must be clean.
        must mount /dev/mapper/vg0-root /mnt
        must umount /mnt
        must e2fsck -fn /dev/mapper/vg0-root
        must mount /dev/mapper/vg0-root /mnt
        pool_consistent
        if [ -z "$prev_alone" ]; then
                [ "$(state keep)" = active ] || fail "the untouched snapshot keep is $(state keep)"
                uses_target rollback-keep rollback-snap || fail "keep is not armed"
                snapshot_matches /dev/mapper/rollback-keep /tmp/state/sums-keep ||
                        fail "the untouched snapshot changed"
        fi
        case $prev in
        create-*|delete-*)
                name=$(echo "$prev" | cut -c1)1
                volume_is /tmp/state/sums-vol
                # Its device may have been live: nothing says it saw every write.
                [ "$(state $name)" = invalid ] || fail "$name is '$(state $name)' after a cut at $prev, not invalid"
                must $ctl delete $name
                [ "$(state $name)" = gone ] || fail "$name still listed after delete"
                if [ -n "$prev_alone" ]; then
                        dmsetup table vg0-root | grep -q " linear " ||
                                fail "vg0-root is armed with no snapshot left: $(dmsetup table vg0-root)"
                fi
                fresh_snapshot_works $name
                must $ctl delete $name
                ;;
        revert-*|merge-*|boot-*)
                name=$(echo "$prev" | cut -c1)1
                merged $name
                volume_is /tmp/state/sums-vol
                revert_works $name
                ;;
        esac
        if [ -n "$prev_alone" ]; then
                [ -z "$($ctl --json list | json_field name)" ] || fail "snapshots are left: $($ctl list)"
                tree_sums /mnt > /tmp/state/sums-keep
                must $ctl snapshot --name keep --size 16M vg0-root
        fi
        pool_consistent
        [ "$($ctl --json list | json_field name)" = keep ] || fail "keep should be the only snapshot: $($ctl list)"
        echo "recovered from $1"
fi

[ "$next" = - ] && pass
step "power cut at $next${next_alone:+, the volume's only snapshot}"
[ -n "$next_alone" ] && must $ctl delete keep
sync
case $next in
create-*)
        tree_sums /mnt > /tmp/state/sums-vol
        save_state
        writer &
        sleep 1
        ROLLBACK_CUT_AT=$next $ctl snapshot --name c1 vg0-root
        ;;
delete-*)
        must $ctl snapshot --name d1 vg0-root
        tree_sums /mnt > /tmp/state/sums-vol
        save_state
        writer &
        sleep 1
        ROLLBACK_CUT_AT=$next $ctl delete d1
        ;;
merge-running)
        tree_sums /mnt > /tmp/state/sums-vol
        save_state
        must $ctl snapshot --name m1 --size 16M vg0-root
        # Enough to merge for several batches of 256 chunks.
        dd if=/dev/urandom of=/mnt/usr/lib/big.so bs=1M count=6 conv=fsync 2>/dev/null
        must umount /mnt
        # The merge would be done before dmsetup could slow it: until it is,
        # its writes wait in a suspended gate under the volume's -real.
        real=rollback-vg0-root-real
        must dmsetup create gate --table "$(dmsetup table $real)"
        must dmsetup suspend $real
        must dmsetup reload $real --table "0 $(sectors /dev/mapper/gate) linear /dev/mapper/gate 0"
        must dmsetup resume $real
        must dmsetup suspend gate
        # Named: the search for the pool would read the volume held at the gate.
        must $ctl --pool /dev/mapper/vg0-pool revert m1 --now
        # 128 KiB/s: a batch, then seconds of sleep.
        must dmsetup message vg0-root 0 merge_throttle 128
        must dmsetup resume gate
        left=$(merge_left vg0-root) || fail "no merge under way"
        [ "$left" -gt 0 ] || fail "the merge of m1 finished before the cut"
        echo "CUT-HERE at merge-running, $left sectors left"
        sleep 600
        ;;
revert-*|merge-*|boot-*)
        name=$(echo "$next" | cut -c1)1
        tree_sums /mnt > /tmp/state/sums-vol
        save_state
        must $ctl snapshot --name $name vg0-root
        change $next
        case $next in
        boot-*)
                must $ctl revert $name
                must umount /mnt
                # A reboot: no device left, LVM activating anew, the hook.
                must dmsetup remove_all
                must lvm vgchange -q -ay vg0
                ROLLBACK_CUT_AT=$next rollback-boot
                ;;
        revert-*)
                must umount /mnt
                ROLLBACK_CUT_AT=$next $ctl revert $name --now
                ;;
        merge-*)
                must umount /mnt
                must $ctl revert $name --now
                ROLLBACK_CUT_AT=$next $ctl wait --timeout 120
                ;;
        esac
        ;;
esac
fail "the operation ended instead of stopping at $next"
