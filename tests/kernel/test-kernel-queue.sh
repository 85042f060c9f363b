# SPDX-License-Identifier: GPL-2.0-or-later
# rollback-snap's features: low_water_mark raises a table event, and with
# no_space queue a write that needs a chunk of a full COW waits for the COW
# device to grow instead of invalidating the snapshot.  The COW lives on a
# linear dm device (cw) over a bigger disk, grown by a reload and resume of
# cw alone, as rollbackd does it.
#
# Disks: vda origin (32M), vdb the disk under the COW (64M), vdc the COW of
# a snapshot merged (64M).
. ./lib.sh

chunk=8
span=$((16 * 1024 * 1024))

must rbio fill /dev/vda 1
must cp /dev/vda /tmp/model-snap
size=$(sectors /dev/vda)
cowdisk=$(sectors /dev/vdb)

is_full() {
        set -- $(snapshot_usage s)
        [ $# = 2 ] && [ $(($1 + chunk)) -gt "$2" ]
}

# setup COWLEN FEATURES: a fresh origin o, COW cw (COWLEN sectors of vdb)
# and snapshot s with FEATURES after the four upstream arguments.
setup() {
        remove_all
        must dd if=/tmp/model-snap of=/dev/vda bs=1M conv=fsync 2>/dev/null
        zero_cow /dev/vdb
        must dmsetup create cw --table "0 $1 linear /dev/vdb 0"
        make_origin rollback o /dev/vda
        must dmsetup suspend o
        must dmsetup create s --table "0 $size rollback-snap /dev/mapper/o-real /dev/mapper/cw P $chunk $2"
        must dmsetup resume o
        must cp /tmp/model-snap /tmp/model-o
}

grow_cw() {
        must dmsetup reload cw --table "0 $1 linear /dev/vdb 0"
        must dmsetup resume cw
}

# Waits (at most 30 s) until the COW of s is full.
wait_full() {
        local i=0
        until is_full; do
                i=$((i + 1))
                [ $i -lt 300 ] || fail "the COW never filled: $(snapshot_status s)"
                sleep 0.1
        done
}

step "table lines with features"
zero_cow /dev/vdb
must dmsetup create cw --table "0 $cowdisk linear /dev/vdb 0"
make_origin rollback o /dev/vda
snap="0 $size rollback-snap /dev/mapper/o-real /dev/mapper/cw P $chunk"
for features in "" "2 low_water_mark 16" "3 no_space queue 30000" "2 no_space error" \
                "5 no_space queue 1000 low_water_mark 0" "5 low_water_mark 7 no_space queue 1" \
                "4 low_water_mark 7 no_space error"; do
        must dmsetup suspend o
        must dmsetup create s --table "$snap $features"
        must dmsetup resume o
        got=$(dmsetup table s | cut -d' ' -f6-)
        want="P $chunk${features:+ $features}"
        [ "$got" = "$want" ] || fail "table of '$features' reads back as '$got'"
        echo "table: ${features:-no features} -> $got"
        must dmsetup remove s
done

refused() {
        dmesg -c > /dev/null
        must_not dmsetup create bad --table "$snap $1"
        dmsetup info bad > /dev/null 2>&1 && fail "'$1' left a device behind"
        dmesg | grep -qF "$2" || fail "no '$2' for '$1': $(dmesg | tail -n 3)"
        no_splat "'$1'"
        echo "refused: $1 -> $2"
}
refused "1" "Invalid argument count"
refused "3 low_water_mark 16" "Invalid argument count"
refused "1 low_water_mark 16" "Invalid argument count"
refused "x low_water_mark 16" "Invalid argument count"
refused "1 low_water_mark" "Invalid low_water_mark"
refused "2 low_water_mark sixteen" "Invalid low_water_mark"
refused "2 low_water_mark -1" "Invalid low_water_mark"
refused "2 no_space later" "Invalid no_space policy"
refused "1 no_space" "Invalid no_space policy"
refused "2 no_space queue" "Invalid no_space queue timeout"
refused "3 no_space queue 0" "Invalid no_space queue timeout"
refused "3 no_space queue 3600001" "Invalid no_space queue timeout"
refused "3 no_space queue soon" "Invalid no_space queue timeout"
refused "4 low_water_mark 1 low_water_mark 2" "Feature given twice"
refused "5 no_space error no_space queue 10" "Feature given twice"
refused "2 discard_zeroes_cow 1" "Unrecognised feature"

step "upstream snapshot in the same guest takes what it took"
for features in "" "1 discard_zeroes_cow" "2 discard_zeroes_cow discard_passdown_origin"; do
        zero_cow /dev/mapper/cw
        must dmsetup create u --table "0 $size snapshot /dev/mapper/o-real /dev/mapper/cw P $chunk $features"
        st=$(snapshot_status u)
        [ "$st" = "16/$cowdisk 16" ] || fail "upstream with '$features': status '$st'"
        must dmsetup remove u
done
echo "upstream snapshot: loads as before"

step "a writer at full speed, the COW grown on events: never invalid"
lwm=32

# Grows cw, from COWLEN sectors, in 2 MiB steps on the table events of s
# until /tmp/stop-grow exists, each time only once the COW is full (or
# after 3 s): slower than the writer, which fills the COW and waits.
grow_on_events() {
        local len=$1 ev i
        : > /tmp/grow.log
        while [ ! -e /tmp/stop-grow ]; do
                ev=$(table_events s)
                set -- $(snapshot_usage s)
                [ $# = 2 ] || { echo "status $*" >> /tmp/grow.log; break; }
                if [ $(($2 - $1)) -le $(((lwm + 1) * chunk)) ] && [ $len -lt "$cowdisk" ]; then
                        i=0
                        while ! is_full && [ $i -lt 30 ] && [ ! -e /tmp/stop-grow ]; do
                                sleep 0.1
                                i=$((i + 1))
                        done
                        is_full && echo "full at $len" >> /tmp/grow.log
                        len=$((len + 4096))
                        [ $len -le "$cowdisk" ] || len=$cowdisk
                        grow_cw $len
                        echo "grew to $len" >> /tmp/grow.log
                        continue
                fi
                timeout 2 dmsetup wait s "$ev" > /dev/null 2>&1
        done
}

stop_growing() {
        touch /tmp/stop-grow
        wait "$1"
        rm -f /tmp/stop-grow
        cat /tmp/grow.log
        grep -q "^full" /tmp/grow.log || fail "the COW never filled: no write waited"
}

setup 2048 "5 low_water_mark $lwm no_space queue 30000"
grow_on_events 2048 &
grower=$!
start_ev=$(table_events s)
must rbio write /dev/mapper/o /tmp/model-o --seed 5 --count 400 --bs 65536 --span $span --direct
step "and snapshot writes meanwhile"
rbio write /dev/mapper/s /tmp/model-snap --seed 6 --count 300 --bs 4096 --span $span --direct &
snapw=$!
must rbio write /dev/mapper/o /tmp/model-o --seed 7 --count 200 --bs 65536 --span $span --direct
wait $snapw || fail "snapshot writes failed"
stop_growing $grower
st=$(snapshot_status s)
echo "status: $st, events $start_ev -> $(table_events s)"
case $st in Invalid*) fail "the snapshot was invalidated" ;; esac
must rbio cmp /dev/mapper/o /tmp/model-o
must rbio cmp /dev/mapper/s /tmp/model-snap
dmesg | grep -q "snapshot invalidated" && fail "the kernel invalidated a snapshot"
must dmsetup remove s
must rbio cowmap /dev/mapper/cw > /dev/null
no_splat "growth"
must cp /dev/vda /tmp/model-snap-2
must rbio fill /dev/vda 1

step "no room to grow: invalid after the timeout, the origin fine"
setup 2048 "3 no_space queue 3000"
ev=$(table_events s)
t0=$(date +%s)
must rbio write /dev/mapper/o /tmp/model-o --seed 8 --count 200 --bs 65536 --span $span --direct
t1=$(date +%s)
st=$(snapshot_status s)
echo "status: $st after $((t1 - t0)) s, events $ev -> $(table_events s)"
[ "$st" = Invalid ] || fail "status is '$st', not Invalid"
[ $((t1 - t0)) -ge 2 ] || fail "the writes did not wait for the timeout"
[ "$(table_events s)" -gt "$ev" ] || fail "no table event"
must rbio cmp /dev/mapper/o /tmp/model-o
must rbio write /dev/mapper/o /tmp/model-o --seed 9 --count 50 --bs 65536 --span $span --direct
must rbio cmp /dev/mapper/o /tmp/model-o
must dmsetup remove s
valid=$(od -An -tu4 -j4 -N4 /dev/mapper/cw | tr -d ' ')
[ "$valid" = 0 ] || fail "the COW header says valid=$valid"
for impl in rollback upstream; do
        must dmsetup create s --table "0 $size $(snapshot_target $impl) /dev/mapper/o-real /dev/mapper/cw P $chunk"
        st=$(snapshot_status s)
        [ "$st" = Invalid ] || fail "$impl loads the COW as '$st'"
        must dmsetup remove s
done
echo "reloaded: Invalid in both"
no_splat "timeout"

# queued_then WHAT CMD...: writes wait for a full COW (timeout 60 s), then
# CMD runs: it must end within 15 s and the writes must all land.
queued_then() {
        local what=$1 t0 t1 writer
        shift
        step "$what while writes wait"
        setup 2048 "3 no_space queue 60000"
        rbio write /dev/mapper/o /tmp/model-o --seed 10 --count 200 --bs 65536 --span $span --direct &
        writer=$!
        wait_full
        sleep 1
        t0=$(date +%s)
        timeout 15 "$@" || fail "$what: '$*' failed or hung"
        t1=$(date +%s)
        echo "$what: $* took $((t1 - t0)) s"
        [ $((t1 - t0)) -lt 15 ] || fail "$what took too long"
}

queued_then "suspend of the snapshot" dmsetup suspend s
st=$(snapshot_status s)
[ "$st" = Invalid ] || fail "suspended with a full COW: status '$st', not Invalid"
must dmsetup resume s
wait $writer || fail "origin writes failed"
must rbio cmp /dev/mapper/o /tmp/model-o
no_splat "suspend of the snapshot"

queued_then "suspend of the origin" dmsetup suspend o
must dmsetup resume o
wait $writer || fail "origin writes failed"
st=$(snapshot_status s)
[ "$st" = Invalid ] || fail "origin suspended with a full COW: status '$st', not Invalid"
must rbio cmp /dev/mapper/o /tmp/model-o
no_splat "suspend of the origin"

queued_then "removal of the snapshot" dmsetup remove s
wait $writer || fail "origin writes failed"
must rbio cmp /dev/mapper/o /tmp/model-o
no_splat "removal"

step "an origin removed while suspended: snapshot writes still wait for the COW"
# The removed origin's suspend must not count: it used to end every wait of
# its snapshots, which then invalidated at once.
setup 2048 "3 no_space queue 60000"
must dmsetup suspend o
must dmsetup remove o
must cp /tmp/model-snap /tmp/model-s-alone
rbio write /dev/mapper/s /tmp/model-s-alone --seed 11 --count 400 --bs 4096 --span $span --direct &
writer=$!
wait_full
sleep 1
st=$(snapshot_status s)
[ "$st" = Invalid ] && fail "a full COW invalidated at once: the removed origin's suspend still counted"
grow_cw $cowdisk
wait $writer || fail "snapshot writes failed"
st=$(snapshot_status s)
echo "status: $st"
case $st in Invalid*) fail "the snapshot was invalidated" ;; esac
must rbio cmp /dev/mapper/s /tmp/model-s-alone
no_splat "removed while suspended"

