# SPDX-License-Identifier: GPL-2.0-or-later
# rollbackctl killed at every crash point of create, delete and revert
# (ROLLBACK_CRASH_AT, see lib/crash-point.h and docs/states.md): the next
# command finds a state it recovers from — no volume left suspended, no
# extent lost or shared, no snapshot "active" that may have missed a write,
# no leftover device that blocks the name — and the operation then works.
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

# state NAME: its state in list --json, "gone" if not listed.
state() {
        $ctl --json list > /tmp/list.json || fail "list after a crash"
        awk -v want="$1" '/"name":/ { n = $2 } /"state":/ && n == "\"" want "\"," { gsub(/[",]/, "", $2); print $2 }' \
                /tmp/list.json | grep . || echo gone
}

# The invariants that hold after any crash.
recovered() {
        dmsetup info -c --noheadings -o name,suspended | grep -i ':suspended$' &&
                fail "a device was left suspended"
        $ctl status > /tmp/status || fail "status after a crash: $(cat /tmp/status)"
        [ "$(state keep)" = active ] || fail "an untouched snapshot changed state: $(state keep)"
        snapshot_matches /dev/mapper/rollback-keep /tmp/sums-pre || fail "the untouched snapshot changed"
}

# Writes to the volume, then snapshot NAME (created afresh) must show them.
fresh_snapshot_works() {
        echo "after $1" > /mnt/etc/marker
        sync
        tree_sums /mnt > /tmp/sums-now
        must $ctl snapshot --name "$1" vg0-root
        [ "$(state "$1")" = active ] || fail "$1 is $(state "$1") after a fresh create"
        snapshot_matches "/dev/mapper/rollback-$1" /tmp/sums-now || fail "a fresh $1 does not show the volume"
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
pass
