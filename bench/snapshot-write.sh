# SPDX-License-Identifier: GPL-2.0-or-later
# Guest half of bench/run snapshot-write: random direct writes to a
# snapshot of whole 4 KiB chunks (the write is the chunk's copy: nothing is
# read from the origin) and of half chunks (each first copies its chunk
# from the origin), through rollback-snap and upstream snapshot, in one
# boot.  Prints "BENCH impl full|half seconds".
#
# Disks: vda origin (256M), vdb the COW (256M).
. ./lib.sh

bytes=${1:-8388608}
rounds=${2:-2}

# one IMPL full|half ROUND
one() {
        local impl=$1 how=$2 round=$3 bs=4096 t
        [ "$how" = half ] && bs=2048
        make_origin "$impl" o /dev/vda
        zero_cow /dev/vdb
        make_snapshot "$impl" o s /dev/vdb 8 || fail "create s"
        # Spans of 16 times as many blocks as writes: nearly every write has a chunk of its own.
        t=$(rbio write /dev/mapper/s --seed $((round * 10)) --count $((bytes / 4096)) --bs "$bs" \
                --span $((bytes * 16 * bs / 4096)) --direct | sed -n 's/^write_elapsed_s=\([0-9.]*\).*/\1/p')
        [ -n "$t" ] || fail "$impl $how: no result"
        echo "BENCH $impl $how $t"
        remove_all
}

must rbio fill /dev/vda 1
round=1
while [ $round -le "$rounds" ]; do
        for how in full half; do
                for impl in rollback upstream; do
                        one $impl $how $round
                done
        done
        round=$((round + 1))
done
pass "benchmark done"
