# SPDX-License-Identifier: GPL-2.0-or-later
# rollback-merge at its edges: a handover whose snapshot changes or goes
# away before the merge resumes, an invalid snapshot, a resume that fails
# half way and is retried, snapshots of another origin created and removed
# while the merge runs, a snapshot of another origin, an origin that shrank,
# a suspend given up half way.  Each case either merges exactly the snapshot or
# is refused and leaves the origin as it was.
#
# Disks: vda origin (32M), vdb the merging COW (64M), vdc another
# snapshot's COW (64M), vdd another origin (32M) and vde its COW (64M).
# Arguments: the cases to run (default: all), each in a subshell so that
# one failure does not hide the others.
. ./lib.sh

size=

# setup SEED COW COUNT: o over vda and s1 on COW, with COUNT 16 KiB origin
# writes and some snapshot writes; /tmp/model-o and /tmp/model-s1 say what
# o and s1 hold.
setup() {
        must rbio fill /dev/vda "$1"
        zero_cow "$2"
        make_origin rollback o /dev/vda
        size=$(sectors /dev/mapper/o-real)
        make_snapshot rollback o s1 "$2" 8 || fail "create s1"
        cp /dev/vda /tmp/model-s1
        cp /dev/vda /tmp/model-o
        must rbio write /dev/mapper/o /tmp/model-o --seed $(($1 + 1)) --count "$3" --bs 16384 --direct
        must rbio write /dev/mapper/s1 /tmp/model-s1 --seed $(($1 + 2)) --count 20 --direct
}

# load_merge COW: a merge of COW as o's inactive table.
load_merge() {
        dmsetup reload o --table "0 $size rollback-merge /dev/mapper/o-real $1 P 8"
}

# set_cowd TARGET...: cowd's table (over vdb) becomes TARGET.
set_cowd() {
        must dmsetup suspend cowd
        must dmsetup reload cowd --table "0 $(sectors /dev/vdb) $*"
        must dmsetup resume cowd
}

case_stale() {
        step "stale: the snapshot takes exceptions after the merge is loaded, then goes away"
        setup 10 /dev/vdb 200
        must load_merge /dev/vdb
        # Committed after the merge read the COW: it must read them again.
        must rbio write /dev/mapper/o /tmp/model-o --seed 13 --count 300 --bs 16384 --direct
        must rbio write /dev/mapper/s1 /tmp/model-s1 --seed 14 --count 50 --direct
        must rbio cmp /dev/mapper/s1 /tmp/model-s1
        must dmsetup remove s1
        must dmsetup resume o
        wait_merged o
        must rbio cmp /dev/mapper/o /tmp/model-s1
        remove_all
        must rbio cmp /dev/vda /tmp/model-s1
}

case_invalid() {
        step "invalid: a snapshot that overflowed is not merged"
        # 2 MiB: room for about 500 chunks of 4 KiB.
        must dmsetup create small --table "0 4096 linear /dev/vdb 0"
        setup 20 /dev/mapper/small 20
        must load_merge /dev/mapper/small
        # Overflows after the merge read a valid COW.
        must rbio write /dev/mapper/o /tmp/model-o --seed 23 --count 400 --bs 16384 --direct
        [ "$(snapshot_status s1)" = Invalid ] || fail "s1 did not overflow: $(snapshot_status s1)"
        must dmsetup suspend s1
        must_not dmsetup resume o
        dmesg | grep -q "Cannot merge an invalid snapshot" || fail "no error for an invalid snapshot at resume"
        # Back to the origin: nothing was merged.
        must dmsetup reload o --table "0 $size rollback-origin /dev/mapper/o-real"
        must dmsetup resume o
        must dmsetup resume s1
        must rbio cmp /dev/mapper/o /tmp/model-o
        # Invalid before the merge is loaded: the table is refused.
        must_not load_merge /dev/mapper/small
        [ "$(dmesg | grep -c "Cannot merge an invalid snapshot")" -ge 2 ] ||
                fail "no table error for an invalid snapshot"
        must rbio cmp /dev/mapper/o /tmp/model-o
        remove_all
        must rbio cmp /dev/vda /tmp/model-o
}

