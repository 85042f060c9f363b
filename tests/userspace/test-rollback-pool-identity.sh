# SPDX-License-Identifier: GPL-2.0-or-later
# The pool is chosen by the identity init recorded, not by its magic alone:
# a foreign pool with a pending revert is ignored (with a warning) by
# rollbackctl and rollback-boot, a clone or a missing pool is a clear error,
# and init refuses a device with another signature.
. ./lib.sh
. ./lib-userspace.sh
ctl="rollbackctl --no-daemon"

make_lvm
populate
must lvm lvcreate -q -y -L "${POOL_SIZE:-68M}" -n other vg0
must lvm lvcreate -q -y -L 8M -n fs vg0
must mkfs.ext4 -q -F /dev/mapper/vg0-fs

step "init refuses a device with another signature"
expect_rc 1 $ctl init /dev/mapper/vg0-fs
grep -q "ext4 signature" /tmp/err || fail "the signature is not named: $(cat /tmp/err)"

step "a foreign pool with a pending revert"
must $ctl init /dev/mapper/vg0-other
foreign=$($ctl --json status | json_field uuid)
[ "$(cat /etc/rollback/pool-uuid)" = "$foreign" ] || fail "init did not record the pool: $(cat /etc/rollback/pool-uuid)"
must $ctl snapshot --name foreign vg0-root
must $ctl revert foreign
# As if it came from another machine: its devices gone, its metadata kept.
umount /mnt
must dmsetup remove rollback-foreign
must dmsetup suspend vg0-root
must dmsetup reload vg0-root --table "$(dmsetup table rollback-vg0-root-real)"
must dmsetup resume vg0-root
must dmsetup remove rollback-vg0-root-real
must dmsetup remove rollback-foreign-cow
dmsetup ls | grep -q rollback- && fail "devices left: $(dmsetup ls)"
must mount /dev/mapper/vg0-root /mnt

step "our pool: only it is used, the foreign one is ignored with a warning"
must $ctl init /dev/mapper/vg0-pool
ours=$($ctl --json status | json_field uuid)
[ "$ours" != "$foreign" ] || fail "two pools with one UUID"
[ "$(cat /etc/rollback/pool-uuid)" = "$ours" ] || fail "init did not record our pool"
$ctl list > /tmp/out 2> /tmp/err || fail "list: $(cat /tmp/err)"
grep -q "Ignoring 1 other device" /tmp/err || fail "no warning of the foreign pool: $(cat /tmp/err)"
grep -q foreign /tmp/out && fail "the foreign pool's snapshot is listed"
umount /mnt
rollback-boot 2> /tmp/boot.err
echo "rollback-boot exit $?"
cat /tmp/boot.err
grep -q "ignoring 1 other device" /tmp/boot.err || fail "rollback-boot did not warn of the foreign pool"
dmsetup table vg0-root | grep -q " linear " || fail "the foreign revert was loaded: $(dmsetup table vg0-root)"
must mount /dev/mapper/vg0-root /mnt
must $ctl snapshot --name ours vg0-root

step "a suspended device elsewhere, or one stacked on it, does not hang the search for the pool"
must dmsetup create held --table "0 2048 linear /dev/mapper/vg0-fs 0"
must dmsetup create above-held --table "0 2048 linear /dev/mapper/held 0"
must dmsetup create above-above-held --table "0 2048 linear /dev/mapper/above-held 0"
must dmsetup suspend held
timeout 30 $ctl list > /dev/null || fail "rollbackctl hung on a suspended device or one stacked on it"
must dmsetup resume held
must dmsetup remove above-above-held
must dmsetup remove above-held
must dmsetup remove held

step "--pool UUID= picks a pool by its identity"
[ "$($ctl --pool "UUID=$foreign" --json list | json_field name)" = foreign ] || fail "--pool UUID= of the foreign pool"
expect_rc 3 $ctl --pool UUID=00000000-0000-0000-0000-000000000000 list
grep -q "is not here" /tmp/err || fail "a missing pool is not named as missing"
expect_rc 2 $ctl --pool UUID=nothex list

step "the recorded pool gone: an error, not the other pool"
cp /etc/rollback/pool-uuid /tmp/pool-uuid
echo 00000000-0000-0000-0000-000000000000 > /etc/rollback/pool-uuid
expect_rc 3 $ctl list
# A revert may be pending on it: the boot waits for it, then stops before root is mounted.
start=$(date +%s)
rollback-boot --wait 2 2> /tmp/boot.err
rc=$?
cat /tmp/boot.err
[ "$rc" = 3 ] || fail "rollback-boot without its pool exited $rc, not 3 (root must not be mounted)"
grep -q "did not appear in 2 s" /tmp/boot.err || fail "rollback-boot: $(cat /tmp/boot.err)"
[ $(( $(date +%s) - start )) -ge 2 ] || fail "rollback-boot did not wait for the pool"

step "nothing recorded: two pools are ambiguous"
rm /etc/rollback/pool-uuid
expect_rc 1 $ctl list
grep -q "more than one device" /tmp/err || fail "two pools: $(cat /tmp/err)"
cp /tmp/pool-uuid /etc/rollback/pool-uuid
[ "$($ctl --json list | json_field name)" = ours ] || fail "our pool again"
must $ctl delete ours
umount /mnt

step "the pool appearing while rollback-boot waits for it"
must lvm lvchange -q -an vg0/pool
(sleep 3; lvm lvchange -q -ay vg0/pool) &
rollback-boot --wait 60 2> /tmp/boot.err || fail "rollback-boot: $(cat /tmp/boot.err)"
wait
grep -q "waiting up to 60 s" /tmp/boot.err || fail "rollback-boot found the pool before it appeared: $(cat /tmp/boot.err)"
pass
