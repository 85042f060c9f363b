#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
# After the volume groups are active, before root is mounted.
command -v getarg > /dev/null || . /lib/dracut-lib.sh

if getargbool 1 rd.rollback; then
        info "rollback: arming snapshots"
        # rd.rollback.pool=UUID: that pool, not the one recorded by init.
        pool=$(getarg rd.rollback.pool=)
        # rd.rollback.timeout=SEC: how long to wait for the pool's device, as for root.
        timeout=$(getarg rd.rollback.timeout=)
        # 3: the pool is missing or a merge could not be loaded; root is not mounted until it can be.
        while :; do
                @libexecdir@/rollback/rollback-boot ${pool:+--pool "UUID=$pool"} --wait "${timeout:-30}"
                case $? in
                0) break ;;
                # A failed upgrade reverted itself: /boot has the old kernel back, which starts the merge.
                # Root must not be mounted meanwhile: wait for the reboot here.
                4)
                        info "rollback: rebooting into the automatic revert"
                        systemctl --force reboot || reboot -f
                        while :; do sleep 60; done
                        ;;
                3) emergency_shell -n rollback "rollback: root is not mounted (the reason is in the kernel log: dmesg | grep rollback). Fix the cause and exit this shell to try again, or reboot with rd.rollback=0 to boot without rollback." ;;
                *) warn "rollback: the early-boot step failed; see the kernel log"; break ;;
                esac
        done
fi
