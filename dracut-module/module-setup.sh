#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# dracut module: re-arm rollback's snapshots and start a pending merge
# before root is mounted.  The work is done by rollback-boot.

check() {
        require_binaries @libexecdir@/rollback/rollback-boot || return 1
        return 0
}

depends() {
        echo dm lvm
        return 0
}

installkernel() {
        hostonly='' instmods dm-snapshot dm-bufio
        # A snapshot booted from GRUB's menu keeps its writes in a RAM disk.
        hostonly='' instmods brd
        # Built out of tree; when it is missing the upstream targets are used.
        hostonly='' instmods dm-rollback 2> /dev/null || :
}

install() {
        inst_binary @libexecdir@/rollback/rollback-boot
        # The pool's identity, so that early boot uses no other device with the magic.
        if [ -e /etc/rollback/pool-uuid ]; then
                inst_simple /etc/rollback/pool-uuid
        fi
        # systemctl and sleep: the hook reboots after an automatic revert (exit 4).
        inst_multiple -o modprobe systemctl sleep
        inst_hook pre-mount 10 "$moddir/rollback-pre-mount.sh"
        inst_hook initqueue/settled 60 "$moddir/rollback-view.sh"
        # The initqueue, where the view is made, runs only when some module asks for it.
        dracut_need_initqueue
}
