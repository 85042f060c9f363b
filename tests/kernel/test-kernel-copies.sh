# SPDX-License-Identifier: GPL-2.0-or-later
# Copies in flight are bounded per origin (module parameter copy_limit): a
# burst of buffered writeback into an origin with two snapshots, and writes
# into a snapshot at the same time, wait for room instead of starting a copy
# per dirty chunk at once.  The bound holds, the burst reaches it, every device
# ends equal to its model, and a limit of 1 still makes progress.  Then a
# third snapshot goes, again and again, while copies into it are in flight.
#
# Disks: vda origin (64M), vdb s1's COW (96M), vdc s2's COW (96M), vdd s3's
# COW (32M).
. ./lib.sh

params=/sys/module/dm_rollback/parameters
limit=32

[ -w $params/copy_limit ] || fail "no copy_limit parameter"
must rbio fill /dev/vda 1
zero_cow /dev/vdb
zero_cow /dev/vdc
make_origin rollback o /dev/vda
# Two chunk sizes: a chunk of the origin is two copies, one per snapshot.
make_snapshot rollback o s1 /dev/vdb 8 || fail "create s1"
make_snapshot rollback o s2 /dev/vdc 16 || fail "create s2"
must cp /dev/vda /tmp/model-o
must cp /dev/vda /tmp/model-s1
must cp /dev/vda /tmp/model-s2

# burst SEED: buffered writes all over the origin, flushed at once by
# writeback, and direct writes into s1 meanwhile.
burst() {
        rbio write /dev/mapper/s1 /tmp/model-s1 --seed "$1" --count 300 --bs 4096 --threads 4 --direct &
        must rbio write /dev/mapper/o /tmp/model-o --seed $(($1 + 1)) --count 6000 --bs 4096 --threads 4
        wait $! || fail "the writes into s1 failed"
}

step "a burst with copy_limit $limit"
echo $limit > $params/copy_limit
echo 0 > $params/copy_peak
burst 10
peak=$(cat $params/copy_peak)
echo "copies in flight at most: $peak (limit $limit)"
# Each of the dozen writers (4 fsyncs, the flusher, 4 into s1, the retry
# worker) that saw room may start a copy per snapshot: 24 over at most.
[ "$peak" -le $((limit + 24)) ] || fail "$peak copies in flight, limit $limit"
[ "$peak" -ge $limit ] || fail "the burst never reached the limit ($peak): it tested nothing"
must rbio cmp /dev/mapper/o /tmp/model-o
must rbio cmp /dev/mapper/s1 /tmp/model-s1
must rbio cmp /dev/mapper/s2 /tmp/model-s2

step "a burst with copy_limit 1"
echo 1 > $params/copy_limit
echo 0 > $params/copy_peak
burst 20
peak=$(cat $params/copy_peak)
echo "copies in flight at most: $peak (limit 1)"
[ "$peak" -le 25 ] || fail "$peak copies in flight, limit 1"
must rbio cmp /dev/mapper/o /tmp/model-o
must rbio cmp /dev/mapper/s1 /tmp/model-s1
must rbio cmp /dev/mapper/s2 /tmp/model-s2

echo 2048 > $params/copy_limit

step "a third snapshot removed, 20 times, while the origin's copies into it go on"
# Its commits may still be queued when it goes; s1 and s2 stay.
for r in $(seq 20); do
        zero_cow /dev/vdd
        make_snapshot rollback o s3 /dev/vdd 8 || fail "create s3 ($r)"
        rbio write /dev/mapper/o /tmp/model-o --seed $((60 + r)) --count 200 --threads 8 --direct > /dev/null &
        writer=$!
        sleep 0.$((r % 5))
        must dmsetup remove s3
        wait $writer || fail "the writes while s3 went ($r)"
done
must rbio cmp /dev/mapper/o /tmp/model-o
must rbio cmp /dev/mapper/s1 /tmp/model-s1
must rbio cmp /dev/mapper/s2 /tmp/model-s2
no_splat "bounded copies"
remove_all
must rbio cmp /dev/vda /tmp/model-o
pass "copies in flight bounded"