case_invalidcow() {
        step "invalidcow: a COW marked invalid, no snapshot live: the merge does nothing and says why"
        must dmsetup create small --table "0 4096 linear /dev/vdb 0"
        setup 25 /dev/mapper/small 20
        must rbio write /dev/mapper/o /tmp/model-o --seed 28 --count 400 --bs 16384 --direct
        [ "$(snapshot_status s1)" = Invalid ] || fail "s1 did not overflow: $(snapshot_status s1)"
        must dmsetup remove s1
        before=$(dmesg | grep -c "Cannot merge an invalid snapshot")
        must dmsetup suspend o
        must load_merge /dev/mapper/small
        must dmsetup resume o
        [ "$(snapshot_status o)" = Invalid ] || fail "status of an invalid merge: $(snapshot_status o)"
        [ "$(dmesg | grep -c "Cannot merge an invalid snapshot")" -gt "$before" ] ||
                fail "no error for merging an invalid COW"
        must rbio write /dev/mapper/o /tmp/model-o --seed 26 --count 100 --direct
        must rbio cmp /dev/mapper/o /tmp/model-o
        remove_all
        must rbio cmp /dev/vda /tmp/model-o
}

case_retry() {
        step "retry: the COW cannot be read when the merge resumes, then can"
        must dmsetup create cowd --table "0 $(sectors /dev/vdb) linear /dev/vdb 0"
        setup 30 /dev/mapper/cowd 200
        must load_merge /dev/mapper/cowd
        must rbio write /dev/mapper/o /tmp/model-o --seed 33 --count 100 --bs 16384 --direct
        must dmsetup suspend s1
        set_cowd error
        must_not dmsetup resume o
        set_cowd linear /dev/vdb 0
        # The first resume took nothing over: the next one does it all.
        must dmsetup resume o
        wait_merged o
        must rbio cmp /dev/mapper/o /tmp/model-s1
        remove_all
        must rbio cmp /dev/vda /tmp/model-s1
}

# stop_and_fail WHAT: ends the background loops, then fails.
stop_and_fail() {
        touch /tmp/stop
        fail "$@"
}

case_busy() {
        step "busy: snapshots of another origin come and go while the merge waits for copies"
        must rbio fill /dev/vda 40
        zero_cow /dev/vdb
        zero_cow /dev/vdc
        zero_cow /dev/vde
        make_origin rollback o /dev/vda
        size=$(sectors /dev/mapper/o-real)
        make_snapshot rollback o s1 /dev/vdb 8 || fail "create s1"
        cp /dev/vda /tmp/model-s1
        cp /dev/vda /tmp/model-o
        must rbio write /dev/mapper/o /tmp/model-o --seed 41 --count 400 --bs 32768 --direct
        # s2 shares every chunk the merge overwrites, and its COW is slow:
        # each batch waits a while for the copies into it.
        must dmsetup create s2cow --table "0 $(sectors /dev/vdc) delay /dev/vdc 0 0 /dev/vdc 0 20"
        make_snapshot rollback o s2 /dev/mapper/s2cow 8 || fail "create s2"
        cp /tmp/model-o /tmp/model-s2
        must dmsetup remove s1
        cp /tmp/model-s1 /tmp/model-merge
        make_origin rollback p /dev/vdd
        must dmsetup suspend o
        must dmsetup reload o --table "0 $size rollback-merge /dev/mapper/o-real /dev/vdb P 8"
        must dmsetup resume o
        # Every ctr and dtr takes the origin registry for writing; the
        # origin writes wait for copies into s2.
        rm -f /tmp/stop
        (
                while [ ! -e /tmp/stop ]; do
                        dmsetup create ps --table "0 $(sectors /dev/mapper/p-real) rollback-snap /dev/mapper/p-real /dev/vde P 8" || exit 1
                        dmsetup remove ps || exit 1
                done
        ) &
        churn=$!
        (
                seed=50
                while [ ! -e /tmp/stop ]; do
                        rbio write /dev/mapper/o /tmp/model-merge --seed $seed --count 100 --threads 2 --direct >/dev/null || exit 1
                        seed=$((seed + 1))
                done
        ) &
        writer=$!
        i=0
        while :; do
                left=$(merge_left o) || stop_and_fail "no merge on o: $(snapshot_status o)"
                [ "$left" = 0 ] && break
                i=$((i + 1))
                [ $i -lt 900 ] || stop_and_fail "the merge did not finish in 3 minutes: $(snapshot_status o)"
                sleep 0.2
        done
        touch /tmp/stop
        wait $churn || fail "creating and removing snapshots of p failed"
        wait $writer || fail "writing o failed"
        echo "merged in about $((i / 5)) s"
        must rbio cmp /dev/mapper/o /tmp/model-merge
        must rbio cmp /dev/mapper/s2 /tmp/model-s2
        remove_all
}

