# SPDX-License-Identifier: GPL-2.0-or-later
# rollbackctl on LVM, one backend (arg: rollback or upstream): snapshot a
# mounted ext4 root LV, change it, revert --now, and check the bytes.
. ./lib.sh
. ./lib-userspace.sh
backend=$1
ctl="rollbackctl --no-daemon"

make_lvm
populate
tree_sums /mnt > /tmp/sums-pre

step "init the pool on an LV, backend $backend"
must $ctl init /dev/mapper/vg0-pool
must $ctl config backend="$backend" chunk_sectors=8
$ctl status
tables_before=$(dmsetup table | sort)

step "snapshot the mounted volume"
must $ctl snapshot --name pre --description "before upgrade" /dev/mapper/vg0-root
dmsetup table vg0-root | grep -q " $(origin_target "$backend") " || fail "vg0-root is not a $backend origin"
dmsetup table rollback-pre | grep -q " $(snapshot_target "$backend") " || fail "rollback-pre is not a $backend snapshot"
grep -q " /mnt " /proc/mounts || fail "the filesystem was unmounted"
churn
tree_sums /mnt > /tmp/sums-post
must $ctl snapshot --name post vg0-root

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
dmsetup table vg0-root | grep -q " $(origin_target "$backend") " || fail "a refused revert changed the table"

step "revert --now on the unmounted volume"
umount /mnt
post_sum=$(md5sum < /dev/mapper/rollback-post)
pre_sum=$(md5sum < /dev/mapper/rollback-pre)
must $ctl revert pre --now
$ctl status
must $ctl wait --timeout 300
$ctl status
[ "$(md5sum < /dev/mapper/vg0-root)" = "$pre_sum" ] || fail "the volume does not equal the snapshot after the merge"
[ "$(md5sum < /dev/mapper/rollback-post)" = "$post_sum" ] || fail "snapshot post changed during the merge"
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
umount /mnt
pass
