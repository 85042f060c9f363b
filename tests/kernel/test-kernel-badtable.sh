# SPDX-License-Identifier: GPL-2.0-or-later
# Wrong table lines are refused with a clear error and write nothing.
#
# Disks: vda origin (32M), vdb COW (64M).
. ./lib.sh

must rbio fill /dev/vda 1
must rbio fill /dev/vdb 2
size=$(sectors /dev/vda)
must dmsetup create o-real --table "0 $size linear /dev/vda 0"
origin_sum=$(checksum /dev/vda) || fail "cannot read the origin"

# refused "TABLE" "ERROR": the load fails, the kernel says ERROR, no disk changes.
refused() {
        local cow_sum
        cow_sum=$(checksum /dev/vdb) || fail "cannot read the COW"
        dmesg -c > /dev/null
        must_not dmsetup create bad --table "$1"
        dmsetup remove bad 2>/dev/null
        dmesg | grep -qF "$2" || fail "no '$2' for '$1': $(dmesg | tail -n 3)"
        no_splat "'$1'"
        same_sum /dev/vdb "$cow_sum" "'$1' changed the COW device"
        same_sum /dev/vda "$origin_sum" "'$1' changed the origin device"
        echo "refused: $1 -> $2"
}

snap="0 $size rollback-snap"
refused "$snap /dev/mapper/o-real /dev/vdb P" "Invalid argument count"
refused "$snap /dev/mapper/o-real /dev/vdb P 8 extra" "Invalid argument count"
refused "$snap /dev/mapper/o-real /dev/vdb X 8" "Store type is not P or N"
refused "$snap /dev/mapper/o-real /dev/vdb P 0" "Invalid chunk size"
refused "$snap /dev/mapper/o-real /dev/vdb P 12" "Invalid chunk size"
refused "$snap /dev/mapper/o-real /dev/vdb P eight" "Invalid chunk size"
refused "$snap /dev/nonexistent /dev/vdb P 8" "Cannot get origin device"
refused "$snap /dev/mapper/o-real /dev/nonexistent P 8" "Cannot get COW device"
refused "$snap /dev/mapper/o-real /dev/mapper/o-real P 8" "COW device cannot be the origin device"
refused "$snap /dev/mapper/o-real /dev/vdb P 8" "COW has a wrong magic number"

# A header with the right magic and version 2.
printf 'SnAp\001\000\000\000\002\000\000\000\010\000\000\000' | dd of=/dev/vdb conv=notrunc,fsync 2>/dev/null
refused "$snap /dev/mapper/o-real /dev/vdb P 8" "COW has an unsupported version"
# Version 1 with a chunk size that is not a power of two.
printf 'SnAp\001\000\000\000\001\000\000\000\014\000\000\000' | dd of=/dev/vdb conv=notrunc,fsync 2>/dev/null
refused "$snap /dev/mapper/o-real /dev/vdb P 8" "COW has an invalid chunk size"

refused "0 $size rollback-origin" "Invalid argument count"
refused "0 $size rollback-origin /dev/vda /dev/vdb" "Invalid argument count"
refused "0 $size rollback-origin /dev/nonexistent" "Cannot get origin device"

step "a COW device is used by one snapshot at a time"
zero_cow /dev/vdb
must dmsetup create o --table "0 $size rollback-origin /dev/mapper/o-real"
make_snapshot rollback o s /dev/vdb 8 || fail "create s"
refused "$snap /dev/mapper/o-real /dev/vdb P 8" "COW device is already in use"
remove_all
pass "bad tables refused"
