#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
# After the volume groups are active, before root is mounted.
command -v getarg > /dev/null || . /lib/dracut-lib.sh

if getargbool 1 rd.rollback; then
        info "rollback: arming snapshots"
        # rd.rollback.pool=UUID: that pool, not the one recorded by init.
        pool=$(getarg rd.rollback.pool=)
        @libexecdir@/rollback/rollback-boot ${pool:+--pool "UUID=$pool"}
        case $? in
        0) ;;
        3) emergency_shell -n rollback "rollback: a merge could not be loaded and root must not be mounted; see the kernel log (journalctl -t rollback)" ;;
        *) warn "rollback: the early-boot step failed; see the kernel log" ;;
        esac
fi
