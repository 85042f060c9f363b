# SPDX-License-Identifier: GPL-2.0-or-later
# rollback-merge rolls the origin back to a snapshot while it is in use:
# writes during the merge land, another snapshot keeps its contents, and
# the result equals the snapshot plus those writes.  Upstream is the
# oracle both ways: COWs of either implementation merged by the other, and
# a merge started by one and finished by the other.
#
# Disks: vda origin (32M), vdb the merging COW, vdc another snapshot's COW.
. ./lib.sh

# make_cowd IMPL: the merge's COW becomes cowd, over vdb; for upstream,
# which has no throttle, with 50 ms on every write (each merge step
# commits one).
cow=/dev/vdb
make_cowd() {
        local delay=0
        [ "$1" = upstream ] && delay=50
        must dmsetup create cowd --table "0 $(sectors /dev/vdb) delay /dev/vdb 0 0 /dev/vdb 0 $delay"
        cow=/dev/mapper/cowd
}

# start_merge IMPL CHUNK [KIB/S]: o becomes a merge of the COW ($cow, vdb);
# initial is what it has to merge, read before it can start.  A throttle
# is set while the COW (cowd) is held suspended: no batch runs at full speed.
start_merge() {
        local size
        size=$(sectors /dev/mapper/o-real)
        must dmsetup suspend o
        must dmsetup reload o --table "0 $size $(merge_target "$1") /dev/mapper/o-real $cow P $2"
        initial=$(merge_left --inactive o) || fail "$1: no merge loaded"
        [ -n "${3:-}" ] && must dmsetup suspend cowd
        must dmsetup resume o
        if [ -n "${3:-}" ]; then
                must dmsetup message o 0 merge_throttle "$3"
                must dmsetup resume cowd
        fi
        echo "$1: $initial sectors to merge"
}

# falls_below DEV N: waits (60 s at most) until the merge on DEV has less
# than N sectors left, and sets left.
falls_below() {
        local i=0
        while :; do
                left=$(merge_left "$1") || fail "no merge on $1: $(snapshot_status "$1")"
                [ "$left" -lt "$2" ] && return 0
                i=$((i + 1))
                [ $i -lt 600 ] || fail "the merge did not go on from $2 sectors: $(snapshot_status "$1")"
                sleep 0.1
        done
}

# still_merging DEV WHEN: the merge on DEV has begun and is not done.
still_merging() {
        left=$(merge_left "$1") || fail "no merge on $1 $2: $(snapshot_status "$1")"
        [ "$left" -gt 0 ] || fail "the merge was done $2"
        [ "$left" -lt "$initial" ] || fail "the merge had not begun $2"
        echo "$2: $left of $initial sectors left"
}

# prepare IMPL CHUNK SEED: s1 (vdb) and s2 (vdc) with changes in both
# directions; the models say what each device must hold.
prepare() {
        must rbio fill /dev/vda "$3"
        zero_cow /dev/vdb
        zero_cow /dev/vdc
        make_origin "$1" o /dev/vda
        make_snapshot "$1" o s1 /dev/vdb "$2" || fail "create s1"
        cp /dev/vda /tmp/model-s1
        cp /dev/vda /tmp/model-o
        # Blocks of 4 chunks: s1's COW holds several merge batches (256
        # chunks) so that a throttled merge is caught half way.
        must rbio write /dev/mapper/o /tmp/model-o --seed $(($3 + 1)) --count 350 --bs $(($2 * 2048)) --direct
        make_snapshot "$1" o s2 /dev/vdc "$2" || fail "create s2"
        cp /tmp/model-o /tmp/model-s2
        must rbio write /dev/mapper/o /tmp/model-o --seed $(($3 + 2)) --count 300 --threads 2 --direct
        must rbio write /dev/mapper/s1 /tmp/model-s1 --seed $(($3 + 3)) --count 100 --direct
        must rbio cmp /dev/mapper/s1 /tmp/model-s1
        must rbio cmp /dev/mapper/s2 /tmp/model-s2
}

# reload IMPL CHUNK: the same COWs under the other implementation's targets.
reload_as() {
        remove_all
        make_origin "$1" o /dev/vda
        make_snapshot "$1" o s2 /dev/vdc "$2" || fail "$1: reload s2"
}

