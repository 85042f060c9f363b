# SPDX-License-Identifier: GPL-2.0-or-later
# Power cuts during a merge (driven by merge-crash-host; args: the phase,
# and for start how the merge runs).
#   start slow       s1 and s2 with changes, the expected sums saved on vdd,
#                    then a merge of s1 whose every I/O is delayed: the host
#                    cuts inside a batch
#   start throttled  the same with undelayed I/O and a throttle: the cut
#                    comes mostly between batches
#   finish           after the reboot: the merge was not done at the cut,
#                    the merge table again, the merge completes, the origin
#                    equals s1 and s2 is unchanged
# Disks: vda origin (32M), vdb s1's COW, vdc s2's COW, vdd the sums.
. ./lib.sh

sums_save() { printf '%s %s %s\n' "$1" "$2" "$3" | dd of=/dev/vdd conv=fsync 2>/dev/null; }

case $1 in
start)
        must rbio fill /dev/vda 5
        zero_cow /dev/vdb
        zero_cow /dev/vdc
        make_origin rollback o /dev/vda
        make_snapshot rollback o s1 /dev/vdb 8 || fail "create s1"
        cp /dev/vda /tmp/model-s1
        # Blocks of 4 chunks: several merge batches (256 chunks) in s1.
        must rbio write /dev/mapper/o --seed 6 --count 400 --bs 16384 --direct > /dev/null
        make_snapshot rollback o s2 /dev/vdc 8 || fail "create s2"
        must rbio write /dev/mapper/o --seed 7 --count 500 --direct > /dev/null
        must rbio write /dev/mapper/s1 /tmp/model-s1 --seed 8 --count 200 --direct > /dev/null
        want_o=$(checksum /tmp/model-s1) || fail "no checksum of s1's model"
        want_s2=$(checksum /dev/mapper/s2) || fail "cannot read s2"
        size=$(sectors /dev/mapper/o-real)
        must dmsetup suspend o
        must dmsetup remove s1
        cow=/dev/vdb
        if [ "$2" = slow ]; then
                # 50 ms on every I/O of the COW and on the origin's reads,
                # 400 ms on its writes and flushes: a batch takes about a
                # second, all of it I/O, most of it writing the origin.
                must dmsetup create cow --table "0 $(sectors /dev/vdb) delay /dev/vdb 0 50"
                cow=/dev/mapper/cow
                must dmsetup suspend o-real
                must dmsetup reload o-real --table "0 $size delay /dev/vda 0 50 /dev/vda 0 400"
                must dmsetup resume o-real
        fi
        must dmsetup reload o --table "0 $size rollback-merge /dev/mapper/o-real $cow P 8"
        initial=$(merge_left --inactive o) || fail "no merge loaded"
        sums_save "$want_o" "$want_s2" "$initial"
        must dmsetup resume o
        # A batch of 1 MiB a second, most of it asleep.
        [ "$2" = throttled ] && must dmsetup message o 0 merge_throttle 1000
        left=$(merge_left o) || fail "no merge running"
        [ "$left" -gt 0 ] || fail "the merge was done at once"
        snapshot_status o | grep -q " running$" || fail "the merge is not running: $(snapshot_status o)"
        echo "$initial sectors to merge"
        echo CUT-HERE
        # The merge must not end before the cut: the host fails a guest
        # that fails before it.
        i=0
        while [ $i -lt 600 ]; do
                left=$(merge_left o) || fail "the merge broke before the power cut"
                [ "$left" -gt 0 ] || fail "the merge was done before the power cut"
                echo "left: $left"
                sleep 0.2
                i=$((i + 1))
        done
        fail "the power cut did not come"
        ;;
finish)
        read -r want_o want_s2 initial < /dev/vdd
        [ -n "$initial" ] || fail "the start saved no sums"
        size=$(sectors /dev/vda)
        must dmsetup create o-real --table "0 $size linear /dev/vda 0"
        # s2 tracks the origin before the merge writes to it.
        must dmsetup create o --notable
        must dmsetup create s2 --table "0 $size rollback-snap /dev/mapper/o-real /dev/vdc P 8"
        must dmsetup reload o --table "0 $size rollback-merge /dev/mapper/o-real /dev/vdb P 8"
        # What the cut left, read before the merge can go on.
        left=$(merge_left --inactive o) || fail "no merge to finish"
        [ "$left" -gt 0 ] || fail "the merge was done before the power cut: nothing to test"
        [ "$left" -le "$initial" ] || fail "more to merge than at the start: $left > $initial"
        echo "after the power cut: $left of $initial sectors left"
        must dmsetup resume o
        wait_merged o
        same_sum /dev/mapper/o "$want_o" "the merged origin is not the snapshot"
        same_sum /dev/mapper/s2 "$want_s2" "s2 changed"
        remove_all
        same_sum /dev/vda "$want_o" "the origin device is not the snapshot"
        ;;
esac
pass
