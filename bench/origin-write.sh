# SPDX-License-Identifier: GPL-2.0-or-later
# Guest half of bench/run: random 4 KiB direct writes to an origin with 0, 1
# and 4 snapshots, through rollback-origin and through upstream
# snapshot-origin, in one boot, one at a time (QD1) and from 16 writers at
# once (QD16).  Prints "BENCH impl snapshots seconds" and "BENCH16 ...".
#
# Disks: vda origin (256M), vdb the pool (256M) that the COWs are carved
# from, as rollbackd does it.
. ./lib.sh

bytes=${1:-16777216}
rounds=${2:-2}
STORE=${3:-P}
count=$((bytes / 4096))

# one_run IMPL SNAPSHOTS ROUND WRITERS
one_run() {
        local impl=$1 n=$2 round=$3 writers=$4 i=1 t tag=BENCH
        make_origin "$impl" o /dev/vda
        while [ $i -le "$n" ]; do
                must dmsetup create "cow$i" --table "0 131072 linear /dev/vdb $(((i - 1) * 131072))"
                zero_cow "/dev/mapper/cow$i"
                make_snapshot "$impl" o "s$i" "/dev/mapper/cow$i" 8 "${STORE:-P}" || fail "create s$i"
                i=$((i + 1))
        done
        t=$(rbio write /dev/mapper/o --seed $((round * 10 + n)) --count "$count" --threads "$writers" --direct |
            sed -n 's/^write_elapsed_s=\([0-9.]*\).*/\1/p')
        [ -n "$t" ] || fail "$impl with $n snapshots, $writers writers: no result"
        [ "$writers" = 1 ] || tag=BENCH$writers
        echo "$tag $impl $n $t"
        remove_all
}

t=$(rbio write /dev/vda --seed 1 --count "$count" --direct | sed -n 's/^write_elapsed_s=\([0-9.]*\).*/\1/p')
echo "BENCH raw 0 $t"
round=1
while [ $round -le "$rounds" ]; do
        for n in 0 1 4; do
                # Who goes first alternates between rounds.
                if [ $((round % 2)) = 1 ]; then order="rollback upstream"; else order="upstream rollback"; fi
                for impl in $order; do
                        one_run $impl $n $round 1
                        one_run $impl $n $round 16
                done
        done
        round=$((round + 1))
done
pass "benchmark done"