# merge_and_check SNAPIMPL MERGEIMPL CHUNK SEED [FINISHIMPL]
merge_and_check() {
        local finish=${5:-$2}
        step "snapshots by $1, merged by $2${5:+, finished by $5}: chunk $3"
        prepare "$1" "$3" "$4"
        reload_as "$2" "$3"
        cp /tmp/model-s1 /tmp/model-merge
        if [ -n "${5:-}" ]; then
                start_merge "$2" "$3"
                [ "$2" = rollback ] && must dmsetup message o 0 merge_throttle 300
                falls_below o "$initial"
                must dmsetup suspend o
                still_merging o "at the switch"
                reload_as "$finish" "$3"
        fi
        # Ours merges a batch every 12.8 s, upstream a few chunks every
        # 100 ms: the I/O below runs half way through.
        make_cowd "$finish"
        rate=
        [ "$finish" = rollback ] && rate=$(($3 * 10))
        start_merge "$finish" "$3" $rate
        falls_below o "$initial"
        still_merging o "before the I/O"
        snapshot_status o
        # In use while merging: it shows the snapshot at once, takes writes.
        must rbio cmp /dev/mapper/o /tmp/model-merge
        must rbio write /dev/mapper/o /tmp/model-merge --seed $(($4 + 4)) --count 200 --direct
        must rbio cmp /dev/mapper/o /tmp/model-merge
        must rbio cmp /dev/mapper/s2 /tmp/model-s2
        still_merging o "after the I/O"
        if [ "$finish" = rollback ]; then
                must dmsetup message o 0 merge_throttle 0
        else
                must dmsetup suspend cowd
                must dmsetup reload cowd --table "0 $(sectors /dev/vdb) linear /dev/vdb 0"
                must dmsetup resume cowd
        fi
        wait_merged o
        snapshot_status o
        must rbio cmp /dev/mapper/o /tmp/model-merge
        must rbio cmp /dev/mapper/s2 /tmp/model-s2
        # Back to a plain origin: the merged device stays as it is.
        must dmsetup suspend o
        must dmsetup reload o --table "0 $(sectors /dev/mapper/o-real) $(origin_target "$finish") /dev/mapper/o-real"
        must dmsetup resume o
        must rbio cmp /dev/mapper/o /tmp/model-merge
        must rbio cmp /dev/mapper/s2 /tmp/model-s2
        remove_all
        cow=/dev/vdb
        must rbio cmp /dev/vda /tmp/model-merge
}

step "the target and its table errors"
dmsetup targets | grep -q rollback-merge || fail "rollback-merge not registered"
zero_cow /dev/vdb
make_origin rollback o /dev/vda
size=$(sectors /dev/mapper/o-real)
must dmsetup create m --table "0 $size rollback-merge /dev/mapper/o-real /dev/vdb P 8"
must dmsetup message m 0 merge_throttle 0
must_not dmsetup message m 0 merge_throttle fast
must_not dmsetup message m 0 frobnicate
zero_cow /dev/vdc
must_not dmsetup create m2 --table "0 $size rollback-merge /dev/mapper/o-real /dev/vdc P 8"
dmesg | grep -q "A merge is already running on this origin" || fail "no error for a second merge"
must_not dmsetup create m3 --table "0 $size rollback-merge /dev/mapper/o-real /dev/vdc N 8"
dmesg | grep -q "Store does not support merging" || fail "no error for a transient merge"
must_not dmsetup create m4 --table "0 $size rollback-snap /dev/mapper/o-real /dev/vdb P 8"
dmsetup table m
remove_all

merge_and_check rollback rollback 8 10
merge_and_check rollback rollback 64 20
merge_and_check upstream rollback 8 30
merge_and_check rollback upstream 8 40
merge_and_check rollback rollback 8 50 upstream
merge_and_check upstream upstream 8 60 rollback

