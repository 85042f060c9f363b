#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
# initqueue/settled: rd.rollback.boot=NAME (a "Rollback snapshots" entry of
# GRUB's menu) boots snapshot NAME through a view whose writes are
# discarded.  The view is root, so it is made here, where dracut waits for
# root, not in pre-mount, which runs once root is there.
command -v getarg > /dev/null || . /lib/dracut-lib.sh

rollback_view=$(getarg rd.rollback.boot=)
if [ -n "$rollback_view" ] && [ ! -e /run/rollback-view.done ]; then
        @libexecdir@/rollback/rollback-boot --view "$rollback_view"
        case $? in
        0) : > /run/rollback-view.done ;;
        # The pool or the volume is not up yet: the next settled round tries again.
        75) ;;
        *)
                : > /run/rollback-view.done
                emergency_shell -n rollback "rollback: snapshot $rollback_view cannot be booted (the reason is in the kernel log: dmesg | grep rollback). Reboot and choose another entry."
                ;;
        esac
fi
unset rollback_view
