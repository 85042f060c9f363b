# SPDX-License-Identifier: GPL-2.0-or-later
# Helpers for the guest test scripts (busybox sh).  A test prints what it
# checks, calls fail on the first wrong result and ends with pass.

fail() {
        echo "FAIL: $*"
        dmsetup table 2>/dev/null
        dmsetup status 2>/dev/null
        dmesg | tail -n 30
        exit 1
}

pass() {
        echo "PASS: ${1:-all checks}"
        exit 0
}

skip() {
        echo "SKIP: $*"
        exit 77
}

step() {
        echo "== $*"
}

# The hung-task detector logs the blocked tasks' stacks at KERN_INFO, which
# loglevel=5 keeps off the console: once it reports, this prints them from
# the kernel log, with every blocked task's (sysrq w), and what each disk
# has in flight and which dm device is suspended.  Not a child of the
# test's shell, which may wait for all of its own.
( (
        while sleep 10; do
                dmesg | grep -q "blocked for more than" || continue
                echo w > /proc/sysrq-trigger 2> /dev/null
                sleep 2
                dmesg | sed -n '/blocked for more than/,$p' | sed 's/^/hung: /'
                # Where the I/O waits: requests a disk holds (read, write) and
                # a dm device left suspended, neither of which a stack shows.
                grep -H . /sys/block/*/inflight 2> /dev/null | sed 's/^/hung: inflight /'
                dmsetup info -c --noheadings -o name,suspended 2> /dev/null | sed 's/^/hung: dm /'
                # A new request announces the ring to QEMU and its interrupt
                # reaps it: if the stuck ones complete now, they were lost
                # between guest and QEMU, not below.
                for d in /sys/block/vd*; do
                        dd if=/dev/${d##*/} of=/dev/null bs=4096 count=1 iflag=direct 2> /dev/null &
                done
                sleep 5
                grep -H . /sys/block/*/inflight 2> /dev/null | sed 's/^/hung: after a new read: inflight /'
                exit 0
        done
) & )

# Runs a command that must succeed.
must() {
        "$@" || fail "command failed: $*"
}

# Runs a command that must fail.
must_not() {
        if "$@" 2>/tmp/must_not.err; then
                fail "command succeeded but should not: $*"
        fi
}

sectors() {
        blockdev --getsz "$1"
}

# Target names of an implementation: rollback (ours) or upstream.
origin_target() {
        case $1 in rollback) echo rollback-origin ;; upstream) echo snapshot-origin ;; esac
}
snapshot_target() {
        case $1 in rollback) echo rollback-snap ;; upstream) echo snapshot ;; esac
}

# A fresh COW must start with zeros (header and first area).
zero_cow() {
        dd if=/dev/zero of="$1" bs=1M count=2 conv=fsync 2>/dev/null
}

# make_origin IMPL NAME DEV: NAME-real (linear over DEV) and NAME (origin).
make_origin() {
        local size
        size=$(sectors "$3")
        must dmsetup create "$2-real" --table "0 $size linear $3 0"
        must dmsetup create "$2" --table "0 $size $(origin_target "$1") /dev/mapper/$2-real"
}

# make_snapshot IMPL ORIGIN SNAP COWDEV CHUNK [STORE [FEATURES]]: as LVM does
# it, with the origin suspended while the snapshot becomes active.
make_snapshot() {
        local size
        size=$(sectors "/dev/mapper/$2-real")
        must dmsetup suspend "$2"
        if ! dmsetup create "$3" --table "0 $size $(snapshot_target "$1") /dev/mapper/$2-real $4 ${6:-P} $5${7:+ $7}"; then
                dmsetup resume "$2"
                return 1
        fi
        must dmsetup resume "$2"
}

# Merge table target of an implementation.
merge_target() {
        case $1 in rollback) echo rollback-merge ;; upstream) echo snapshot-merge ;; esac
}

# merge_left [--inactive] DEV: sectors of a merging DEV (or of its loaded,
# not yet resumed table) still to merge (alloc - metadata).  Fails, saying
# why on stderr, unless the status is a merge's numbers: an "Invalid",
# "Merge failed" or empty status is not "nothing left".
merge_left() {
        local st alloc meta inactive=
        if [ "$1" = --inactive ]; then
                inactive=--inactive
                shift
        fi
        st=$(dmsetup status $inactive "$1" | cut -d' ' -f4-)
        case $st in
        [0-9]*/[0-9]*\ [0-9]*) ;;
        *) echo "merge_left: $1 has status '$st'" >&2; return 1 ;;
        esac
        alloc=${st%%/*}
        meta=$(echo "$st" | cut -d' ' -f2)
        echo $((alloc - meta))
}

# wait_merged DEV: until the merge is done, at most 5 minutes.
wait_merged() {
        local i=0 left
        while :; do
                left=$(merge_left "$1") || fail "no merge to wait for: $(snapshot_status "$1")"
                [ "$left" = 0 ] && return 0
                i=$((i + 1))
                [ $i -lt 1500 ] || fail "merge did not finish: $(snapshot_status "$1")"
                sleep 0.2
        done
}

# checksum DEV: rbio's checksum of DEV; fails, printing nothing on stdout,
# when DEV cannot be read whole.  Use as: sum=$(checksum DEV) || fail ...
checksum() {
        local sum
        sum=$(rbio sum "$1") || { echo "checksum: cannot read $1" >&2; return 1; }
        case $sum in
        [0-9a-f]*) echo "$sum" ;;
        *) echo "checksum: no checksum of $1" >&2; return 1 ;;
        esac
}

# same_sum DEV WANT WHAT: DEV is readable and its checksum is WANT.
same_sum() {
        local sum
        [ -n "$2" ] || fail "$3: no checksum to compare with"
        sum=$(checksum "$1") || fail "$3: cannot read $1"
        [ "$sum" = "$2" ] || fail "$3"
}

# snapshot_status NAME: the INFO line without the "start len target" prefix.
snapshot_status() {
        dmsetup status "$1" | cut -d' ' -f4-
}

# snapshot_usage NAME: "alloc total" of a valid snapshot, its status otherwise.
snapshot_usage() {
        local st
        st=$(snapshot_status "$1")
        case $st in
        [0-9]*/[0-9]*\ [0-9]*) echo "${st%%/*} $(echo "$st" | cut -d' ' -f1 | cut -d/ -f2)" ;;
        *) echo "$st" ;;
        esac
}

# table_events NAME: the count of table events of the dm device NAME.
table_events() {
        dmsetup info -c --noheadings -o events "$1" | tr -d ' '
}

# no_splat WHAT: the kernel log has no warning, oops or device leak (the
# table's devices not put back as they were got) since the last dmesg -c.
no_splat() {
        local bad
        bad=$(dmesg | grep -E 'WARNING|BUG|Call Trace|dm_put_device|not in table devices list|KASAN') &&
                fail "$1: the kernel complained: $bad"
        return 0
}

remove_all() {
        dmsetup remove_all || fail "cannot remove dm devices"
}
