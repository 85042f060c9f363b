# SPDX-License-Identifier: GPL-2.0-or-later
# rollbackctl through rollbackd on a D-Bus system bus (started by bus
# activation): autoextension under a big write, retention of upgrade
# snapshots, an overflow reported invalid, a merge finished by the daemon,
# a write faster than the daemon's poll, and an overflow reported at once by
# the device-mapper event with the poll far away; a snapshot sized for the
# writes a package change expects; /boot copied and put back through it.
. ./lib.sh
. ./lib-userspace.sh
ctl=rollbackctl

POOL_SIZE=100M make_lvm
populate
tree_sums /mnt > /tmp/sums-pre

step "a system bus that activates rollbackd"
echo "root:x:0:0:root:/:/bin/sh" > /etc/passwd
echo "root:x:0:" > /etc/group
mkdir -p /run/dbus /tmp/dbus-services
# --pool: the search for the pool reads every block device, and would hang
# on the volume held below for the merge.
cat > /tmp/dbus-services/org.rollback1.service <<EOS
[D-BUS Service]
Name=org.rollback1
Exec=/bin/sh -c "exec /sbin/rollbackd --interval 0.3 --pool /dev/mapper/vg0-pool 2>>/tmp/rollbackd.log"
User=root
EOS
cat > /tmp/bus.conf <<EOS
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:path=/run/dbus/system_bus_socket</listen>
  <auth>EXTERNAL</auth>
  <servicedir>/tmp/dbus-services</servicedir>
  <policy context="default">
    <allow user="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow own="*"/>
    <allow receive_sender="*"/>
    <allow receive_type="method_return"/>
    <allow receive_type="signal"/>
    <allow receive_type="error"/>
  </policy>
  <include>/tests/org.rollback1.conf</include>
</busconfig>
EOS
dbus-daemon --config-file=/tmp/bus.conf --nofork --nopidfile &
for i in $(seq 50); do [ -S /run/dbus/system_bus_socket ] && break; sleep 0.1; done
[ -S /run/dbus/system_bus_socket ] || fail "dbus-daemon did not start"

must $ctl init /dev/mapper/vg0-pool
must $ctl --no-daemon config autoextend_threshold=50 autoextend_percent=100 retain=2 pool_warn_percent=25

step "snapshot through the daemon"
must $ctl snapshot --name grow --size 4M vg0-root
pidof rollbackd >/dev/null || fail "rollbackd was not activated"
uses_target vg0-root rollback-origin || fail "vg0-root is not a rollback-origin"
uses_target rollback-grow rollback-snap || fail "rollback-grow is not a rollback-snap"

step "a big write: the daemon extends the COW before it fills"
for i in $(seq 10); do
        dd if=/dev/urandom of=/mnt/big$i bs=1M count=1 conv=fsync 2>/dev/null
        sleep 0.5
done
sync
sleep 1
$ctl list
[ "$($ctl --json list | json_field state)" = "active" ] || fail "grow did not stay active"
size=$($ctl --json list | json_field size_bytes)
[ "$size" -gt 4194304 ] || fail "grow was not extended (size $size)"
dmsetup table rollback-grow-cow
cat /tmp/rollbackd.log
grep -q "Extended snapshot grow" /tmp/rollbackd.log || fail "no extension logged"
grep -q "The pool is .* full" /tmp/rollbackd.log || fail "no warning of a pool past pool_warn_percent"
snapshot_matches /dev/mapper/rollback-grow /tmp/sums-pre || fail "the extended snapshot lost data"

step "retention keeps the last 2 upgrade snapshots"
for n in u1 u2 u3; do
        must $ctl snapshot --upgrade --name $n --size 4M vg0-root
        sleep 1
done
[ "$($ctl --json list | json_field name | tr '\n' ' ')" = "grow u2 u3 " ] || fail "retention: $($ctl list)"

step "MarkGood ends the trial the last upgrade snapshot opened"
$ctl mark-good vg0-root > /tmp/out || fail "mark-good through the daemon failed"
grep -q "upgrade of snapshot u3 is good" /tmp/out || fail "mark-good said: $(cat /tmp/out)"
grep -q "This boot of vg0-root is good" /tmp/rollbackd.log || fail "rollbackd did not log the good boot"
$ctl mark-good vg0-root > /tmp/out || fail "a second mark-good failed"
grep -q "No upgrade is on trial" /tmp/out || fail "a second mark-good said: $(cat /tmp/out)"
must $ctl delete u2
must $ctl delete u3

step "with autoextension off, an overflow is reported invalid"
must $ctl --no-daemon config autoextend_threshold=0
must $ctl snapshot --name small --size 4M vg0-root
dd if=/dev/urandom of=/mnt/big-overflow bs=1M count=8 conv=fsync 2>/dev/null
sync
sleep 1
$ctl list
[ "$($ctl --json list | json_field state | tr '\n' ' ')" = "active invalid " ] || fail "small not invalid"
expect_rc 6 $ctl revert small
grep -q "Snapshot small of vg0-root became invalid" /tmp/rollbackd.log || fail "the invalid snapshot was not reported"
must $ctl delete small

