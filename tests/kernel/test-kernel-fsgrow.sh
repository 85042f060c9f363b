# SPDX-License-Identifier: GPL-2.0-or-later
# What the e2e's apt-get full-upgrade does to the root volume, on one vCPU:
# ext4 on a rollback-origin, a snapshot whose small COW (low_water_mark,
# no_space queue 60000) lives on a linear dm device grown on the table
# events as rollbackd grows it (rbdm_swap: reload, suspend, resume), many
# small files written, fsynced and renamed as dpkg does, and a logger
# appending and fsyncing as journald does, all on the same filesystem.
# Then as the e2e's hang found it (its COW 9% used, never grown): a COW
# that never fills, writeback bursts over a small copy limit, the same
# writers.  Every writer must keep going: a stall of 40 s dumps the blocked
# tasks (sysrq w) and fails.
#
# Disks: vda origin (256M), vdb the disk under the COW (256M).
. ./lib.sh

chunk=8
lwm=64
packages=${1:-120}
bursts=

echo 1 > /proc/sys/kernel/sysrq
sysctl -q -w kernel.hung_task_timeout_secs=60 2> /dev/null
sysctl -q -w kernel.hung_task_warnings=-1 2> /dev/null
dmesg -n 7

size=$(sectors /dev/vda)
cowdisk=$(sectors /dev/vdb)

step "ext4 on a rollback-origin, then a snapshot with a 1 MiB COW"
must mkfs.ext4 -q -F -b 4096 /dev/vda
zero_cow /dev/vdb
must dmsetup create cw --table "0 2048 linear /dev/vdb 0"
make_origin rollback o /dev/vda
must mkdir -p /mnt
must mount -t ext4 /dev/mapper/o /mnt
must dmsetup suspend o
must dmsetup create s --table "0 $size rollback-snap /dev/mapper/o-real /dev/mapper/cw P $chunk 5 low_water_mark $lwm no_space queue 60000"
must dmsetup resume o
dd if=/dev/urandom of=/tmp/src bs=64k count=4 2> /dev/null

# As rbdm_swap(): the bigger table is loaded, then the COW device is
# suspended (with its filesystem "frozen", as libdevmapper does by default)
# and resumed.
grow() {
        len=$((len + 4096))
        [ $len -le "$cowdisk" ] || len=$cowdisk
        dmsetup reload cw --table "0 $len linear /dev/vdb 0" || return 1
        dmsetup suspend cw || return 1
        dmsetup resume cw
}

# Grows cw on the table events of s while it is near its low-water mark.
grower() {
        local ev
        len=2048
        while [ ! -e /tmp/stop ]; do
                ev=$(table_events s)
                set -- $(snapshot_usage s)
                [ $# = 2 ] || { echo "grower: status $*"; return 1; }
                if [ $(($2 - $1)) -le $(((lwm + 8) * chunk)) ] && [ $len -lt "$cowdisk" ]; then
                        grow || { echo "grower: cannot grow to $len"; return 1; }
                        echo "grew to $len" >> /tmp/grow.log
                        continue
                fi
                timeout 2 dmsetup wait s "$ev" > /dev/null 2>&1
        done
        return 0
}

# As dpkg: each package's files written as .new, fsynced, renamed; then
# the status file rewritten and fsynced.
dpkg_like() {
        local p=0 i d
        while [ $p -lt "$packages" ]; do
                d=/mnt/pkg$((p % 40))
                mkdir -p $d || return 1
                i=0
                while [ $i -lt 16 ]; do
                        dd if=/tmp/src of=$d/f$i.new bs=4k count=$((1 + (p + i) % 12)) 2> /dev/null || return 1
                        i=$((i + 1))
                done
                sync $d/f*.new || return 1
                i=0
                while [ $i -lt 16 ]; do
                        mv $d/f$i.new $d/f$i || return 1
                        i=$((i + 1))
                done
                if [ -n "$bursts" ] && [ $((p % 10)) = 0 ]; then
                        dd if=/dev/zero of=/mnt/big$((p % 30)) bs=1M count=8 2> /dev/null || return 1
                fi
                dd if=/tmp/src of=/mnt/status.new bs=4k count=8 2> /dev/null || return 1
                sync /mnt/status.new && mv /mnt/status.new /mnt/status || return 1
                p=$((p + 1))
                echo $p > /tmp/progress-dpkg
        done
}

# As journald: lines appended, the file fsynced every few lines.
logger_like() {
        local n=0
        while [ ! -e /tmp/stop ]; do
                echo "line $n: $(date) the quick brown fox jumps over the lazy dog" >> /mnt/journal || return 1
                n=$((n + 1))
                if [ $((n % 4)) = 0 ]; then
                        sync /mnt/journal || return 1
                        echo $n > /tmp/progress-log
                fi
        done
}

progress() {
        cat /tmp/progress-dpkg /tmp/progress-log 2> /dev/null | tr '\n' ' '
}

# Shows where everything is stuck, then fails.
stalled() {
        echo "STALL: no progress for $1 s ($(progress)); blocked tasks:"
        echo w > /proc/sysrq-trigger
        sleep 2
        for p in /proc/[0-9]*; do
                case $(cat $p/stat 2> /dev/null | cut -d' ' -f3) in
                D|S) ;;
                *) continue ;;
                esac
                case $(cat $p/comm 2> /dev/null) in
                dmsetup|dd|sync|mv|sh) echo "-- $(cat $p/comm) $(cat $p/cmdline | tr '\0' ' ') [$(cut -d' ' -f3 $p/stat)]"
                                        cat $p/stack 2> /dev/null ;;
                esac
        done
        dmsetup info -c -o name,attr,events
        dmsetup status
        tail -n 5 /tmp/grow.log
        dmesg | tail -n 300
        echo "ROLLBACK-TEST-RESULT rc=1"
        echo o > /proc/sysrq-trigger
        sleep 60
}

