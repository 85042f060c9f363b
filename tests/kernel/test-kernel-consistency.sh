# SPDX-License-Identifier: GPL-2.0-or-later
# Random writes to the origin and to the snapshots never change what any
# other device shows.  Every device is compared with a model file that the
# same writes were applied to.  Arg 1: direct or buffered.
#
# Disks: vda origin (32M), vdb..vde COWs.
. ./lib.sh

io=${1:-direct}
flag=
[ "$io" = direct ] && flag=--direct
origin_bytes=$((32 * 1024 * 1024))

run_case() {
        local nsnap=$1 chunk=$2 bs=$3 seed=$4 i pids=
        step "$nsnap snapshot(s), chunk $chunk sectors, $bs-byte $io writes"
        must rbio fill /dev/vda "$seed"
        make_origin rollback o /dev/vda
        must dd if=/dev/mapper/o of=/tmp/model-o bs=1M 2>/dev/null
        i=1
        while [ $i -le "$nsnap" ]; do
                zero_cow "/dev/vd$(echo bcde | cut -c$i)"
                make_snapshot rollback o "s$i" "/dev/vd$(echo bcde | cut -c$i)" "$chunk" || fail "create s$i"
                cp /tmp/model-o "/tmp/model-s$i"
                # Origin writes between snapshots, so that they differ.
                must rbio write /dev/mapper/o /tmp/model-o --seed $((seed + i)) --count 100 --bs "$bs" $flag
                i=$((i + 1))
        done

        # Concurrent: origin, every snapshot but s1 written, s1 read.  With
        # --crowd the threads of a writer write slices of the same blocks in
        # step: they race on the copy-on-write of every chunk they touch.
        rbio write /dev/mapper/o /tmp/model-o --seed $((seed + 10)) --count 150 --bs "$bs" --threads 4 --crowd $flag > /tmp/w-o.log &
        pids="$!"
        i=2
        while [ $i -le "$nsnap" ]; do
                rbio write "/dev/mapper/s$i" "/tmp/model-s$i" --seed $((seed + 20 + i)) --count 100 --bs "$bs" --threads 2 --crowd $flag > "/tmp/w-s$i.log" &
                pids="$pids $!"
                i=$((i + 1))
        done
        must rbio cmp /dev/mapper/s1 /tmp/model-s1
        for p in $pids; do
                wait "$p" || fail "a writer failed"
        done
        # s1 gets writes of its own too, now that the others are done.
        must rbio write /dev/mapper/s1 /tmp/model-s1 --seed $((seed + 30)) --count 100 --bs "$bs" $flag

        must rbio cmp /dev/mapper/o /tmp/model-o
        i=1
        while [ $i -le "$nsnap" ]; do
                must rbio cmp "/dev/mapper/s$i" "/tmp/model-s$i"
                snapshot_status "s$i" | grep -q '^[0-9]*/[0-9]* [0-9]*$' || fail "s$i status: $(snapshot_status "s$i")"
                i=$((i + 1))
        done
        remove_all
        rm -f /tmp/model-*
}

seed=100
for nsnap in 1 2 4; do
        for chunk in 8 64 1024; do
                for bs in 4096 12288; do
                        run_case "$nsnap" "$chunk" "$bs" "$seed"
                        seed=$((seed + 100))
                done
        done
done
pass "origin and snapshots stay independent ($io)"
