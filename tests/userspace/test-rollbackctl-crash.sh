# SPDX-License-Identifier: GPL-2.0-or-later
# rollbackctl killed at every crash point of create, delete, revert and
# merge finish (ROLLBACK_CRASH_AT, see lib/crash-point.h and docs/states.md): the next
# command finds a state it recovers from — no volume left suspended, no
# extent lost or shared, no snapshot "active" that may have missed a write,
# no leftover device that blocks the name — and the operation then works.
# Then `wait` on a merge that cannot go on (stopped, failed) ends with one
# line and an exit code instead of waiting forever.
. ./lib.sh
. ./lib-userspace.sh
ctl="rollbackctl --no-daemon"

make_lvm
populate
tree_sums /mnt > /tmp/sums-pre
must $ctl init /dev/mapper/vg0-pool
must $ctl config chunk_sectors=8
must $ctl snapshot --name keep vg0-root
free_before=$($ctl --json status | json_field extents_free)

# crash POINT CMD...: CMD is killed at POINT (exit 137, as by kill -9).
crash() {
        point=$1
        shift
        ROLLBACK_CRASH_AT=$point "$@" >/dev/null 2>&1
        rc=$?
        [ "$rc" = 137 ] || fail "'$*' exited $rc, not killed at $point"
        echo "  killed at $point: $*"
}

# The invariants that hold after any crash.
recovered() {
        pool_consistent
        [ "$(state keep)" = active ] || fail "an untouched snapshot changed state: $(state keep)"
        snapshot_matches /dev/mapper/rollback-keep /tmp/sums-pre || fail "the untouched snapshot changed"
}

for point in create-recorded create-live; do
        step "create killed at $point"
        crash $point $ctl snapshot --name c1 vg0-root
        recovered
        got=$(state c1)
        # It may have gone live, but nothing says it saw every write since.
        [ "$got" = invalid ] || fail "c1 is '$got' after a create killed at $point, not invalid"
        must $ctl delete c1
        [ "$($ctl --json status | json_field extents_free)" = "$free_before" ] ||
                fail "extents lost after deleting the crashed c1"
        fresh_snapshot_works c1
        must $ctl delete c1
done

for point in delete-invalidated delete-removed; do
        step "delete killed at $point"
        must $ctl snapshot --name d1 vg0-root
        crash $point $ctl delete d1
        recovered
        got=$(state d1)
        # Its device may be gone: boot must never arm it again as if it had seen every write.
        [ "$got" = invalid ] || fail "d1 is '$got' after a delete killed at $point, not invalid"
        must $ctl delete d1
        [ "$(state d1)" = gone ] || fail "d1 still listed after the second delete"
        [ "$($ctl --json status | json_field extents_free)" = "$free_before" ] ||
                fail "extents lost after deleting d1"
        fresh_snapshot_works d1
        must $ctl delete d1
done

step "revert --now killed once it is recorded"
must $ctl snapshot --name r1 vg0-root
must umount /mnt
crash revert-recorded $ctl revert r1 --now
recovered
[ "$(state r1)" = merging ] || fail "r1 is $(state r1), not merging, after the revert was recorded"
# Recorded, not loaded: the next boot merges it; until then wait says so.
expect_rc 4 $ctl wait

# A "reboot": every dm device removed, LVM activating anew, the early-boot step.
reboot_volumes() {
        must dmsetup remove_all
        must lvm vgchange -q -ay vg0
        must rollback-boot --pool /dev/mapper/vg0-pool
}

step "merge finish killed after its table change, before its commit"
reboot_volumes
uses_target vg0-root rollback-merge || fail "the recorded merge of r1 was not loaded at boot: $(dmsetup table vg0-root)"
# r1 saw no write: its merge is done at once, and wait finishes it.
crash merge-finish-swapped $ctl wait
recovered
uses_target vg0-root rollback-origin || fail "vg0-root is not on the origin table: $(dmsetup table vg0-root)"
# The merge is over: wait completes the record instead of calling it pending.
must $ctl wait --timeout 60
[ "$(state r1)" = gone ] || fail "r1 is $(state r1) after its merge was finished"
[ "$($ctl --json status | json_field extents_free)" = "$free_before" ] ||
        fail "extents lost after the merge of r1 was finished"
$ctl --json status | grep -q '"merge": {' && fail "a merge is still recorded"

step "wait on a merge that is stopped: it says so and exits, it does not wait forever"
must mount /dev/mapper/vg0-root /mnt
# 8 MiB: what the merge copies over goes into keep's COW too, which must not overflow.
must $ctl snapshot --name w1 --size 12M vg0-root
dd if=/dev/urandom of=/mnt/usr/lib/big bs=1M count=8 2>/dev/null
sync
must umount /mnt
# The merge would be done before dmsetup could stop it: until it is
# throttled, its writes wait in a suspended gate under the volume's -real.
real=rollback-vg0-root-real
must dmsetup create gate --table "$(dmsetup table $real)"
must dmsetup suspend $real
must dmsetup reload $real --table "0 $(sectors /dev/mapper/gate) linear /dev/mapper/gate 0"
must dmsetup resume $real
must dmsetup suspend gate
# Named: the search for the pool would read the volume held at the gate.
must $ctl --pool /dev/mapper/vg0-pool revert w1 --now
uses_target vg0-root rollback-merge || fail "no merge of w1: $(dmsetup table vg0-root)"
# 64 KiB/s: a batch, then seconds of sleep, which the suspend ends.
must dmsetup message vg0-root 0 merge_throttle 64
must dmsetup resume gate
must dmsetup suspend vg0-root
left=$(merge_left vg0-root) || fail "no merge under way"
[ "$left" -gt 0 ] || fail "the merge of w1 finished before it could be stopped"
dmsetup status vg0-root
start=$(date +%s)
timeout 60 $ctl wait 2> /tmp/err
rc=$?
cat /tmp/err
[ $rc = 4 ] || fail "wait on a stopped merge exited $rc, not 4"
[ "$(grep -c '' /tmp/err)" = 1 ] || fail "wait said $(grep -c '' /tmp/err) lines, not one"
grep -q "stopped" /tmp/err || fail "wait does not say the merge is stopped"
echo "  wait gave up after $(( $(date +%s) - start )) s"
# Slowed, so that it is still under way for the next step.
must dmsetup message vg0-root 0 merge_throttle 64
must dmsetup resume vg0-root
[ "$(state w1)" = merging ] || fail "w1 is $(state w1) after wait on its stopped merge"

step "wait on a merge that fails (its COW unreadable): it says so and exits"
must dmsetup suspend vg0-root
cow_sectors=$(sectors /dev/mapper/rollback-w1-cow)
must dmsetup suspend rollback-w1-cow
must dmsetup reload rollback-w1-cow --table "0 $cow_sectors error"
must dmsetup resume rollback-w1-cow
must dmsetup resume vg0-root
timeout 60 $ctl wait 2> /tmp/err
rc=$?
cat /tmp/err
dmsetup status vg0-root
[ $rc = 6 ] || fail "wait on a failed merge exited $rc, not 6"
[ "$(grep -c '' /tmp/err)" = 1 ] || fail "wait said $(grep -c '' /tmp/err) lines, not one"
grep -q "failed" /tmp/err || fail "wait does not say the merge failed"
pass
