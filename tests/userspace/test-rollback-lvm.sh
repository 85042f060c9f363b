# SPDX-License-Identifier: GPL-2.0-or-later
# LVM replacing an armed volume's table (lvextend, lvchange --refresh,
# pvmove onto a second disk): the
# snapshots stop seeing its writes, so they are reported invalid with a
# clear line, never offered for revert, and a new snapshot works.
. ./lib.sh
. ./lib-userspace.sh
ctl="rollbackctl --no-daemon"

POOL_SIZE=48M make_lvm
populate
must $ctl init /dev/mapper/vg0-pool
must $ctl config chunk_sectors=8
must lvm pvcreate -q /dev/vdb
must lvm vgextend -q vg0 /dev/vdb

for how in extend refresh pvmove; do
        step "snapshot, then LVM reloads the volume ($how)"
        must $ctl snapshot --name before-$how vg0-root
        case $how in
        extend) must lvm lvextend -q -L +4M vg0/root ;;
        refresh) must lvm lvchange -q --refresh vg0/root ;;
        # In the foreground (-i0): the guest has no lvmpolld.
        pvmove) must lvm pvmove -q -i0 -n vg0/root /dev/vda /dev/vdb ;;
        esac
        dmsetup table vg0-root
        echo "written after LVM took the volume back" > /mnt/etc/pkg-version
        sync
        $ctl status > /tmp/status 2>&1
        cat /tmp/status
        $ctl --json list | grep -A8 "\"before-$how\"" | grep -q '"state": "invalid"' ||
                fail "before-$how is not invalid after LVM replaced the volume's table"
        expect_rc 6 $ctl revert before-$how
        step "a new snapshot after $how"
        must $ctl snapshot --name after-$how vg0-root
        tree_sums /mnt > /tmp/sums-now
        snapshot_matches /dev/mapper/rollback-after-$how /tmp/sums-now || fail "after-$how does not show the volume"
        must $ctl delete before-$how
        must $ctl delete after-$how
done
pass
