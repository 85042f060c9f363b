# SPDX-License-Identifier: GPL-2.0-or-later
# The copy and commit engines under races and failures: what a snapshot
# read returns while its chunk is being copied, what is on disk when an
# origin write overflows the COW; and COWs whose metadata is corrupt.
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

# put_le64 DEV OFFSET VALUE: writes VALUE (hex, 16 digits) little-endian.
put_le64() {
        local hex=$3 bytes= i
        for i in 14 12 10 8 6 4 2 0; do
                bytes="$bytes\\$(printf %03o 0x${hex:$i:2})"
        done
        printf "$bytes" | dd of="$1" bs=1 seek="$2" conv=notrunc,fsync 2>/dev/null
}

corrupt_store() {
        step "a COW whose exceptions point at metadata or past its end is refused"
        must rbio fill /dev/vda 1
        make_origin rollback o /dev/vda
        local new_chunk why
        # Chunks of 4 KiB: the header is chunk 0, area 0 chunk 1 (its first
        # entry at byte 4096), area 1 chunk 258, the COW 16384 chunks long.
        for bad in "2000000000000000 points past the end" "0000000000004000 points past the end" \
                   "0000000000000001 points at COW metadata" "0000000000000102 points at COW metadata"; do
                new_chunk=${bad%% *}
                why=${bad#* }
                zero_cow /dev/vdb
                make_snapshot rollback o s /dev/vdb 8 || fail "create s"
                must dd if=/dev/zero of=/dev/mapper/o bs=4096 count=3 oflag=direct 2>/dev/null
                must dmsetup remove s
                put_le64 /dev/vdb $((4096 + 8)) $new_chunk
                dmesg -c > /dev/null
                must dmsetup suspend o
                if dmsetup create s --table "0 $size rollback-snap /dev/mapper/o-real /dev/vdb P 8"; then
                        dmsetup resume o
                        fail "a COW with new_chunk 0x$new_chunk loaded: $(snapshot_status s)"
                fi
                must dmsetup resume o
                dmesg | grep -q "COW metadata $why" ||
                        fail "no 'COW metadata $why' for new_chunk 0x$new_chunk: $(dmesg | tail -n 3)"
                no_splat "new_chunk 0x$new_chunk"
                echo "refused: new_chunk 0x$new_chunk"
        done
        remove_all
}

pressure() {
        step "origin writes complete with pending exceptions from the reserves only"
        local param=/sys/module/dm_rollback/parameters/fail_pending_alloc pid i=0
        must rbio fill /dev/vda 1
        must dd if=/dev/zero of=/tmp/model bs=1M count=32 2>/dev/null
        must rbio fill /tmp/model 1
        must cp /tmp/model /tmp/o-model
        zero_cow /dev/vdb
        zero_cow /dev/vdc
        make_origin rollback o /dev/vda
        make_snapshot rollback o s1 /dev/vdb 8 || fail "create s1"
        make_snapshot rollback o s2 /dev/vdc 8 || fail "create s2"
        dmesg -c > /dev/null
        echo Y > $param || fail "cannot set $param"
        # 64 writes of 16 chunks at a time, two snapshots: far more pending
        # exceptions than a reserve holds.
        rbio write /dev/mapper/o /tmp/o-model --seed 9 --count 600 --bs 65536 --threads 64 \
                --direct > /tmp/pressure.out 2>&1 &
        pid=$!
        while kill -0 $pid 2>/dev/null; do
                i=$((i + 1))
                if [ $i -ge 900 ]; then
                        # Not fail: its dmsetup status would block on the stuck snapshot.
                        echo "FAIL: origin writes still blocked after 180 s"
                        dmesg | tail -n 20
                        exit 1
                fi
                sleep 0.2
        done
        wait $pid || fail "rbio write: $(cat /tmp/pressure.out)"
        echo N > $param
        must rbio cmp /dev/mapper/o /tmp/o-model
        must rbio cmp /dev/mapper/s1 /tmp/model
        must rbio cmp /dev/mapper/s2 /tmp/model
        no_splat "pressure"
        remove_all
        rm -f /tmp/model /tmp/o-model
}

group_commit() {
        step "snapshots that share copies commit them together without a lock warning"
        must rbio fill /dev/vda 1
        must dd if=/dev/zero of=/tmp/model bs=1M count=32 2>/dev/null
        must rbio fill /tmp/model 1
        zero_cow /dev/vdb
        zero_cow /dev/vdc
        make_origin rollback o /dev/vda
        make_snapshot rollback o s1 /dev/vdb 8 || fail "create s1"
        make_snapshot rollback o s2 /dev/vdc 8 || fail "create s2"
        dmesg -c > /dev/null
        must rbio write /dev/mapper/o --seed 11 --count 200 --threads 4 --direct > /dev/null
        must rbio cmp /dev/mapper/s1 /tmp/model
        must rbio cmp /dev/mapper/s2 /tmp/model
        no_splat "group commit"
        remove_all
        rm -f /tmp/model
}

for part in ${*:-racing_reads overflow corrupt_store pressure group_commit}; do
        $part
done
pass "core"
