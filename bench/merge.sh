# SPDX-License-Identifier: GPL-2.0-or-later
# Guest half of bench/run merge: the time to merge a COW back into the
# origin, through rollback-merge and through upstream snapshot-merge, for a
# COW filled by random 4 KiB writes and one filled sequentially, and the
# latency of random 4 KiB reads, then writes, of the origin while a merge
# of the random COW runs (a second merge: a merge gives way to them, so
# its time is not the one compared).  Prints "BENCH case impl seconds",
# "BENCHLAT impl ..." (reads) and "BENCHWLAT impl ..." (writes), each with
# p50, p99 and max.  The sequential case runs three times; bench/run keeps
# the best.
#
# Disks: vda origin (128M), vdb COW (160M).
. ./lib.sh

mib=${1:-64}
count=$((mib * 256))

uptime_s() {
        cut -d' ' -f1 /proc/uptime
}

# The I/O that measures latency: random 4 KiB direct reads, then writes.
probe_count=1000
read_probe() {
        rbio readlat "$1" --seed 9 --count $probe_count --direct --latency | grep _lat_ms
}
write_probe() {
        rbio write "$1" --seed 11 --count $probe_count --span $((mib * 1048576)) --direct --latency | grep _lat_ms
}

# one IMPL random|loaded|sequential: random merges with no other I/O
# (the time compared), loaded ones with the probes running (their
# latency), sequential ones.
one() {
        local impl=$1 how=$2 size t0 t1 lat= wlat=
        must rbio fill /dev/vda 1
        zero_cow /dev/vdb
        make_origin "$impl" o /dev/vda
        make_snapshot "$impl" o s /dev/vdb 8 || fail "create s"
        if [ "$how" = sequential ]; then
                dd if=/dev/vda of=/dev/mapper/o bs=1M count="$mib" seek=1 oflag=direct 2>/dev/null ||
                        fail "sequential fill"
        else
                must rbio write /dev/mapper/o --seed 7 --count "$count" --span $((mib * 1048576)) --direct > /dev/null
        fi
        sync
        size=$(sectors /dev/mapper/o-real)
        must dmsetup suspend o
        must dmsetup remove s
        must dmsetup reload o --table "0 $size $(merge_target "$impl") /dev/mapper/o-real /dev/vdb P 8"
        echo "$impl $how: $(dmsetup status o)" >&2
        t0=$(uptime_s)
        must dmsetup resume o
        if [ "$how" = loaded ]; then
                lat=$(read_probe /dev/mapper/o)
                wlat=$(write_probe /dev/mapper/o)
                [ "$(merge_left o)" = 0 ] && echo "$impl: the merge ended before the reads and writes did" >&2
        fi
        # Finer than wait_merged: this is the time measured.
        while [ "$(merge_left o)" != 0 ]; do
                sleep 0.02
        done
        t1=$(uptime_s)
        echo "BENCH $how $impl $(echo "$t0 $t1" | awk '{ printf "%.2f", $2 - $1 }')"
        [ -n "$lat" ] && echo "BENCHLAT $impl $lat"
        [ -n "$wlat" ] && echo "BENCHWLAT $impl $wlat"
        remove_all
}

must rbio fill /dev/vda 1
t=$(rbio write /dev/vda --seed 7 --count "$count" --span $((mib * 1048576)) --direct |
    sed -n 's/^write_elapsed_s=\([0-9.]*\).*/\1/p')
echo "BENCH raw-random-writes disk $t"
echo "BENCHLAT idle $(read_probe /dev/vda)"
echo "BENCHWLAT idle $(write_probe /dev/vda)"
for impl in upstream rollback; do
        one "$impl" loaded
        one "$impl" random
done
# A sequential merge takes well under a second: three rounds, the best counts.
for round in 1 2 3; do
        for impl in upstream rollback; do
                one "$impl" sequential
        done
done
pass "benchmark done"
