# SPDX-License-Identifier: GPL-2.0-or-later
# The persistent store survives a reload across several metadata areas; a
# full COW makes the snapshot Invalid (on disk too) while the origin keeps
# working; the transient store works and keeps nothing.
#
# Disks: vda origin (32M), vdb COW (64M).
. ./lib.sh

step "persistence across metadata areas (chunk 8: 256 entries per area)"
must rbio fill /dev/vda 11
zero_cow /dev/vdb
make_origin rollback o /dev/vda
make_snapshot rollback o s /dev/vdb 8 || fail "create s"
cp /dev/vda /tmp/model-s
cp /dev/vda /tmp/model-o
must rbio write /dev/mapper/o /tmp/model-o --seed 12 --count 900 --threads 2 --direct
must rbio write /dev/mapper/s /tmp/model-s --seed 13 --count 300 --direct
st=$(snapshot_status s)
echo "before reload: $st"
meta=${st##* }
[ "$meta" -ge 32 ] || fail "expected several metadata areas, status '$st'"
remove_all
# What is on disk is well formed and is what the status counts: the header,
# the areas and one chunk per exception.
map=$(rbio cowmap /dev/vdb) || fail "bad COW after the writes"
n=$(echo "$map" | sed -n 's/^exceptions=\([0-9]*\) areas=\([0-9]*\)$/\1 \2/p')
[ -n "$n" ] || fail "no counts from cowmap"
[ $((${st%%/*} / 8)) = $((1 + ${n% *} + ${n#* })) ] ||
        fail "status '$st' does not match the $n exceptions and areas on disk"
for impl in rollback upstream rollback; do
        make_origin $impl o /dev/vda
        make_snapshot $impl o s /dev/vdb 8 || fail "$impl: reload s"
        [ "$(snapshot_status s)" = "$st" ] || fail "$impl: status after reload '$(snapshot_status s)', was '$st'"
        must rbio cmp /dev/mapper/s /tmp/model-s
        must rbio cmp /dev/mapper/o /tmp/model-o
        remove_all
done

step "the table's chunk size gives way to the one on disk"
make_origin rollback o /dev/vda
make_snapshot rollback o s /dev/vdb 64 || fail "reload with another chunk size"
[ "$(snapshot_status s)" = "$st" ] || fail "status with table chunk 64: '$(snapshot_status s)'"
must rbio cmp /dev/mapper/s /tmp/model-s
remove_all

for writer in origin snapshot; do
        step "overflow through $writer writes: snapshot Invalid, origin fine"
        must rbio fill /dev/vda 21
        cp /dev/vda /tmp/model-o
        # A 1 MiB COW holds about 250 chunks of 4 KiB.
        must dmsetup create cow --table "0 2048 linear /dev/vdb 0"
        zero_cow /dev/mapper/cow
        make_origin rollback o /dev/vda
        make_snapshot rollback o s /dev/mapper/cow 8 || fail "create s"
        if [ $writer = origin ]; then
                must rbio write /dev/mapper/o /tmp/model-o --seed 22 --count 600 --direct
        else
                rbio write /dev/mapper/s --seed 22 --count 600 --direct 2>/dev/null &&
                        fail "writes to a full snapshot succeeded"
        fi
        [ "$(snapshot_status s)" = Invalid ] || fail "status of full snapshot: '$(snapshot_status s)'"
        dd if=/dev/mapper/s of=/dev/null bs=4096 count=1 iflag=direct 2>/dev/null &&
                fail "a read from an invalid snapshot succeeded"
        must rbio write /dev/mapper/o /tmp/model-o --seed 23 --count 200 --direct
        must rbio cmp /dev/mapper/o /tmp/model-o
        dmsetup remove s
        valid=$(dd if=/dev/mapper/cow bs=4 skip=1 count=1 2>/dev/null | od -An -tx1 | tr -d ' ')
        [ "$valid" = 00000000 ] || fail "header valid field is '$valid' after overflow"
        dmsetup suspend o
        must dmsetup create s --table "0 $(sectors /dev/vda) rollback-snap /dev/mapper/o-real /dev/mapper/cow P 8"
        dmsetup resume o
        [ "$(snapshot_status s)" = Invalid ] || fail "reloaded invalid snapshot: '$(snapshot_status s)'"
        dmsetup remove s
        dmsetup suspend o
        must dmsetup create s --table "0 $(sectors /dev/vda) snapshot /dev/mapper/o-real /dev/mapper/cow P 8"
        dmsetup resume o
        [ "$(snapshot_status s)" = Invalid ] || fail "upstream reads it as '$(snapshot_status s)'"
        remove_all
done

step "transient store"
must rbio fill /dev/vda 31
cp /dev/vda /tmp/model-s
make_origin rollback o /dev/vda
make_snapshot rollback o s /dev/vdb 16 N || fail "create transient s"
[ "$(dmsetup table s | cut -d' ' -f6-)" = "N 16" ] || fail "table: $(dmsetup table s)"
must rbio write /dev/mapper/o --seed 32 --count 200 --direct
must rbio cmp /dev/mapper/s /tmp/model-s
snapshot_status s | grep -q '^[0-9]*/131072 0$' || fail "transient status '$(snapshot_status s)'"
remove_all
pass "persistent and transient stores"