# run_writers GROW: the dpkg-like writer and the logger (and the grower if
# GROW), watched for stalls.
run_writers() {
        local grow_pid= log_pid dpkg_pid last= idle=0 now said=0 count
        rm -f /tmp/stop /tmp/progress-*
        : > /tmp/grow.log
        if [ "$1" = grow ]; then
                grower &
                grow_pid=$!
        fi
        logger_like &
        log_pid=$!
        dpkg_like &
        dpkg_pid=$!
        while kill -0 $dpkg_pid 2> /dev/null; do
                sleep 2
                now=$(progress)
                if [ "$now" = "$last" ]; then
                        idle=$((idle + 2))
                        [ $idle -lt 40 ] || stalled $idle
                else
                        idle=0
                        last=$now
                        count=$(cat /tmp/progress-dpkg 2> /dev/null || echo 0)
                        if [ $((count / 20)) -gt $((said / 20)) ]; then
                                echo "progress (packages, log lines): $now"
                                said=$count
                        fi
                fi
        done
        wait $dpkg_pid || fail "the dpkg-like writer failed"
        touch /tmp/stop
        wait $log_pid || fail "the logger failed"
        [ -z "$grow_pid" ] || wait $grow_pid || fail "the grower failed"
        echo "packages: $(cat /tmp/progress-dpkg), log lines: $(cat /tmp/progress-log), grown $(wc -l < /tmp/grow.log) times"
}

step "dpkg-like writes and a logger, the COW grown on events"
run_writers grow
st=$(snapshot_status s)
echo "status: $st"
case $st in Invalid*) fail "the snapshot was invalidated" ;; esac
must umount /mnt
must e2fsck -f -n /dev/mapper/o > /dev/null
must rbio cowmap /dev/mapper/cw > /dev/null
dmesg | grep -q "snapshot invalidated" && fail "the kernel invalidated a snapshot"
no_splat "growth under ext4"
remove_all

step "a COW that never fills, writeback bursts over a copy limit of 64"
must mkfs.ext4 -q -F -b 4096 /dev/vda
zero_cow /dev/vdb
make_origin rollback o /dev/vda
must mount -t ext4 /dev/mapper/o /mnt
make_snapshot rollback o s /dev/vdb $chunk P "5 low_water_mark $lwm no_space queue 60000" || fail "create s"
echo 0 > /sys/module/dm_rollback/parameters/copy_peak
echo 64 > /sys/module/dm_rollback/parameters/copy_limit
bursts=1
run_writers
echo "copies in flight at most: $(cat /sys/module/dm_rollback/parameters/copy_peak)"
echo 2048 > /sys/module/dm_rollback/parameters/copy_limit
st=$(snapshot_status s)
echo "status: $st"
case $st in Invalid*) fail "the snapshot was invalidated" ;; esac
must umount /mnt
must e2fsck -f -n /dev/mapper/o > /dev/null
no_splat "bursts"
remove_all
pass "ext4 writers never wait for good on a COW, grown or not"