step "revert --now through the daemon; the daemon finishes the merge"
umount /mnt
pre_sum=$(checksum /dev/mapper/rollback-grow) || fail "cannot read snapshot grow"
# The daemon finishes a merge this small before its table could be seen:
# the merge's writes wait in the suspended real device until it has been.
must dmsetup suspend rollback-vg0-root-real
must $ctl revert grow --now
uses_target vg0-root rollback-merge || fail "vg0-root is not a rollback-merge"
must dmsetup resume rollback-vg0-root-real
must $ctl wait --timeout 300
same_sum /dev/mapper/vg0-root "$pre_sum" "the volume does not equal the snapshot"
dmsetup table vg0-root | grep -q " linear " || fail "the volume is not plain after the merge"
dmsetup ls | grep -q rollback- && fail "rollback devices left: $(dmsetup ls)"
must mount /dev/mapper/vg0-root /mnt
tree_sums /mnt > /tmp/sums-now
umount /mnt
cmp -s /tmp/sums-pre /tmp/sums-now || fail "files differ from the snapshot"
grep -q "Merged snapshot grow into vg0-root" /tmp/rollbackd.log || fail "the daemon did not report the merge"

# A full COW holds the writes that need it for full_wait_seconds; with no
# daemon to grow it meanwhile, the snapshot is then invalid and the volume
# stays writable.
step "with the daemon stopped, writes wait full_wait_seconds, then the snapshot is invalid"
must $ctl --no-daemon config autoextend_threshold=50 full_wait_seconds=2
must mount /dev/mapper/vg0-root /mnt
must $ctl snapshot --name fast --size 4M vg0-root
dmsetup table rollback-fast | grep -q " 5 low_water_mark [0-9]* no_space queue 2000$" ||
        fail "fast is not loaded with its features: $(dmsetup table rollback-fast)"
daemon=$(pidof rollbackd) || fail "rollbackd is not running"
must kill -STOP $daemon
start=$(date +%s)
dd if=/dev/zero of=/mnt/fast bs=1M count=16 conv=fsync 2>/dev/null
sync
took=$(( $(date +%s) - start ))
status=$(snapshot_status rollback-fast)
must kill -CONT $daemon
echo "  the write took $took s"
[ "$took" -ge 2 ] || fail "the write into a full COW did not wait (took $took s)"
[ "$status" = Invalid ] || fail "a 16 MiB write did not overflow a 4 MiB COW: status '$status'"
for i in $(seq 50); do
        grep -q "Snapshot fast of vg0-root became invalid" /tmp/rollbackd.log && break
        sleep 0.2
done
grep -q "Snapshot fast of vg0-root became invalid" /tmp/rollbackd.log || fail "the daemon did not report fast invalid"
grep -q "Extended snapshot fast" /tmp/rollbackd.log && fail "fast was extended, yet overflowed"
[ "$($ctl --json list | json_field state)" = invalid ] || fail "fast is not listed invalid"
expect_rc 6 $ctl revert fast
echo still-writable > /mnt/after-overflow || fail "the volume is not writable after the overflow"
must $ctl delete fast

# The poll is only the fallback: a device-mapper event wakes the daemon.
step "with a poll once in 10 minutes, an overflow is reported at once"
must kill $daemon
sed -i 's/--interval 0.3/--interval 600/' /tmp/dbus-services/org.rollback1.service
must $ctl --no-daemon config autoextend_threshold=0
must $ctl snapshot --name slow-poll --size 4M vg0-root
pidof rollbackd > /dev/null || fail "rollbackd was not activated again"
sleep 1
dd if=/dev/urandom of=/mnt/slow-poll bs=1M count=8 conv=fsync 2>/dev/null
for i in $(seq 50); do
        grep -q "Snapshot slow-poll of vg0-root became invalid" /tmp/rollbackd.log && break
        sleep 0.2
done
grep -q "Snapshot slow-poll of vg0-root became invalid" /tmp/rollbackd.log ||
        fail "the overflow of slow-poll was not reported within 10 s"
must $ctl delete slow-poll

# The COW's low-water mark wakes the daemon, and writes that find the COW
# full wait for it to grow: a snapshot is never lost while the pool has room.
step "a full-speed 24 MiB write into a 4 MiB COW, the poll 10 minutes away: extended, never invalid"
# 20% of up to 10 extents is at most 2: a bigger step comes from the write rate.
must $ctl --no-daemon config autoextend_threshold=50 autoextend_percent=20 full_wait_seconds=60
# Room on the 48 MiB filesystem for the write.
rm -f /mnt/big* /mnt/fast /mnt/slow-poll
sync
tree_sums /mnt > /tmp/sums-burst
must $ctl snapshot --name burst --size 4M vg0-root
dd if=/dev/urandom of=/tmp/burst-data bs=1M count=24 2>/dev/null
dd if=/tmp/burst-data of=/mnt/burst bs=1M conv=fsync 2>/dev/null || fail "the write failed"
sync
$ctl list
[ "$(state burst)" = active ] || fail "burst is $(state burst) after a 24 MiB write: $(snapshot_status rollback-burst)"
size=$($ctl --json list | json_field size_bytes)
[ "$size" -gt 16777216 ] || fail "burst holds 24 MiB of old data in $size bytes?"
snapshot_matches /dev/mapper/rollback-burst /tmp/sums-burst || fail "the grown snapshot lost data"
cmp -s /tmp/burst-data /mnt/burst || fail "the write did not land whole"
grep "Extended snapshot burst" /tmp/rollbackd.log
grep -q "Extended snapshot burst by \([3-9]\|[1-9][0-9]\+\) extent" /tmp/rollbackd.log ||
        fail "burst grew by autoextend_percent alone, not by its write rate"
