# SPDX-License-Identifier: GPL-2.0-or-later
# One origin, one snapshot: writes through each are seen only there.
. ./lib.sh

step "targets are registered"
dmsetup targets | grep -q rollback-origin || fail "rollback-origin not registered"
dmsetup targets | grep -q rollback-snap || fail "rollback-snap not registered"

must rbio fill /dev/vda 1
must cp /dev/vda /tmp/model-snap
zero_cow /dev/vdb
make_origin rollback o /dev/vda
make_snapshot rollback o s /dev/vdb 8 || fail "snapshot create"
status=$(snapshot_status s)
echo "status: $status"
[ "$status" = "16/131072 16" ] || fail "fresh status is '$status'"

step "writes to the origin"
must cp /dev/mapper/o /tmp/model-origin
must rbio write /dev/mapper/o /tmp/model-origin --seed 2 --count 200 --direct
must rbio cmp /dev/mapper/o /tmp/model-origin
must rbio cmp /dev/mapper/s /tmp/model-snap
snapshot_status s

step "writes to the snapshot"
must rbio write /dev/mapper/s /tmp/model-snap --seed 3 --count 200
must rbio cmp /dev/mapper/s /tmp/model-snap
must rbio cmp /dev/mapper/o /tmp/model-origin
dmsetup table s
remove_all
pass
