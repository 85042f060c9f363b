# SPDX-License-Identifier: GPL-2.0-or-later
# Guest helpers for the rollbackctl/rollbackd tests, on top of lib.sh.

# A volume group on vda with a root LV (ext4, mounted at /mnt) and a pool LV.
make_lvm() {
        must lvm pvcreate -q /dev/vda
        must lvm vgcreate -q vg0 /dev/vda
        must lvm lvcreate -q -y -L "${ROOT_SIZE:-48M}" -n root vg0
        must lvm lvcreate -q -y -L "${POOL_SIZE:-68M}" -n pool vg0
        must mkfs.ext4 -q -F /dev/mapper/vg0-root
        mkdir -p /mnt /snap
        must mount /dev/mapper/vg0-root /mnt
}

# Files whose checksums tell the states apart.
populate() {
        mkdir -p /mnt/etc /mnt/usr/lib
        for i in 1 2 3 4 5 6; do
                dd if=/dev/urandom of=/mnt/usr/lib/lib$i.so bs=64k count=8 2>/dev/null
        done
        echo "version 1" > /mnt/etc/pkg-version
        sync
}

churn() {
        for i in 1 2 3; do
                dd if=/dev/urandom of=/mnt/usr/lib/lib$i.so bs=64k count=8 conv=notrunc 2>/dev/null
        done
        rm /mnt/usr/lib/lib4.so
        dd if=/dev/urandom of=/mnt/usr/lib/new.so bs=64k count=16 2>/dev/null
        echo "version 2" > /mnt/etc/pkg-version
        sync
}

tree_sums() {
        (cd "$1" && find . -type f ! -path './lost+found/*' | sort | xargs md5sum)
}

# snapshot_matches DEV SUMS: DEV, mounted read-only, holds the files of SUMS.
snapshot_matches() {
        must mount -o ro,noload "$1" /snap
        tree_sums /snap > /tmp/sums-snap
        umount /snap
        cmp -s "$2" /tmp/sums-snap
}

# json_field KEY: the values of "KEY": in pretty JSON on stdin.
json_field() {
        sed -n "s/^ *\"$1\": \"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}$/\1/p"
}

# expect_rc WANT CMD...: CMD exits WANT and says exactly one line on stderr
# (silence is no explanation, a second line is noise).
expect_rc() {
        want=$1
        shift
        "$@" 2>/tmp/err >/dev/null
        rc=$?
        [ "$rc" = "$want" ] || fail "'$*' exited $rc, not $want: $(cat /tmp/err)"
        [ "$(grep -c '' /tmp/err)" = 1 ] && [ "$(grep -c . /tmp/err)" = 1 ] ||
                fail "'$*' said $(grep -c '' /tmp/err) lines, not one: $(cat /tmp/err)"
        echo "  '$*' -> $rc: $(cat /tmp/err)"
}

# uses_target DEV TARGET: DEV's table is a TARGET (so "snapshot" is not
# "snapshot-origin", and a fallback to the other implementation shows).
uses_target() {
        dmsetup table "$1" 2>/dev/null | grep -q "^[0-9]* [0-9]* $2 "
}

# The crash-point tests (test-rollbackctl-crash, test-rollback-power-cut)
# share these; $ctl is the rollbackctl command line.

# state NAME: its state in list --json, "gone" if not listed.
state() {
        $ctl --json list > /tmp/list.json || fail "list after a crash"
        awk -v want="$1" '/"name":/ { n = $2 } /"state":/ && n == "\"" want "\"," { gsub(/[",]/, "", $2); print $2 }' \
                /tmp/list.json | grep . || echo gone
}

# No device left suspended, and the pool's extents add up: free ones and
# the snapshots' make the total (opening the pool checked that no extent is
# in two snapshots).
pool_consistent() {
        dmsetup info -c --noheadings -o name,suspended | grep -i ':suspended$' &&
                fail "a device was left suspended"
        $ctl status > /tmp/status || fail "status after a crash: $(cat /tmp/status)"
        $ctl --json status > /tmp/status.json || fail "status --json after a crash"
        ext=$(json_field extent_size_bytes < /tmp/status.json)
        total=$(json_field extents_total < /tmp/status.json)
        free=$(json_field extents_free < /tmp/status.json)
        used=0
        for b in $(json_field size_bytes < /tmp/status.json); do
                used=$((used + b / ext))
        done
        [ $((free + used)) = "$total" ] ||
                fail "extents do not add up: $free free + $used in snapshots != $total"
}

# Writes to the volume, then snapshot NAME (created afresh) must show them.
fresh_snapshot_works() {
        echo "after $1" > /mnt/etc/marker
        sync
        tree_sums /mnt > /tmp/sums-now
        must $ctl snapshot --name "$1" vg0-root
        [ "$(state "$1")" = active ] || fail "$1 is $(state "$1") after a fresh create"
        snapshot_matches "/dev/mapper/rollback-$1" /tmp/sums-now || fail "a fresh $1 does not show the volume"
}

# The /boot tests (test-rollbackctl-boot, test-rollback-auto-revert): a revert needs an
# initramfs that carries rollback's hook (docs/boot.md).
# newc_entry NAME DATA: one entry of a cpio archive as the kernel reads it.
newc_entry() {
        n=$((${#1} + 1)) size=${#2}
        printf '070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X' 1 33188 0 0 1 0 "$size" 0 0 0 0 "$n" 0
        printf '%s\0' "$1"
        head -c $(((4 - (110 + n) % 4) % 4)) /dev/zero
        printf '%s' "$2"
        head -c $(((4 - size % 4) % 4)) /dev/zero
}

# fake_initramfs FILE PATH: an initramfs as dracut compresses it, holding PATH.
fake_initramfs() {
        { newc_entry "$2" "#!/bin/sh"; newc_entry "TRAILER!!!" ""; } | gzip -c > "$1"
}
