# SPDX-License-Identifier: GPL-2.0-or-later
# The copy and commit engines under races: what a snapshot read returns
# while the origin chunk is being copied.
#
# Disks: vda origin (32M), vdb and vdc COWs (64M).
. ./lib.sh

dmsetup targets | grep -q '^delay ' || skip "no dm-delay in the guest"
size=$(sectors /dev/vda)

step "snapshot reads racing origin writes of their chunk see the old data"
# Reads of the origin held 20 ms by dm-delay, writes not: a snapshot read
# sent to the origin once the write's copy is done is overtaken by the
# write, unless the write waits for it.
must rbio fill /dev/vda 1
zero_cow /dev/vdb
must dmsetup create o-real --table "0 $size delay /dev/vda 0 20 /dev/vda 0 0"
must dmsetup create o --table "0 $size rollback-origin /dev/mapper/o-real"
make_snapshot rollback o s /dev/vdb 8 || fail "create s"
dmesg -c > /dev/null
rbio snapread /dev/mapper/o /dev/mapper/s 1 --seed 7 --bs 4096 --count 1500 --threads 8 ||
        fail "a snapshot read returned data written after the snapshot"
[ "$(snapshot_status s)" != Invalid ] || fail "s invalid: $(dmesg | tail -n 3)"
no_splat "racing reads"
remove_all

pass "core"
