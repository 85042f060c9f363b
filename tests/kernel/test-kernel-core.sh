# SPDX-License-Identifier: GPL-2.0-or-later
# The copy and commit engines under races and failures: what a snapshot
# read returns while its chunk is being copied, and what is on disk when
# an origin write overflows the COW.
#
# Args: the parts to run (all without).
# Disks: vda origin (32M), vdb and vdc COWs (64M).
. ./lib.sh

dmsetup targets | grep -q '^delay ' || skip "no dm-delay in the guest"
size=$(sectors /dev/vda)

# header_valid DEV: the valid field of the persistent COW header on DEV.
header_valid() {
        dd if="$1" bs=4096 count=1 iflag=direct 2>/dev/null | od -An -tu4 -j4 -N4 | tr -d ' '
}

racing_reads() {
        step "snapshot reads racing origin writes of their chunk see the old data"
        # Reads of the origin held 20 ms by dm-delay, writes not: a snapshot
        # read sent to the origin once the write's copy is done is overtaken
        # by the write, unless the write waits for it.
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
}

overflow() {
        step "the origin write that overflows the COW waits for the invalid header"
        # 16 chunks of 4 KiB: the header, one area and 14 exceptions.
        zero_cow /dev/vdc
        must rbio fill /dev/vda 1
        must dmsetup create c --table "0 128 delay /dev/vdc 0 0 /dev/vdc 0 0"
        make_origin rollback o /dev/vda
        make_snapshot rollback o s /dev/mapper/c 8 || fail "create s"
        must dd if=/dev/zero of=/dev/mapper/o bs=4096 count=14 oflag=direct 2>/dev/null
        [ "$(snapshot_status s)" = "128/128 16" ] || fail "s not full: $(snapshot_status s)"
        # From now on every write to the COW, the header's too, takes 5 s.
        must dmsetup suspend c
        must dmsetup load c --table "0 128 delay /dev/vdc 0 0 /dev/vdc 0 5000"
        must dmsetup resume c
        dmesg -c > /dev/null
        must dd if=/dev/zero of=/dev/mapper/o bs=4096 seek=100 count=1 oflag=direct 2>/dev/null
        # Had the power gone now, the snapshot would have to be invalid.
        valid=$(header_valid /dev/vdc)
        [ "$valid" = 0 ] || fail "the write overflowing the COW completed while its header said valid ($valid)"
        [ "$(snapshot_status s)" = Invalid ] || fail "s not invalid: $(snapshot_status s)"
        no_splat "overflow"
        remove_all
        for impl in rollback upstream; do
                make_origin $impl o /dev/vda
                make_snapshot $impl o s /dev/vdc 8 || fail "$impl: load the overflowed COW"
                [ "$(snapshot_status s)" = Invalid ] || fail "$impl: s not invalid: $(snapshot_status s)"
                remove_all
        done
}

for part in ${*:-racing_reads overflow}; do
        $part
done
pass "core"
