# SPDX-License-Identifier: GPL-2.0-or-later
# Guest half of the power-cut test (see crash-host): phase "write" keeps
# writing to the origin until the VM is killed; phase "verify" checks that
# every origin unit holds its last write from before the marker or one
# write from after it (some must: the cut came during those writes), that
# the COW is well formed, and that the snapshot still shows exactly the
# data from before the writes, in both implementations.
#
# Args: write|verify CHUNK crowd|spread (with crowd, four threads write
# slices of the same blocks, racing on every chunk they copy).
# Disks: vda origin (32M), vdb COW (64M), kept across boots.
. ./lib.sh

case $3 in
crowd) mode=--crowd ;;
spread) mode= ;;
*) fail "usage: test-kernel-crash.sh write|verify CHUNK crowd|spread" ;;
esac
# The two runs of origin writes, as rbio written describes them.
before="--seed 43 --count 200"
after="--seed 44 --count 1000000 --threads 4 $mode"

case $1 in
write)
        must rbio fill /dev/vda 42
        zero_cow /dev/vdb
        make_origin rollback o /dev/vda
        make_snapshot rollback o s /dev/vdb "$2" || fail "create s"
        must rbio write /dev/mapper/o $before --direct
        # The writers print the marker themselves, once under way.
        rbio write /dev/mapper/o $after --direct --say-after 20 CUT-HERE
        fail "the writes ended before the power cut"
        ;;
verify)
        out=$(rbio written /dev/vda 42 $before --done --then $after) ||
                fail "origin after the power cut: $out"
        echo "origin: $out"
        case $out in
        *" run2=0 "*) fail "no write from after the marker reached the origin" ;;
        esac
        must rbio cowmap /dev/vdb > /dev/null
        must dd if=/dev/zero of=/tmp/model bs=1M count=32 2>/dev/null
        must rbio fill /tmp/model 42
        for impl in rollback upstream; do
                make_origin $impl o /dev/vda
                make_snapshot $impl o s /dev/vdb "$2" || fail "$impl: reload after power cut"
                echo "$impl: $(snapshot_status s)"
                must rbio cmp /dev/mapper/s /tmp/model
                remove_all
        done
        make_origin rollback o /dev/vda
        make_snapshot rollback o s /dev/vdb "$2" || fail "reload"
        must rbio write /dev/mapper/o --seed 45 --count 300 --direct
        must rbio cmp /dev/mapper/s /tmp/model
        remove_all
        pass "origin and snapshot consistent after a power cut"
        ;;
esac
fail "usage: test-kernel-crash.sh write|verify CHUNK crowd|spread"
