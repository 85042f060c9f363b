# SPDX-License-Identifier: GPL-2.0-or-later
# Everything at once: a throttled merge with another snapshot of the same
# origin kept, writes and reads on the merging origin and on the other
# snapshot, snapshots of another origin created, written and removed in a
# loop, the merging device suspended and resumed, and its throttle changed,
# in a loop.  Every device ends equal to its model, in bounded time.
#
# Disks: vda origin A (32M), vdb the merging COW, vdc another snapshot's
# COW, vdd origin B (16M), vde B's snapshots' COW.
. ./lib.sh

rounds=6
chunk=8

step "origin A: s1 (to merge) and s2 with changes both ways"
must rbio fill /dev/vda 1
zero_cow /dev/vdb
zero_cow /dev/vdc
make_origin rollback o /dev/vda
make_snapshot rollback o s1 /dev/vdb $chunk || fail "create s1"
cp /dev/vda /tmp/model-s1
cp /dev/vda /tmp/model-o
must rbio write /dev/mapper/o /tmp/model-o --seed 2 --count 600 --bs 16384 --direct
make_snapshot rollback o s2 /dev/vdc $chunk || fail "create s2"
cp /tmp/model-o /tmp/model-s2
must rbio write /dev/mapper/s1 /tmp/model-s1 --seed 3 --count 100 --direct
must rbio cmp /dev/mapper/s1 /tmp/model-s1

step "origin B"
must rbio fill /dev/vdd 4
make_origin rollback ob /dev/vdd
cp /dev/vdd /tmp/model-ob

step "the merge of s1, throttled, with everything else at once"
size=$(sectors /dev/mapper/o-real)
must dmsetup remove s1
must dmsetup suspend o
must dmsetup reload o --table "0 $size rollback-merge /dev/mapper/o-real /dev/vdb P $chunk"
initial=$(merge_left --inactive o) || fail "no merge loaded"
must dmsetup resume o
must dmsetup message o 0 merge_throttle 64
cp /tmp/model-s1 /tmp/model-merge
echo "$initial sectors to merge"

# Each loop writes its own file when it ends well: a loop that failed or
# hung leaves none.
(
        for r in $(seq $rounds); do
                rbio write /dev/mapper/o /tmp/model-merge --seed $((10 + r)) --count 150 --threads 3 --direct || exit 1
                rbio cmp /dev/mapper/o /tmp/model-merge || exit 1
        done
        touch /tmp/done-origin
) &
(
        for r in $(seq $rounds); do
                rbio write /dev/mapper/s2 /tmp/model-s2 --seed $((20 + r)) --count 100 --threads 2 --direct || exit 1
                rbio cmp /dev/mapper/s2 /tmp/model-s2 || exit 1
        done
        touch /tmp/done-s2
) &
(
        for r in $(seq $rounds); do
                zero_cow /dev/vde
                make_snapshot rollback ob sb /dev/vde $chunk || exit 1
                cp /tmp/model-ob /tmp/model-sb
                rbio write /dev/mapper/ob /tmp/model-ob --seed $((30 + r)) --count 100 --threads 2 --direct || exit 1
                rbio cmp /dev/mapper/sb /tmp/model-sb || exit 1
                dmsetup remove sb || exit 1
        done
        touch /tmp/done-other
) &
(
        for r in $(seq $((rounds * 4))); do
                [ "$r" = 1 ] && merge_left o > /tmp/left-at-start
                dmsetup suspend o || exit 1
                sleep 0.3
                dmsetup resume o || exit 1
                dmsetup message o 0 merge_throttle $(((r % 4) * 32 + 32)) || exit 1
                sleep 1
        done
        touch /tmp/done-suspend
) &
wait
for f in origin s2 other suspend; do
        [ -e /tmp/done-$f ] || fail "the $f loop failed"
done
left=$(merge_left o) || fail "no merge: $(snapshot_status o)"
echo "$left of $initial sectors left after the loops"
[ "$left" -lt "$initial" ] || fail "the merge did not go on"
# The loops began while the merge ran (how far it got depends on the kernel's speed).
[ "$(cat /tmp/left-at-start)" -gt 0 ] || fail "the merge ended before the loops began: nothing ran at once"

step "the merge ends at s1 plus the writes made during it"
must dmsetup message o 0 merge_throttle 0
wait_merged o
must rbio cmp /dev/mapper/o /tmp/model-merge
must rbio cmp /dev/mapper/s2 /tmp/model-s2
must rbio cmp /dev/mapper/ob /tmp/model-ob
must dmsetup suspend o
must dmsetup reload o --table "0 $size rollback-origin /dev/mapper/o-real"
must dmsetup resume o
must rbio cmp /dev/mapper/o /tmp/model-merge
must rbio cmp /dev/mapper/s2 /tmp/model-s2
remove_all
must rbio cmp /dev/vda /tmp/model-merge
pass "all at once"
