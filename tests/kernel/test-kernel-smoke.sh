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
# The first half only: the last step needs chunks no write took.
must rbio write /dev/mapper/o /tmp/model-origin --seed 2 --count 200 --span 33554432 --direct
must rbio cmp /dev/mapper/o /tmp/model-origin
must rbio cmp /dev/mapper/s /tmp/model-snap
snapshot_status s

step "writes to the snapshot"
must rbio write /dev/mapper/s /tmp/model-snap --seed 3 --count 200 --span 33554432
must rbio cmp /dev/mapper/s /tmp/model-snap
must rbio cmp /dev/mapper/o /tmp/model-origin
dmsetup table s

# reads_of DEV: reads completed by the disk DEV (vda), from its stat.
reads_of() {
        awk '{ print $1 }' "/sys/block/$1/stat"
}

step "a snapshot write of a whole chunk is its copy: no origin read"
# Chunks of the last 256 KiB of the 64 MiB device, which no write took.
before=$(reads_of vda)
for i in 0 1 2 3 4 5 6 7; do
        dd if=/dev/urandom of=/tmp/chunk bs=4096 count=1 2>/dev/null
        dd if=/tmp/chunk of=/tmp/model-snap bs=4096 seek=$((16320 + i)) conv=notrunc 2>/dev/null
        must dd if=/tmp/chunk of=/dev/mapper/s bs=4096 seek=$((16320 + i)) oflag=direct 2>/dev/null
done
[ "$(reads_of vda)" = "$before" ] || fail "whole-chunk snapshot writes read the origin: $before, then $(reads_of vda) reads"
# Half a chunk needs the other half from the origin.
must dd if=/dev/urandom of=/tmp/chunk bs=2048 count=1 2>/dev/null
must dd if=/tmp/chunk of=/tmp/model-snap bs=2048 seek=$((2 * 16330)) conv=notrunc 2>/dev/null
must dd if=/tmp/chunk of=/dev/mapper/s bs=2048 seek=$((2 * 16330)) oflag=direct 2>/dev/null
[ "$(reads_of vda)" -gt "$before" ] || fail "a half-chunk snapshot write did not read the origin"
must rbio cmp /dev/mapper/s /tmp/model-snap
must rbio cmp /dev/mapper/o /tmp/model-origin
remove_all
pass