step "a merge keeps a snapshot whose COW waits to grow"
setup 2048 ""
must dmsetup remove s
zero_cow /dev/vdc
make_snapshot rollback o a /dev/vdc $chunk || fail "create a"
cp /tmp/model-snap /tmp/model-merge
must rbio write /dev/mapper/o /tmp/model-o --seed 20 --count 100 --bs 65536 --span $span --direct
cp /tmp/model-o /tmp/model-s
must dmsetup suspend o
must dmsetup create s --table "0 $size rollback-snap /dev/mapper/o-real /dev/mapper/cw P $chunk 5 low_water_mark $lwm no_space queue 30000"
must dmsetup resume o
merge="rollback-merge /dev/mapper/o-real /dev/vdc P $chunk 3 no_space queue 30000"
must dmsetup reload o --table "0 $size $merge"
must dmsetup suspend a
must dmsetup suspend o
grow_on_events 2048 &
grower=$!
must dmsetup resume o
must dmsetup remove a
got=$(dmsetup table o | cut -d' ' -f6-)
[ "$got" = "P $chunk 3 no_space queue 30000" ] || fail "merge table reads back as '$got'"
must rbio write /dev/mapper/o /tmp/model-merge --seed 21 --count 100 --bs 65536 --span $span --direct
wait_merged o
stop_growing $grower
st=$(snapshot_status s)
echo "s: $st, merge: $(snapshot_status o)"
case $st in Invalid*) fail "the merge invalidated s" ;; esac
must rbio cmp /dev/mapper/o /tmp/model-merge
must rbio cmp /dev/mapper/s /tmp/model-s
no_splat "merge"

remove_all
pass "no_space queue and low_water_mark"
