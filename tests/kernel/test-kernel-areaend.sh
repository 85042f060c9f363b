# SPDX-License-Identifier: GPL-2.0-or-later
# A COW device that ends right after a full metadata area: filling that
# area must not write the next one past the end of the device.  With
# no_space queue the writes wait for the COW to grow and then land; with
# no_space error the snapshot is invalid as full, as upstream's is.
#
# Disks: vda origin (32M), vdb the disk under the COW (64M).
. ./lib.sh

chunk=8
span=$((16 * 1024 * 1024))
# 4 KiB chunks: an area holds 256 exceptions and is followed by their 256
# data chunks.  The header, then areas 0 and 1 with their data: 515 chunks.
cowlen=$(((1 + 2 * 257) * chunk))

must rbio fill /dev/vda 1
must cp /dev/vda /tmp/model-snap
size=$(sectors /dev/vda)
cowdisk=$(sectors /dev/vdb)

# setup IMPL FEATURES: a fresh origin o, COW cw ($cowlen sectors of vdb)
# and snapshot s of IMPL with FEATURES.
setup() {
        remove_all
        dmesg -c > /dev/null
        must dd if=/tmp/model-snap of=/dev/vda bs=1M conv=fsync 2>/dev/null
        zero_cow /dev/vdb
        must dmsetup create cw --table "0 $cowlen linear /dev/vdb 0"
        make_origin $1 o /dev/vda
        must dmsetup suspend o
        must dmsetup create s --table "0 $size $(snapshot_target $1) /dev/mapper/o-real /dev/mapper/cw P $chunk${2:+ $2}"
        must dmsetup resume o
        must cp /tmp/model-snap /tmp/model-o
}

step "no_space queue: the writes wait at the end of area 1, then land"
setup rollback "3 no_space queue 60000"
ev=$(table_events s)
rbio write /dev/mapper/o /tmp/model-o --seed 1 --count 200 --bs 65536 --span $span --direct &
writer=$!
i=0
until [ "$(table_events s)" -gt "$ev" ]; do
        case $(snapshot_status s) in Invalid*)
                fail "invalidated instead of waiting: $(dmesg | grep invalidated)" ;;
        esac
        i=$((i + 1))
        [ $i -lt 300 ] || fail "the COW never filled: $(snapshot_status s)"
        sleep 0.1
done
sleep 1
st=$(snapshot_status s)
echo "full: $st"
case $st in Invalid*) fail "invalidated while full: $(dmesg | grep invalidated)" ;; esac
kill -0 $writer 2>/dev/null || fail "the writes did not wait"
must dmsetup reload cw --table "0 $cowdisk linear /dev/vdb 0"
must dmsetup resume cw
wait $writer || fail "origin writes failed"
st=$(snapshot_status s)
echo "grown: $st"
case $st in Invalid*) fail "invalidated after the growth: $(dmesg | grep invalidated)" ;; esac
must rbio cmp /dev/mapper/o /tmp/model-o
must rbio cmp /dev/mapper/s /tmp/model-snap
must dmsetup remove s
must rbio cowmap /dev/mapper/cw > /dev/null
must dmsetup create u --table "0 $size snapshot /dev/mapper/o-real /dev/mapper/cw P $chunk"
must rbio cmp /dev/mapper/u /tmp/model-snap
echo "upstream reads it: $(snapshot_status u)"
must dmsetup remove u
no_splat "queue"

for impl in rollback upstream; do
        step "$impl, no_space error: invalid as full"
        features=
        [ $impl = rollback ] && features="2 no_space error"
        setup $impl "$features"
        must rbio write /dev/mapper/o /tmp/model-o --seed 1 --count 200 --bs 65536 --span $span --direct
        st=$(snapshot_status s)
        echo "$impl: $st"
        [ "$st" = Invalid ] || fail "$impl: status '$st', not Invalid"
        must rbio cmp /dev/mapper/o /tmp/model-o
        if [ $impl = rollback ]; then
                dmesg | grep "invalidated"
                dmesg | grep -q "invalidated: COW device is full" || fail "not invalidated as full"
        fi
        no_splat "$impl no_space error"
done

remove_all
pass "a COW that ends after a full area"
