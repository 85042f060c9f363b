# SPDX-License-Identifier: GPL-2.0-or-later
# Power cuts during a merge (driven by merge-crash-host; arg: the phase).
#   start   s1 and s2 with changes, the expected sums saved on vdd, then a
#           slow rollback-merge of s1 that the host cuts short
#   finish  after the reboot: the merge table again, the merge completes,
#           the origin equals s1 and s2 is unchanged
# Disks: vda origin (32M), vdb s1's COW, vdc s2's COW, vdd the sums.
. ./lib.sh

sums_save() { printf '%s %s\n' "$1" "$2" | dd of=/dev/vdd conv=fsync 2>/dev/null; }

case $1 in
start)
        must rbio fill /dev/vda 5
        zero_cow /dev/vdb
        zero_cow /dev/vdc
        make_origin rollback o /dev/vda
        make_snapshot rollback o s1 /dev/vdb 8 || fail "create s1"
        cp /dev/vda /tmp/model-s1
        must rbio write /dev/mapper/o --seed 6 --count 1500 --direct > /dev/null
        make_snapshot rollback o s2 /dev/vdc 8 || fail "create s2"
        must rbio write /dev/mapper/o --seed 7 --count 500 --direct > /dev/null
        must rbio write /dev/mapper/s1 /tmp/model-s1 --seed 8 --count 200 --direct > /dev/null
        sums_save "$(rbio sum /tmp/model-s1)" "$(rbio sum /dev/mapper/s2)"
        size=$(sectors /dev/mapper/o-real)
        must dmsetup suspend o
        must dmsetup remove s1
        must dmsetup reload o --table "0 $size rollback-merge /dev/mapper/o-real /dev/vdb P 8"
        must dmsetup resume o
        must dmsetup message o 0 merge_throttle 1500
        snapshot_status o
        echo CUT-HERE
        sleep 120
        fail "the power cut did not come"
        ;;
finish)
        read -r want_o want_s2 < /dev/vdd
        size=$(sectors /dev/vda)
        must dmsetup create o-real --table "0 $size linear /dev/vda 0"
        # s2 tracks the origin before the merge writes to it.
        must dmsetup create o --notable
        must dmsetup create s2 --table "0 $size rollback-snap /dev/mapper/o-real /dev/vdc P 8"
        must dmsetup reload o --table "0 $size rollback-merge /dev/mapper/o-real /dev/vdb P 8"
        must dmsetup resume o
        echo "after the power cut: $(snapshot_status o)"
        wait_merged o
        [ "$(rbio sum /dev/mapper/o)" = "$want_o" ] || fail "the merged origin is not the snapshot"
        [ "$(rbio sum /dev/mapper/s2)" = "$want_s2" ] || fail "s2 changed"
        remove_all
        [ "$(rbio sum /dev/vda)" = "$want_o" ] || fail "the origin device is not the snapshot"
        ;;
esac
pass
