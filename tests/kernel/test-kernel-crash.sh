# SPDX-License-Identifier: GPL-2.0-or-later
# Guest half of the power-cut test (see crash-host): phase "write" keeps
# writing to the origin until the VM is killed; phase "verify" reloads the
# tables and checks that the snapshot still shows exactly the data from
# before the writes, in both implementations.
#
# Disks: vda origin (32M), vdb COW (64M), kept across boots.
. ./lib.sh

case $1 in
write)
        must rbio fill /dev/vda 42
        zero_cow /dev/vdb
        make_origin rollback o /dev/vda
        make_snapshot rollback o s /dev/vdb "$2" || fail "create s"
        must rbio write /dev/mapper/o --seed 43 --count 200 --direct
        echo "CUT-HERE"
        rbio write /dev/mapper/o --seed 44 --count 1000000 --threads 4 --direct
        fail "the writes ended before the power cut"
        ;;
verify)
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
        pass "snapshot intact after a power cut"
        ;;
esac
fail "usage: test-kernel-crash.sh write|verify CHUNK"
