# SPDX-License-Identifier: GPL-2.0-or-later
# The upstream snapshot target is the oracle: a COW written through one
# implementation loads in the other with the same status and the same bytes,
# and the same workload through each writes byte-identical COW devices.
#
# Disks: vda origin (32M), vdb..vde COWs (64M).
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

# same_bytes CHUNK BS SEED: one workload, once per implementation.
same_bytes() {
        local impl cow chunk=$1 bs=$2 seed=$3
        step "same workload, same COW bytes: chunk $chunk, $bs-byte writes"
        for impl in rollback upstream; do
                cow=/dev/vdd
                [ "$impl" = upstream ] && cow=/dev/vde
                must rbio fill /dev/vda "$seed"
                must dd if=/dev/zero of="$cow" bs=1M count=64 2>/dev/null
                make_origin "$impl" o /dev/vda
                make_snapshot "$impl" o s "$cow" "$chunk" || fail "$impl: create s"
                must rbio write /dev/mapper/o --seed $((seed + 1)) --count 200 --bs "$bs" --direct
                must rbio write /dev/mapper/s --seed $((seed + 2)) --count 100 --bs "$bs" --direct
                must rbio write /dev/mapper/o --seed $((seed + 3)) --count 100 --bs "$bs" --direct
                echo "$impl: $(snapshot_status s)"
                remove_all
        done
        must rbio cmp /dev/vdd /dev/vde
}

handover rollback 8 4096 1000
handover upstream 8 4096 2000
handover rollback 64 12288 3000
handover upstream 64 12288 4000
handover rollback 1024 4096 5000
handover upstream 1024 4096 6000
same_bytes 8 4096 7000
same_bytes 64 4096 8000
pass "COW format compatible with upstream both ways"
