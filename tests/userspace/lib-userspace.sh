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
