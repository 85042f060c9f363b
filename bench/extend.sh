# SPDX-License-Identifier: GPL-2.0-or-later
# Guest half of bench/run extend: a COW that must grow while the origin is
# written, dm-rollback against upstream in one boot.  The COW is a linear
# device over vdb, grown by a reload of it alone, as rollbackd does, by a
# grower that follows rollbackd's rules: it grows a COW past 70% full
# (autoextend_threshold) by STEP_MIB.  rollback-snap is loaded as the
# library loads it (low_water_mark at 70%, no_space queue 60000) and the
# grower wakes on its table events; upstream snapshot has neither, and the
# grower polls it every 2 s, rollbackd's fallback for upstream targets.
#
#   latency: random 64 KiB direct origin writes at full speed (LAT_MIB in
#            all) into a 4 MiB first COW, each write's time:
#            "BENCHLAT impl p50=.. p99=.. max=.. invalid=0|1"
#   minimum: a full-speed 256 MiB write (1 MiB direct) into first COWs of
#            4, 8, 16 ... MiB, the smallest that stays valid:
#            "BENCHMIN impl MiB" (0: none up to 256 MiB)
#
# Disks: vda origin (288M), vdb the COW's disk (288M).
. ./lib.sh

step_mib=${STEP_MIB:-32}
lat_mib=${LAT_MIB:-256}
chunk=8
cowdisk=$(sectors /dev/vdb)

# used_total: "allocated total" sectors of s, or its status when not valid.
used_total() {
        local st
        st=$(snapshot_status s)
        case $st in
        [0-9]*/[0-9]*\ [0-9]*) echo "${st%% *}" | tr / ' ' ;;
        *) echo "$st" ;;
        esac
}

grow_cw() {
        must dmsetup reload cw --table "0 $1 linear /dev/vdb 0"
        must dmsetup resume cw
}

# grower IMPL LEN: grows cw from LEN sectors until /tmp/stop-grow exists.
grower() {
        local impl=$1 len=$2 ev
        while [ ! -e /tmp/stop-grow ]; do
                ev=$(dmsetup info -c --noheadings -o events s | tr -d ' ')
                set -- $(used_total)
                [ $# = 2 ] || return 0          # invalid: nothing left to grow
                if [ $(($1 * 100)) -ge $(($2 * 70)) ] && [ "$len" -lt "$cowdisk" ]; then
                        len=$((len + step_mib * 2048))
                        [ "$len" -le "$cowdisk" ] || len=$cowdisk
                        grow_cw "$len"
                        continue
                fi
                if [ "$impl" = rollback ]; then
                        timeout 2 dmsetup wait s "$ev" > /dev/null 2>&1
                else
                        sleep 2
                fi
        done
}

# setup IMPL MIB: origin o over vda, snapshot s with a MIB first COW.
setup() {
        local impl=$1 len=$(($2 * 2048)) size features=
        remove_all
        zero_cow /dev/vdb
        must dmsetup create cw --table "0 $len linear /dev/vdb 0"
        make_origin "$impl" o /dev/vda
        # The mark in chunks: free space at 30% of the COW, as the library sets it.
        [ "$impl" = rollback ] && features="5 low_water_mark $((len * 30 / 100 / chunk)) no_space queue 60000"
        make_snapshot "$impl" o s /dev/mapper/cw $chunk P "$features" || fail "create s ($impl)"
        rm -f /tmp/stop-grow
        grower "$impl" "$len" &
        grower_pid=$!
}

finish() {
        touch /tmp/stop-grow
        wait "$grower_pid"
        case $(snapshot_status s) in Invalid*) invalid=1 ;; *) invalid=0 ;; esac
}

must rbio fill /dev/vda 1
for impl in rollback upstream; do
        setup $impl 4
        out=$(rbio write /dev/mapper/o --seed 2 --count $((lat_mib * 16)) --bs 65536 --direct --latency) ||
                fail "$impl: the writes failed"
        finish
        lat=$(echo "$out" | sed -n 's/^write_lat_ms //p')
        echo "BENCHLAT $impl $lat invalid=$invalid"
done

for impl in rollback upstream; do
        found=0
        for mib in 4 8 16 32 64 128 256; do
                setup $impl $mib
                must dd if=/dev/zero of=/dev/mapper/o bs=1M count=256 oflag=direct 2>/dev/null
                finish
                echo "  $impl, first COW $mib MiB: $(snapshot_status s)"
                if [ $invalid = 0 ]; then
                        found=$mib
                        break
                fi
        done
        echo "BENCHMIN $impl $found"
done
remove_all
pass "benchmark done"
