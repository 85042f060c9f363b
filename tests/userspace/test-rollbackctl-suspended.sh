# SPDX-License-Identifier: GPL-2.0-or-later
# While rollbackctl holds a volume suspended (rbdm_swap), a page fault served
# from it would never return and a signal that ends it (^C, TERM, the
# watchdog's ABRT) would leave it suspended: its memory is locked and those
# signals wait.  The suspend is held open by a
# write stuck under the volume (a suspended gate device), and the process is
# looked at meanwhile.
. ./lib.sh
. ./lib-userspace.sh
ctl="rollbackctl --no-daemon"

make_lvm
must $ctl init /dev/mapper/vg0-pool
must lvm lvcreate -q -y -L 8M -n spare vg0
must dmsetup create gate --table "$(dmsetup table vg0-spare)"
must dmsetup create gated --table "0 $(sectors /dev/mapper/gate) linear /dev/mapper/gate 0"
must dmsetup suspend gate
dd if=/dev/zero of=/dev/mapper/gated bs=4k count=1 oflag=direct 2>/dev/null &
writer=$!

step "snapshot of a volume whose suspend waits for a held write"
$ctl snapshot --name held gated &
creator=$!
# The suspend waits in the kernel (dmsetup shows SUSPENDED only once it is
# done): the new table loaded and the memory locked mark the window.
for i in $(seq 100); do
        [ "$(awk '/^VmLck:/ { print $2 }' /proc/$creator/status)" -gt 0 ] 2>/dev/null && break
        sleep 0.1
done
sleep 1
dmsetup info gated | grep -q "Tables present:.*INACTIVE" || fail "rollbackctl is not swapping the volume's table"
kill -0 $creator || fail "rollbackctl ended while the volume's write is held"
status=$(cat /proc/$creator/status)
echo "$status" | grep -E "^(VmLck|SigBlk):"
locked=$(echo "$status" | awk '/^VmLck:/ { print $2 }')
[ "${locked:-0}" -gt 0 ] || fail "no memory locked while the volume is suspended"
blocked=$(echo "$status" | awk '/^SigBlk:/ { print $2 }')
# SIGINT (2), SIGHUP (1), SIGQUIT (3), SIGTERM (15), SIGTSTP (20): bits 1, 0, 2, 14, 19;
# and SIGABRT (6, bit 5), which systemd's watchdog sends rollbackd.
[ $(( 0x$blocked & 0x84027 )) = $(( 0x84027 )) ] || fail "signals not blocked while suspended: $blocked"

must dmsetup resume gate
wait $writer || fail "the held write failed"
wait $creator || fail "the snapshot was not created"
uses_target gated rollback-origin || uses_target gated snapshot-origin || fail "gated is not armed: $(dmsetup table gated)"
must $ctl delete held
pass
