# SPDX-License-Identifier: GPL-2.0-or-later
# Every crash point: the writes of an origin-write workload and of a merge
# are recorded with upstream's dm-log-writes and replayed (logreplay) to
# each FLUSH and FUA, the points a disk promises to keep.  At each point
# the COW loads in rollback-snap and in upstream snapshot, and the snapshot
# either shows exactly the data from before the workload or is Invalid;
# a merge resumed from each point ends at the snapshot's bytes.
#
# Disks: vda (16M) the origin (first 8M) and the COW (last 8M), so both
# are logged in one order; vdb the log; vdc the replayed image; vdd the
# scratch COW that keeps each check from writing to the replayed image.
. ./lib.sh

half=16384      # sectors: 8M of origin, 8M of COW
chunk=8

cow_sectors=$half

# over DEV: o-real and cowl (cow_sectors of it), the two halves of DEV.
over() {
        must dmsetup create o-real --table "0 $half linear $1 0"
        must dmsetup create cowl --table "0 $cow_sectors linear $1 $half"
}

# start_log: the halves move onto lw, which logs every write to vda on
# vdb; vdc gets the image the log starts from.  The stack above is
# suspended meanwhile: nothing is in flight.
start_log() {
        must dmsetup suspend "$@"
        sync
        echo 3 > /proc/sys/vm/drop_caches
        must dd if=/dev/vda of=/dev/vdc bs=1M conv=fsync 2>/dev/null
        must dd if=/dev/zero of=/dev/vdb bs=1M count=1 conv=fsync 2>/dev/null
        must dmsetup create lw --table "0 $((2 * half)) log-writes /dev/vda /dev/vdb"
        must dmsetup reload o-real --table "0 $half linear /dev/mapper/lw 0"
        must dmsetup reload cowl --table "0 $cow_sectors linear /dev/mapper/lw $half"
        must dmsetup resume o-real
        must dmsetup resume cowl
        must dmsetup resume "$@"
}

# stop_log: the super block gets the number of entries, then all goes.
stop_log() {
        must dmsetup message lw 0 mark end
        remove_all
}

# scratch: the replayed image behind a transient snapshot (upstream, on
# vdd), cut into halves: checks write there, not into the image.
scratch() {
        must dmsetup create scratch --table "0 $((2 * half)) snapshot /dev/vdc /dev/vdd N $chunk"
        over /dev/mapper/scratch
}

# each_point CHECK: replays the log point by point, calling CHECK POSITION
# at each; sets points.
each_point() {
        local pos=0 out rc
        points=0
        while :; do
                out=$(logreplay /dev/vdb /dev/vdc "$pos")
                rc=$?
                [ $rc = 0 ] || [ $rc = 3 ] || fail "logreplay at $pos: $out"
                pos=${out%% *}
                "$1" "$out"
                points=$((points + 1))
                [ $rc = 3 ] && return 0
        done
}

# check_snapshot POINT: the snapshot at POINT, in both implementations.
check_snapshot() {
        local impl st
        for impl in rollback upstream; do
                scratch
                must dmsetup create s --table "0 $half $(snapshot_target $impl) /dev/mapper/o-real /dev/mapper/cowl P $chunk"
                st=$(snapshot_status s)
                case $st in
                Invalid) invalid=$((invalid + 1)) ;;
                [0-9]*/*) same_sum /dev/mapper/s "$pre" "$impl at $1: the snapshot has other data ($st)" ;;
                *) fail "$impl at $1: status '$st'" ;;
                esac
                remove_all
        done
}

# check_merge POINT: a merge loaded at POINT ends at the snapshot's bytes.
check_merge() {
        scratch
        must dmsetup create m --table "0 $half rollback-merge /dev/mapper/o-real /dev/mapper/cowl P $chunk"
        wait_merged m
        same_sum /dev/mapper/m "$snap" "at $1: the merged origin is not the snapshot"
        same_sum /dev/mapper/o-real "$snap" "at $1: the origin under the merge is not the snapshot"
        remove_all
}

# log_snapshot SEED: o and s over vda filled with SEED, pre the snapshot's
# checksum, the log started and /tmp/model what o holds.
log_snapshot() {
        must rbio fill /dev/vda "$1"
        over /dev/vda
        zero_cow /dev/mapper/cowl
        must dmsetup create o --table "0 $half rollback-origin /dev/mapper/o-real"
        must dmsetup create s --table "0 $half rollback-snap /dev/mapper/o-real /dev/mapper/cowl P $chunk"
        pre=$(checksum /dev/mapper/s) || fail "cannot read the snapshot"
        start_log o s
        cp /dev/mapper/o /tmp/model
}

step "origin writes of four threads, recorded"
log_snapshot 1
must rbio write /dev/mapper/o /tmp/model --seed 3 --count 64 --bs 4096 --threads 4 --direct
same_sum /dev/mapper/s "$pre" "the snapshot changed"
stop_log
step "the snapshot at every flush and FUA"
invalid=0
each_point check_snapshot
echo "$points points checked, the snapshot invalid at $invalid"
[ "$invalid" = 0 ] || fail "a snapshot that did not overflow was invalid"

step "origin writes that overflow a 256 KiB COW, recorded"
cow_sectors=512
log_snapshot 5
must rbio write /dev/mapper/o /tmp/model --seed 6 --count 48 --bs 8192 --threads 2 --direct
[ "$(snapshot_status s)" = Invalid ] || fail "the snapshot did not overflow: $(snapshot_status s)"
must rbio cmp /dev/mapper/o /tmp/model
stop_log
step "the overflowing snapshot at every flush and FUA: Invalid or the old data"
invalid=0
each_point check_snapshot
echo "$points points checked, the snapshot invalid at $invalid"
[ "$invalid" -gt 0 ] || fail "the snapshot was never invalid on disk"
cow_sectors=$half

step "a merge, recorded"
must rbio fill /dev/vda 2
over /dev/vda
zero_cow /dev/mapper/cowl
must dmsetup create o --table "0 $half rollback-origin /dev/mapper/o-real"
must dmsetup create s --table "0 $half rollback-snap /dev/mapper/o-real /dev/mapper/cowl P $chunk"
cp /dev/mapper/o /tmp/model
# More chunks than one merge batch holds: several commits.
must rbio write /dev/mapper/o /tmp/model --seed 4 --count 700 --bs 4096 --direct
snap=$(checksum /dev/mapper/s) || fail "cannot read the snapshot"
must dmsetup remove s
start_log o
must dmsetup suspend o
must dmsetup reload o --table "0 $half rollback-merge /dev/mapper/o-real /dev/mapper/cowl P $chunk"
must dmsetup resume o
wait_merged o
same_sum /dev/mapper/o "$snap" "the recorded merge did not end at the snapshot"
stop_log
step "a merge resumed from every flush and FUA"
each_point check_merge
echo "$points points checked"
pass "every crash point"