must $ctl delete burst

# A suspend of the volume ends the waits for a full COW (the kernel then
# invalidates: a suspend must end in bounded time), so a snapshot taken
# while writes wait grows the full ones first.
step "a snapshot taken while writes wait for a full COW: that COW grows first and stays valid"
rm -f /mnt/burst
sync
tree_sums /mnt > /tmp/sums-held
must $ctl snapshot --name held --size 4M vg0-root
daemon=$(pidof rollbackd) || fail "rollbackd is not running"
must kill -STOP $daemon
dd if=/dev/urandom of=/mnt/held bs=1M count=8 oflag=direct 2>/dev/null &
writer=$!
# Waiting: the writer is still there and the COW no longer fills.
was=
for i in $(seq 60); do
        sleep 0.5
        now=$(snapshot_status rollback-held)
        [ "$now" = "$was" ] && kill -0 $writer 2>/dev/null && break
        was=$now
done
echo "  held is $now, the writer waiting"
kill -0 $writer 2>/dev/null || fail "an 8 MiB write into a 4 MiB COW did not wait"
must $ctl --no-daemon snapshot --name second vg0-root
[ "$(snapshot_status rollback-held)" = Invalid ] && fail "the suspend of the volume invalidated held"
must kill -CONT $daemon
wait $writer || fail "the write into held failed"
[ "$(state held)" = active ] || fail "held is $(state held): $(snapshot_status rollback-held)"
snapshot_matches /dev/mapper/rollback-held /tmp/sums-held || fail "held lost data"
must $ctl delete second
must $ctl delete held

# What the package hooks do (their own logic: tests/unit/test-package-hooks).
step "a snapshot sized for the writes expected (CreateSnapshotEx), or refused when the pool cannot hold them"
volume=$(( $(sectors /dev/mapper/vg0-root) * 512 ))
# Another active snapshot copies the same chunks: the pool must hold its
# share too (the new COW alone would fit).
must $ctl snapshot --name other --size 4M vg0-root
expect_rc 5 $ctl snapshot --upgrade --expect-writes 15M --name sized vg0-root
must $ctl delete other
must $ctl snapshot --upgrade --expect-writes 15M --name sized vg0-root
size=$($ctl --json list | json_field size_bytes | tail -n 1)
echo "  sized: $size bytes for 15 MiB expected"
# 15 MiB and half again plus 64 MiB is more than the volume: a copy of all of it.
[ "$size" -ge "$volume" ] || fail "the COW ($size) cannot hold the whole $volume-byte volume"
grep -q "Took snapshot sized of vg0-root, its COW sized for 15 MiB to be written" /tmp/rollbackd.log ||
        fail "rollbackd did not size it for the writes: $(tail -n 3 /tmp/rollbackd.log)"
count=$($ctl --json list | json_field name | wc -l)
expect_rc 5 $ctl snapshot --upgrade --expect-writes 15M --name toomuch vg0-root
cat /tmp/err
grep -q "cannot hold the 15.0M this change is expected to write" /tmp/err || fail "no word of the expected writes"
[ "$($ctl --json list | json_field name | wc -l)" = "$count" ] || fail "a refused estimate left a snapshot"
must $ctl delete sized

# docs/boot.md; the layouts and refusals: test-rollbackctl-boot.
step "/boot through the daemon: a snapshot copies it, revert and cancel-revert put it back, EILSEQ crosses the bus"
mkdir -p /mnt/boot
echo "set default=old" > /mnt/boot/grub.cfg
dd if=/dev/urandom of=/mnt/boot/initrd.img-1 bs=64k count=4 2>/dev/null
sync
must $ctl snapshot --name withboot vg0-root
$ctl --json list | grep -q '"boot_copy": true' || fail "the daemon's snapshot holds no copy of /boot"
echo "set default=new" > /mnt/boot/grub.cfg
sync
must $ctl revert withboot
grep -qx "set default=old" /mnt/boot/grub.cfg || fail "revert through the daemon did not put /boot back"
must $ctl cancel-revert
grep -qx "set default=new" /mnt/boot/grub.cfg || fail "cancel-revert through the daemon did not put /boot back"
must mount /dev/mapper/rollback-withboot /snap
echo "set default=evil" > /snap/var/lib/rollback/boot/grub.cfg
umount /snap
expect_rc 6 $ctl revert withboot
grep -q "damaged" /tmp/err || fail "the daemon's refusal does not say the copy is damaged"
must $ctl delete withboot
umount /mnt
cat /tmp/rollbackd.log
pass
