# SPDX-License-Identifier: GPL-2.0-or-later
# The upstream snapshot target is the oracle: a COW written through one
# implementation loads in the other with the same status and the same bytes,
# and the same workload through each writes the same COW devices: byte for
# byte with one thread, the same exceptions and data with several.
#
# Metadata areas crossed: several at chunk 8 (256 exceptions an area), two
# at chunk 64 (2048, the whole 96M origin); at 1024 (32768 an area: 16 GiB
# of data) not on test disks.
#
# Disks: vda origin (32M), vdb, vdc COWs (64M), vdd, vde COWs (112M),
# vdf origin (96M).
. ./lib.sh

other() {
        case $1 in rollback) echo upstream ;; upstream) echo rollback ;; esac
}

# load IMPL CHUNK: origin o and snapshots s1 (vdb), s2 (vdc) over existing COWs.
load() {
        make_origin "$1" o /dev/vda
        make_snapshot "$1" o s1 /dev/vdb "$2" || fail "$1: load s1"
        make_snapshot "$1" o s2 /dev/vdc "$2" || fail "$1: load s2"
}

compare_all() {
        must rbio cmp /dev/mapper/o /tmp/model-o
        must rbio cmp /dev/mapper/s1 /tmp/model-s1
        must rbio cmp /dev/mapper/s2 /tmp/model-s2
}

# handover WRITER CHUNK BS SEED
handover() {
        local writer=$1 reader chunk=$2 bs=$3 seed=$4 st1 st2
        reader=$(other "$writer")
        step "written by $writer, read by $reader: chunk $chunk, $bs-byte writes"
        must rbio fill /dev/vda "$seed"
        zero_cow /dev/vdb
        zero_cow /dev/vdc
        make_origin "$writer" o /dev/vda
        make_snapshot "$writer" o s1 /dev/vdb "$chunk" || fail "create s1"
        cp /dev/vda /tmp/model-o
        cp /tmp/model-o /tmp/model-s1
        must rbio write /dev/mapper/o /tmp/model-o --seed $((seed + 1)) --count 150 --bs "$bs" --direct
        make_snapshot "$writer" o s2 /dev/vdc "$chunk" || fail "create s2"
        cp /tmp/model-o /tmp/model-s2
        must rbio write /dev/mapper/o /tmp/model-o --seed $((seed + 2)) --count 150 --bs "$bs" --threads 2 --direct
        must rbio write /dev/mapper/s2 /tmp/model-s2 --seed $((seed + 3)) --count 100 --bs "$bs"
        compare_all
        st1=$(snapshot_status s1)
        st2=$(snapshot_status s2)
        remove_all

        load "$reader" "$chunk"
        [ "$(snapshot_status s1)" = "$st1" ] || fail "s1 status: $writer '$st1', $reader '$(snapshot_status s1)'"
        [ "$(snapshot_status s2)" = "$st2" ] || fail "s2 status: $writer '$st2', $reader '$(snapshot_status s2)'"
        compare_all

        # Go on writing through the reader, then back to the writer.
        must rbio write /dev/mapper/o /tmp/model-o --seed $((seed + 4)) --count 100 --bs "$bs" --direct
        must rbio write /dev/mapper/s1 /tmp/model-s1 --seed $((seed + 5)) --count 100 --bs "$bs" --direct
        compare_all
        st1=$(snapshot_status s1)
        remove_all
        load "$writer" "$chunk"
        [ "$(snapshot_status s1)" = "$st1" ] || fail "s1 status after round trip: '$st1' vs '$(snapshot_status s1)'"
        compare_all
        remove_all
        rm -f /tmp/model-*
}