# cleanup: removes what a case left; fails if that hangs (a deadlock).
cleanup() {
        local pid i=0
        echo "$quiet_default" > /sys/module/dm_rollback/parameters/merge_quiet_us
        dmsetup remove_all 2>/dev/null &
        pid=$!
        while kill -0 $pid 2>/dev/null; do
                i=$((i + 1))
                [ $i -lt 60 ] || fail "failed:$failed; dmsetup remove_all hangs"
                sleep 0.5
        done
}

case_foreign() {
        step "foreign: a snapshot of another origin cannot hand its COW over"
        must rbio fill /dev/vda 60
        must rbio fill /dev/vdd 61
        zero_cow /dev/vdb
        make_origin rollback o /dev/vda
        make_origin rollback p /dev/vdd
        size=$(sectors /dev/mapper/o-real)
        make_snapshot rollback p ps /dev/vdb 8 || fail "create ps"
        must rbio write /dev/mapper/p --seed 62 --count 200 --bs 16384 --direct
        must_not load_merge /dev/vdb
        dmesg | grep -q "COW belongs to a snapshot of another origin" || fail "no error for another origin"
        must rbio cmp /dev/mapper/o /dev/vda
        remove_all
}

case_shrunk() {
        step "shrunk: exceptions beyond the end of a shrunk origin are dropped"
        must rbio fill /dev/vda 70
        zero_cow /dev/vdb
        zero_cow /dev/vdc
        make_origin rollback o /dev/vda
        make_snapshot rollback o s1 /dev/vdb 8 || fail "create s1"
        cp /dev/vda /tmp/model-s1
        cp /dev/vda /tmp/model-o
        must rbio write /dev/mapper/o /tmp/model-o --seed 71 --count 400 --bs 32768 --direct
        must dmsetup remove s1
        must dmsetup remove o
        must dmsetup remove o-real
        # The first half of vda; s2 holds it as it is now.
        half=$(($(sectors /dev/vda) / 2))
        must dmsetup create o-real --table "0 $half linear /dev/vda 0"
        must dmsetup create o --table "0 $half rollback-origin /dev/mapper/o-real"
        make_snapshot rollback o s2 /dev/vdc 8 || fail "create s2"
        dd if=/dev/vda of=/tmp/model-s2 bs=512 count=$half 2>/dev/null
        dd if=/tmp/model-s1 of=/tmp/model-merge bs=512 count=$half 2>/dev/null
        must dmsetup suspend o
        must dmsetup reload o --table "0 $half rollback-merge /dev/mapper/o-real /dev/vdb P 8"
        must dmsetup resume o
        wait_merged o
        [ "$(snapshot_status s2)" != Invalid ] || fail "s2 was invalidated"
        must rbio cmp /dev/mapper/o /tmp/model-merge
        must rbio cmp /dev/mapper/s2 /tmp/model-s2
        dmesg | grep -q "beyond the end of the origin" || fail "no message for exceptions beyond the end"
        remove_all
        # Past the end, vda holds what the origin writes left there.
        dd if=/dev/vda of=/tmp/tail bs=512 skip=$half 2>/dev/null
        dd if=/tmp/model-o of=/tmp/model-tail bs=512 skip=$half 2>/dev/null
        must rbio cmp /tmp/tail /tmp/model-tail
}

