# SPDX-License-Identifier: GPL-2.0-or-later
# Guest half of the power-cut test (see crash-host): phase "write" keeps
# writing to the origin until the VM is killed; phase "verify" checks that
# every origin unit holds its last write from before the marker or one
# write from after it (some must: the cut came during those writes), that
# the COW is well formed, and that the snapshot still shows exactly the
# data from before the writes, in both implementations.
#
# Args: write|verify CHUNK crowd|spread|queued (with crowd, four threads
# write slices of the same blocks, racing on every chunk they copy; with
# queued, the COW is the first 1 MiB of vdb, with no_space queue, and the
# cut comes once it is full and writes wait for it to grow; after the
# reboot it grows to all of vdb and the snapshot goes on).
# Disks: vda origin (32M), vdb COW (64M), kept across boots.
. ./lib.sh

cow=/dev/vdb
features=
case $3 in
crowd) mode=--crowd ;;
spread) mode= ;;
queued)
        mode=
        must dmsetup create cw --table "0 2048 linear /dev/vdb 0"
        cow=/dev/mapper/cw
        features="3 no_space queue 600000"
        ;;
*) fail "usage: test-kernel-crash.sh write|verify CHUNK crowd|spread|queued" ;;
esac

# Waits (at most 60 s) until the COW of s has no free chunk left.
wait_full() {
        local i=0 st
        while :; do
                st=$(snapshot_status s)
                case $st in
                [0-9]*/[0-9]*\ [0-9]*)
                        set -- $(echo "${st%% *}" | tr / ' ')
                        [ $(($1 + chunk)) -gt "$2" ] && return 0
                        ;;
                *) fail "the COW did not fill: status '$st'" ;;
                esac
                i=$((i + 1))
                [ $i -lt 600 ] || fail "the COW never filled: $st"
                sleep 0.1
        done
}
# The two runs of origin writes, as rbio written describes them.
before="--seed 43 --count 200"
after="--seed 44 --count 1000000 --threads 4 $mode"

case $1 in
write)
        must rbio fill /dev/vda 42
        zero_cow /dev/vdb
        make_origin rollback o /dev/vda
        make_snapshot rollback o s $cow "$2" P "$features" || fail "create s"
        must rbio write /dev/mapper/o $before --direct
        if [ "$3" != queued ]; then
                # The writers print the marker themselves, once under way.
                rbio write /dev/mapper/o $after --direct --say-after 20 CUT-HERE
                fail "the writes ended before the power cut"
        fi
        rbio write /dev/mapper/o $after --direct &
        writer=$!
        chunk=$2
        wait_full
        sleep 1
        kill -0 $writer 2>/dev/null || fail "the writes did not wait for the full COW"
        echo "full and waiting: $(snapshot_status s)"
        echo CUT-HERE
        sleep 60
        fail "no power cut"
        ;;
verify)
        out=$(rbio written /dev/vda 42 $before --done --then $after) ||
                fail "origin after the power cut: $out"
        echo "origin: $out"
        case $out in
        *" run2=0 "*) fail "no write from after the marker reached the origin" ;;
        esac
        must rbio cowmap $cow > /dev/null
        must dd if=/dev/zero of=/tmp/model bs=1M count=32 2>/dev/null
        must rbio fill /tmp/model 42
        for impl in rollback upstream; do
                make_origin $impl o /dev/vda
                make_snapshot $impl o s $cow "$2" || fail "$impl: reload after power cut"
                echo "$impl: $(snapshot_status s)"
                must rbio cmp /dev/mapper/s /tmp/model
                remove_all
                [ "$3" = queued ] && must dmsetup create cw --table "0 2048 linear /dev/vdb 0"
        done
        make_origin rollback o /dev/vda
        make_snapshot rollback o s $cow "$2" P "$features" || fail "reload"
        if [ "$3" = queued ]; then
                # The full COW grows, as rollbackd would grow it, and the snapshot goes on.
                must dmsetup reload cw --table "0 $(sectors /dev/vdb) linear /dev/vdb 0"
                must dmsetup resume cw
        fi
        must rbio write /dev/mapper/o --seed 45 --count 300 --direct
        must rbio cmp /dev/mapper/s /tmp/model
        remove_all
        pass "origin and snapshot consistent after a power cut"
        ;;
esac
fail "usage: test-kernel-crash.sh write|verify CHUNK crowd|spread"