# workload IMPL ORIGIN CHUNK SEED THREADS COW...: one snapshot per COW, taken
# one after the other with origin writes between (each origin write copies to
# every snapshot there is: the grouped commit), a write to each snapshot, and
# at chunk 64 and up a write of the whole origin, as one area holds only
# chunk_bytes / 16 exceptions.  Leaves the statuses in /tmp/status-IMPL.
workload() {
        local impl=$1 origin=$2 chunk=$3 seed=$4 threads=$5 i=1 cow crowd=
        shift 5
        [ "$threads" -gt 1 ] && crowd=--crowd
        must rbio fill "$origin" "$seed"
        make_origin "$impl" o "$origin"
        for cow; do
                make_snapshot "$impl" o "s$i" "$cow" "$chunk" || fail "$impl: create s$i"
                # With --crowd the threads meet on every chunk they copy.
                must rbio write /dev/mapper/o --seed $((seed + i)) --count 250 --threads "$threads" $crowd --direct
                must rbio write "/dev/mapper/s$i" --seed $((seed + 10 + i)) --count 50 --threads "$threads" --direct
                i=$((i + 1))
        done
        must rbio write /dev/mapper/o --seed $((seed + 20)) --count 100 --threads "$threads" --direct
        [ "$chunk" -ge 64 ] && must rbio fill /dev/mapper/o $((seed + 21))
        : > "/tmp/status-$impl"
        i=1
        for cow; do
                echo "s$i $(snapshot_status "s$i")" >> "/tmp/status-$impl"
                i=$((i + 1))
        done
        cat "/tmp/status-$impl"
        remove_all
}

# cowmaps IMPL COW...: the canonical form of each COW (rbio validates the
# format as it reads) in /tmp/map-IMPL-N, and its checksum in /tmp/sum-IMPL-N.
cowmaps() {
        local impl=$1 i=1 cow
        shift
        for cow; do
                rbio cowmap "$cow" > "/tmp/map-$impl-$i" || fail "$impl: bad COW on $cow"
                checksum "$cow" > "/tmp/sum-$impl-$i" || fail "$impl: cannot read $cow"
                i=$((i + 1))
        done
}

# same_cow HOW ORIGIN CHUNK SEED THREADS COW...: one workload once per
# implementation.  With one thread the COWs must be byte-identical; with
# several, exceptions may be allocated in another order, so only the
# canonical forms (header, exceptions and their data) must be the same.
same_cow() {
        local how=$1 origin=$2 chunk=$3 seed=$4 threads=$5 impl cow i
        shift 5
        step "same workload, same COWs ($how): chunk $chunk, $# snapshot(s), $threads thread(s)"
        for impl in rollback upstream; do
                for cow; do
                        # Fully zeroed: bytes left from the other run must not hide a difference.
                        must dd if=/dev/zero of="$cow" bs=1M count=$(($(blockdev --getsize64 "$cow") / 1048576)) 2>/dev/null
                done
                workload "$impl" "$origin" "$chunk" "$seed" "$threads" "$@"
                cowmaps "$impl" "$@"
        done
        cmp -s /tmp/status-rollback /tmp/status-upstream || fail "statuses differ"
        i=1
        for cow; do
                if ! cmp -s "/tmp/map-rollback-$i" "/tmp/map-upstream-$i"; then
                        diff "/tmp/map-rollback-$i" "/tmp/map-upstream-$i" | head -n 20
                        fail "s$i: other exceptions or data than upstream's"
                fi
                if [ "$how" = bytes ] && ! cmp -s "/tmp/sum-rollback-$i" "/tmp/sum-upstream-$i"; then
                        fail "s$i: COW bytes differ from upstream's"
                fi
                i=$((i + 1))
        done
        head -n 2 /tmp/map-rollback-1
        rm -f /tmp/map-* /tmp/sum-* /tmp/status-*
}

handover rollback 8 4096 1000
handover upstream 8 4096 2000
handover rollback 64 12288 3000
handover upstream 64 12288 4000
handover rollback 1024 4096 5000
handover upstream 1024 4096 6000
same_cow bytes /dev/vda 8 7000 1 /dev/vdb /dev/vdc /dev/vdd
same_cow bytes /dev/vdf 64 8000 1 /dev/vdd /dev/vde
same_cow map /dev/vda 8 9000 4 /dev/vdb /dev/vdc /dev/vdd
same_cow map /dev/vdf 64 10000 4 /dev/vdd /dev/vde
pass "COW format compatible with upstream both ways"