case_undo() {
        step "undo: a suspend given up after presuspend lets the merge go on"
        must rbio fill /dev/vda 80
        zero_cow /dev/vdb
        must dmsetup create cowd --table "0 $(sectors /dev/vdb) linear /dev/vdb 0"
        make_origin rollback o /dev/vda
        size=$(sectors /dev/mapper/o-real)
        make_snapshot rollback o s1 /dev/mapper/cowd 8 || fail "create s1"
        cp /dev/vda /tmp/model-s1
        must rbio write /dev/mapper/o --seed 81 --count 400 --bs 32768 --direct
        must dmsetup remove s1
        must dmsetup suspend o
        must load_merge /dev/mapper/cowd
        initial=$(merge_left --inactive o) || fail "no merge loaded"
        # 1 KiB/s, set before any batch runs: one batch, then a long sleep.
        must dmsetup suspend cowd
        must dmsetup resume o
        must dmsetup message o 0 merge_throttle 1
        must dmsetup resume cowd
        i=0
        while :; do
                left=$(merge_left o) || fail "no merge on o: $(snapshot_status o)"
                [ "$left" -lt "$initial" ] && break
                i=$((i + 1))
                [ $i -lt 300 ] || fail "the merge did not begin"
                sleep 0.2
        done
        # A read that cannot finish holds the suspend up until it is interrupted.
        must dmsetup suspend o-real
        must dmsetup suspend cowd
        dd if=/dev/mapper/o of=/dev/null bs=4096 count=1 iflag=direct 2>/dev/null &
        sleep 1
        dmsetup suspend --nolockfs o &
        pid=$!
        sleep 2
        # The wait for I/O in a suspend is interruptible, by SIGKILL surely.
        kill -KILL $pid
        wait $pid && interrupted=no || interrupted=yes
        state=$(dmsetup info o | grep State:)
        st=$(snapshot_status o)
        must dmsetup resume o-real
        must dmsetup resume cowd
        wait
        [ $interrupted = yes ] || fail "the suspend was not interrupted"
        case $state in *SUSPENDED*) fail "o stayed suspended" ;; esac
        case $st in *" running") ;; *) fail "not running after the cancelled suspend: $st" ;; esac
        must dmsetup message o 0 merge_throttle 0
        wait_merged o
        must rbio cmp /dev/mapper/o /tmp/model-s1
        remove_all
}

case_steady() {
        step "steady: under reads that never pause, the merge keeps one copy in flight, and ends"
        must rbio fill /dev/vda 90
        zero_cow /dev/vdb
        make_origin rollback o /dev/vda
        size=$(sectors /dev/mapper/o-real)
        make_snapshot rollback o s1 /dev/vdb 8 || fail "create s1"
        cp /dev/vda /tmp/model-s1
        # 400 single chunks: no run to copy at once.
        must rbio write /dev/mapper/o --seed 91 --count 400 --direct
        must dmsetup remove s1
        # Every COW read and write takes 20 ms: one copy at a time is slow.
        must dmsetup create cowd --table "0 $(sectors /dev/vdb) delay /dev/vdb 0 20"
        must dmsetup suspend o
        must load_merge /dev/mapper/cowd
        initial=$(merge_left --inactive o) || fail "no merge loaded"
        # A gap between two reads is busy too, even where the host holds
        # the reader's virtual CPU up for a while.
        echo 100000 > /sys/module/dm_rollback/parameters/merge_quiet_us
        rbio readlat /dev/mapper/o --seed 92 --count 1000000 --direct > /dev/null &
        reader=$!
        sleep 1
        must dmsetup resume o
        sleep 2
        left=$(merge_left o) || fail "no merge on o: $(snapshot_status o)"
        i=0
        until [ "$(merge_left o)" = 0 ]; do
                i=$((i + 1))
                [ $i -lt 600 ] || break
                sleep 0.2
        done
        done_busy=$(merge_left o)
        kill $reader
        wait $reader
        echo "of $initial sectors, $left left after 2 s, $done_busy once the reader stopped"
        # Idle, 16 copies in flight take 400 chunks in about 25 x 20 ms.
        [ "$left" -gt $((initial / 2)) ] || fail "the merge did not back off for the reads: $left of $initial left after 2 s"
        [ "$done_busy" = 0 ] || fail "the merge did not end while the reads went on: $done_busy of $initial left"
        must rbio cmp /dev/mapper/o /tmp/model-s1
        remove_all
}

quiet_default=$(cat /sys/module/dm_rollback/parameters/merge_quiet_us)
failed=
for c in ${*:-stale invalid invalidcow retry busy foreign shrunk undo steady}; do
        ( "case_$c" ) || failed="$failed $c"
        cleanup
done
[ -z "$failed" ] || fail "failed:$failed"
pass