step "handover: the merge takes the COW of a live rollback-snap"
prepare rollback 8 70
cp /tmp/model-s1 /tmp/model-merge
must dmsetup reload o --table "0 $(sectors /dev/mapper/o-real) rollback-merge /dev/mapper/o-real /dev/vdb P 8"
must dmsetup suspend s1
must dmsetup suspend o
must dmsetup resume o
must dmsetup resume s1
dd if=/dev/mapper/s1 of=/dev/null bs=4096 count=1 iflag=direct 2>/dev/null && fail "s1 still reads after the handover"
must dmsetup remove s1
must rbio write /dev/mapper/o /tmp/model-merge --seed 74 --count 100 --direct
wait_merged o
must rbio cmp /dev/mapper/o /tmp/model-merge
must rbio cmp /dev/mapper/s2 /tmp/model-s2
remove_all

step "an invalid merging snapshot: no merge, all I/O goes to the origin"
prepare rollback 8 90
reload_as rollback 8
# The header's valid field (bytes 4-7) cleared, as an overflow leaves it.
printf '\0\0\0\0' | dd of=/dev/vdb bs=1 seek=4 conv=notrunc 2>/dev/null
must dmsetup suspend o
must dmsetup reload o --table "0 $(sectors /dev/mapper/o-real) rollback-merge /dev/mapper/o-real /dev/vdb P 8"
must dmsetup resume o
[ "$(snapshot_status o)" = Invalid ] || fail "status of an invalid merge: $(snapshot_status o)"
must rbio cmp /dev/mapper/o /tmp/model-o
must rbio write /dev/mapper/o /tmp/model-o --seed 94 --count 100 --direct
must rbio cmp /dev/mapper/o /tmp/model-o
must rbio cmp /dev/mapper/s2 /tmp/model-s2
remove_all

step "suspend stops the merge, resume goes on"
prepare rollback 8 80
reload_as rollback 8
cp /tmp/model-s1 /tmp/model-merge
start_merge rollback 8
# A batch a second: stopped half way, with batches left to go on with.
must dmsetup message o 0 merge_throttle 1000
falls_below o "$initial"
must dmsetup suspend o
still_merging o "at the stop"
stop=$left
snapshot_status o | grep -q " stopped$" || fail "not stopped when suspended: $(snapshot_status o)"
sleep 1
left=$(merge_left o) || fail "no merge while suspended: $(snapshot_status o)"
[ "$left" = "$stop" ] || fail "merged while suspended"
must dmsetup resume o
snapshot_status o | grep -q " running$" || fail "not running after resume: $(snapshot_status o)"
# Two more batches, each committed while there is still more to merge.
falls_below o "$stop"
first=$left
falls_below o "$first"
[ "$left" -gt 0 ] || fail "the merge ignored its throttle after resume"
echo "after resume: $first, then $left sectors left"
must dmsetup message o 0 merge_throttle 0
wait_merged o
i=0
while ! snapshot_status o | grep -q " 0 stopped$"; do
        i=$((i + 1))
        [ $i -lt 50 ] || fail "end state: $(snapshot_status o)"
        sleep 0.1
done
must rbio cmp /dev/mapper/o /tmp/model-merge
must rbio cmp /dev/mapper/s2 /tmp/model-s2
remove_all

step "a slow throttle holds up neither a suspend nor a new rate, and a resume keeps its pace"
prepare rollback 8 100
reload_as rollback 8
cp /tmp/model-s1 /tmp/model-merge
start_merge rollback 8
# 1 KiB/s: after a batch of 256 chunks the merge would sleep 17 minutes.
must dmsetup message o 0 merge_throttle 1
falls_below o "$initial"
sleep 1
t0=$(date +%s)
timeout 60 dmsetup suspend o || fail "suspend waited out the throttle"
[ $(($(date +%s) - t0)) -le 10 ] || fail "suspend took $(($(date +%s) - t0)) s"
still_merging o "when suspended in the throttle's sleep"
must dmsetup resume o
# The pace outlives the suspend: no batch at once after the resume.
sleep 3
[ "$(merge_left o)" = "$left" ] || fail "a resume skipped the throttle: $(merge_left o) of $left left"
t0=$(date +%s)
must dmsetup message o 0 merge_throttle 0
wait_merged o
[ $(($(date +%s) - t0)) -le 60 ] || fail "the new rate waited for the old sleep"
must rbio cmp /dev/mapper/o /tmp/model-merge
must rbio cmp /dev/mapper/s2 /tmp/model-s2
remove_all
pass
