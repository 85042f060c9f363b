# SPDX-License-Identifier: GPL-2.0-or-later
# rollbackctl on LVM, one backend (arg: rollback, upstream, or fallback: auto
# with no dm-rollback in the kernel): snapshot a mounted ext4 root LV, change
# it, revert --now, and check the bytes and which targets did the work.
. ./lib.sh
. ./lib-userspace.sh
ctl="rollbackctl --no-daemon"

case $1 in
fallback)
        # Unloaded and no module file to load it from: auto must choose
        # upstream dm-snapshot, and everything must still work.
        must rmmod dm_rollback
        must mv /lib/modules/dm-rollback.ko /tmp/
        backend=auto impl=upstream
        ;;
*)
        backend=$1 impl=$1
        ;;
esac

make_lvm
populate
tree_sums /mnt > /tmp/sums-pre

step "init the pool on an LV, backend $backend"
must $ctl init /dev/mapper/vg0-pool
# No daemon grows COWs here: an overflow waits a second, then invalidates.
must $ctl config backend="$backend" chunk_sectors=8 full_wait_seconds=1
$ctl status
tables_before=$(dmsetup table | sort)

step "snapshot the mounted volume"
must $ctl snapshot --name pre --description "before upgrade" /dev/mapper/vg0-root
uses_target vg0-root "$(origin_target $impl)" || fail "vg0-root is not a $impl origin"
uses_target rollback-pre "$(snapshot_target $impl)" || fail "rollback-pre is not a $impl snapshot"
grep -q " /mnt " /proc/mounts || fail "the filesystem was unmounted"
churn
tree_sums /mnt > /tmp/sums-post
must $ctl snapshot --name post vg0-root
uses_target rollback-post "$(snapshot_target $impl)" || fail "rollback-post is not a $impl snapshot"

step "the pre snapshot shows the old files"
snapshot_matches /dev/mapper/rollback-pre /tmp/sums-pre || fail "snapshot pre differs from the state it was taken of"

step "list --json"
$ctl list
$ctl --json list > /tmp/list.json || fail "list --json"
cat /tmp/list.json
[ "$(json_field name < /tmp/list.json | tr '\n' ' ')" = "pre post " ] || fail "names in list --json"
[ "$(json_field state < /tmp/list.json | tr '\n' ' ')" = "active active " ] || fail "states in list --json"
for key in volume created_usec description upgrade revert_pending size_bytes used_bytes used_percent \
           chunk_sectors device; do
        grep -q "\"$key\":" /tmp/list.json || fail "list --json lacks $key"
done
free_before=$($ctl --json status | json_field extents_free)

step "revert --now refuses a mounted volume"
expect_rc 4 $ctl revert pre --now
uses_target vg0-root "$(origin_target $impl)" || fail "a refused revert changed the table"

step "revert --now on the unmounted volume"
umount /mnt
post_sum=$(checksum /dev/mapper/rollback-post) || fail "cannot read snapshot post"
pre_sum=$(checksum /dev/mapper/rollback-pre) || fail "cannot read snapshot pre"
must $ctl revert pre --now
$ctl status
# Without a daemon nothing finishes the merge before wait: its table stays.
uses_target vg0-root "$(merge_target $impl)" || fail "vg0-root is not a $impl merge"
uses_target rollback-post "$(snapshot_target $impl)" || fail "rollback-post is not a $impl snapshot during the merge"
must $ctl wait --timeout 300
$ctl status
same_sum /dev/mapper/vg0-root "$pre_sum" "the volume does not equal the snapshot after the merge"
same_sum /dev/mapper/rollback-post "$post_sum" "snapshot post changed during the merge"
uses_target vg0-root "$(origin_target $impl)" || fail "vg0-root is not a $impl origin after the merge"
dmsetup info rollback-pre >/dev/null 2>&1 && fail "rollback-pre is still there"
dmsetup info rollback-pre-cow >/dev/null 2>&1 && fail "rollback-pre-cow is still there"
free_after=$($ctl --json status | json_field extents_free)
[ "$free_after" -gt "$free_before" ] || fail "extents not freed ($free_before -> $free_after)"
[ "$($ctl --json list | json_field name)" = "post" ] || fail "only post should be left"

step "the filesystem is the old one"
must e2fsck -fn /dev/mapper/vg0-root
must mount /dev/mapper/vg0-root /mnt
tree_sums /mnt > /tmp/sums-now
cmp -s /tmp/sums-pre /tmp/sums-now || fail "files differ from the pre-upgrade state"
grep -q "version 1" /mnt/etc/pkg-version || fail "pkg-version"

step "post still shows the upgraded state"
snapshot_matches /dev/mapper/rollback-post /tmp/sums-post || fail "snapshot post lost its contents"

step "delete the last snapshot: the volume is plain again"
must $ctl delete post
dmsetup table vg0-root | grep -q " linear " || fail "vg0-root is not linear again"
dmsetup ls | grep -q rollback- && fail "rollback devices left: $(dmsetup ls)"
[ "$($ctl --json status | json_field extents_free)" = "$($ctl --json status | json_field extents_total)" ] ||
        fail "not all extents are free"
[ "$(dmsetup table | sort)" = "$tables_before" ] || fail "tables differ from before the first snapshot"
tree_sums /mnt > /tmp/sums-now
cmp -s /tmp/sums-pre /tmp/sums-now || fail "files changed by the delete"

step "an overflowing snapshot is invalid and refused for revert"
must $ctl snapshot --name small --size 4M vg0-root
dd if=/dev/urandom of=/mnt/big bs=1M count=12 conv=fsync 2>/dev/null
sync
$ctl list
[ "$($ctl --json list | json_field state)" = "invalid" ] || fail "small is not reported invalid"
expect_rc 6 $ctl revert small
grep -q " /mnt " /proc/mounts || fail "the filesystem went away"
echo still-writable > /mnt/after-overflow || fail "the volume is not writable after the overflow"
must $ctl delete small

# Its merge may run at boot, before any daemon can grow a COW: the other
# snapshots of the volume must already hold what it will write.
step "a revert grows the other snapshots to hold what its merge will write"
rm -f /mnt/big
must $ctl snapshot --name base --size 32M vg0-root
dd if=/dev/urandom of=/mnt/big bs=1M count=12 conv=fsync 2>/dev/null
sync
must $ctl snapshot --name later --size 4M vg0-root
must $ctl revert base
$ctl list
used=$($ctl --json list | json_field used_bytes | sed -n 1p)
size=$($ctl --json list | json_field size_bytes | sed -n 2p)
echo "  base has $used bytes to merge, later holds $size"
[ "$size" -gt "$used" ] || fail "later ($size bytes) cannot hold the $used bytes the merge of base writes"
must $ctl cancel-revert vg0-root
must $ctl delete later
must $ctl delete base
umount /mnt
[ "$1" = fallback ] && grep -q "^dm_rollback " /proc/modules && fail "dm-rollback got loaded after all"
pass
