# SPDX-License-Identifier: GPL-2.0-or-later
# /boot follows the root volume (docs/boot.md), with /boot on its own
# filesystem outside LVM (arg "separate", as Debian's guided LVM install
# makes it) or a directory of the root LV ("directory"): a snapshot holds a
# copy of /boot, and a revert puts it back exactly before anything is
# recorded, and cancel-revert puts back the /boot it replaced; a damaged or
# missing copy, one with no initramfs that carries rollback's hook and a
# /boot without room are refused with one line and nothing changed.
. ./lib.sh
. ./lib-userspace.sh
ctl="rollbackctl --no-daemon"
layout=$1

# Type, mode, owner, mtime, link target and checksum of everything in /boot
# (but what is mounted under it).
boot_sums() {
        (cd /mnt/boot && find . ! -name . ! -path './lost+found*' ! -path './efi*' | sort |
                xargs stat -c '%F %a %u %g %Y %N' &&
                find . -type f ! -path './lost+found/*' ! -path './efi/*' | sort | xargs md5sum)
}

umount_root() {
        [ "$layout" = separate ] && { must umount /mnt/boot/efi; must umount /mnt/boot; }
        must umount /mnt
}

mount_root() {
        must mount /dev/mapper/vg0-root /mnt
        [ "$layout" = separate ] && { must mount /dev/vdb /mnt/boot; must mount -t tmpfs -o size=1M esp /mnt/boot/efi; }
}

revert_pending() {
        $ctl --json list | grep -q '"revert_pending": true'
}

# Each revert and cancel-revert here rewrites /boot and a copy of it on the
# root (twice for a /boot directory) while no daemon grows the COW.
POOL_SIZE=100M
make_lvm
populate
mkdir -p /mnt/boot
if [ "$layout" = separate ]; then
        must mkfs.ext4 -q -F /dev/vdb
        must mount /dev/vdb /mnt/boot
        # Another filesystem under /boot, as an ESP at /boot/efi: left out, never emptied.
        mkdir -p /mnt/boot/efi
        must mount -t tmpfs -o size=1M esp /mnt/boot/efi
        echo "grubx64" > /mnt/boot/efi/BOOTX64.EFI
fi
mkdir -p /mnt/boot/grub
dd if=/dev/urandom of=/mnt/boot/vmlinuz-6.1.0-1 bs=64k count=16 2>/dev/null
fake_initramfs /mnt/boot/initrd.img-6.1.0-1 var/lib/dracut/hooks/pre-mount/10-rollback-pre-mount.sh
dd if=/dev/urandom of=/mnt/boot/System.map-6.1.0-1 bs=64k count=32 2>/dev/null
echo "set default=6.1.0-1" > /mnt/boot/grub/grub.cfg
chmod 600 /mnt/boot/vmlinuz-6.1.0-1
ln -s vmlinuz-6.1.0-1 /mnt/boot/vmlinuz
sync
boot_sums > /tmp/boot-pre

step "a snapshot holds a copy of /boot ($layout)"
must $ctl init /dev/mapper/vg0-pool
must $ctl config chunk_sectors=8 full_wait_seconds=1
must $ctl snapshot --name pre --size 64M vg0-root
$ctl --json list | grep -q '"boot_copy": true' || fail "list --json does not show pre's copy of /boot"
must mount -o ro,noload /dev/mapper/rollback-pre /snap
[ -s /snap/var/lib/rollback/boot.manifest ] || fail "the snapshot holds no manifest of /boot"
cmp -s /snap/var/lib/rollback/boot/initrd.img-6.1.0-1 /mnt/boot/initrd.img-6.1.0-1 ||
        fail "the snapshot's copy of the initramfs differs"
[ "$layout" = separate ] && [ -e /snap/var/lib/rollback/boot/efi/BOOTX64.EFI ] &&
        fail "the copy took in the filesystem mounted under /boot"
umount /snap

step "an upgrade: a new kernel, the old initramfs gone, GRUB's default moved"
dd if=/dev/urandom of=/mnt/boot/vmlinuz-6.1.0-2 bs=64k count=16 2>/dev/null
dd if=/dev/urandom of=/mnt/boot/initrd.img-6.1.0-2 bs=64k count=48 2>/dev/null
rm /mnt/boot/initrd.img-6.1.0-1
echo "set default=6.1.0-2" > /mnt/boot/grub/grub.cfg
ln -sf vmlinuz-6.1.0-2 /mnt/boot/vmlinuz
churn
sync
boot_sums > /tmp/boot-post
cmp -s /tmp/boot-pre /tmp/boot-post && fail "the upgrade changed nothing in /boot"

step "a damaged copy is refused, nothing changed"
must $ctl snapshot --name damaged --size 24M vg0-root
must mount /dev/mapper/rollback-damaged /snap
echo "set default=evil" > /snap/var/lib/rollback/boot/grub/grub.cfg
umount /snap
expect_rc 6 $ctl revert damaged
boot_sums | cmp -s - /tmp/boot-post || fail "a refused revert changed /boot"
revert_pending && fail "a refused revert was recorded"

step "a missing copy is refused, nothing changed; --keep-boot reverts the volume alone"
must mount /dev/mapper/rollback-damaged /snap
rm /snap/var/lib/rollback/boot.manifest
umount /snap
expect_rc 6 $ctl revert damaged
revert_pending && fail "a refused revert was recorded"
must $ctl revert damaged --keep-boot
revert_pending || fail "revert --keep-boot was not recorded"
boot_sums | cmp -s - /tmp/boot-post || fail "revert --keep-boot changed /boot"
must $ctl cancel-revert
must $ctl delete damaged

step "a /boot with no initramfs that carries rollback's hook is refused, nothing changed"
cp -p /mnt/boot/initrd.img-6.1.0-2 /tmp/initrd-2
fake_initramfs /mnt/boot/initrd.img-6.1.0-2 var/lib/dracut/hooks/pre-mount/30-other.sh
sync
must $ctl snapshot --name nohook --size 24M vg0-root
cp -p /tmp/initrd-2 /mnt/boot/initrd.img-6.1.0-2
sync
expect_rc 6 $ctl revert nohook
boot_sums | cmp -s - /tmp/boot-post || fail "a refused revert changed /boot"
revert_pending && fail "a refused revert was recorded"
must $ctl delete nohook

# A /boot directory's room is the root's: filling it would overflow the snapshots.
if [ "$layout" = separate ]; then
        step "a /boot without room for what the revert puts back is refused, nothing changed"
        dd if=/dev/zero of=/mnt/boot/filler bs=64k 2>/dev/null
        sync
        boot_sums > /tmp/boot-full
        expect_rc 5 $ctl revert pre
        boot_sums | cmp -s - /tmp/boot-full || fail "a refused revert changed /boot"
        revert_pending && fail "a refused revert was recorded"
        rm /mnt/boot/filler
        sync
fi

if [ "$layout" = directory ]; then
        step "a /boot that is another filesystem now than when the snapshot was taken is refused"
        must mount -t tmpfs -o size=4M other /mnt/boot
        expect_rc 6 $ctl revert pre
        revert_pending && fail "a refused revert was recorded"
        must umount /mnt/boot
        boot_sums | cmp -s - /tmp/boot-post || fail "a refused revert changed /boot"
fi

step "killed once /boot is back but before the revert is recorded: the post-upgrade /boot is still kept"
ROLLBACK_CRASH_AT=revert-boot $ctl revert pre > /dev/null 2>&1
[ $? = 137 ] || fail "revert was not killed at revert-boot"
revert_pending && fail "a revert killed before it was recorded is pending"
boot_sums | cmp -s - /tmp/boot-pre || fail "/boot is not the pre-upgrade one at revert-boot"
must $ctl revert pre
must $ctl cancel-revert
boot_sums | cmp -s - /tmp/boot-post || fail "the post-upgrade /boot was lost to the killed revert"

step "revert puts the pre-upgrade /boot back exactly, then records the revert"
must $ctl revert pre
revert_pending || fail "the revert was not recorded"
boot_sums > /tmp/boot-now
cmp -s /tmp/boot-pre /tmp/boot-now || { diff /tmp/boot-pre /tmp/boot-now; fail "/boot is not what it was before the upgrade"; }

step "cancel-revert puts back the /boot the revert replaced, also after a second revert"
must $ctl cancel-revert
revert_pending && fail "cancel-revert left the revert pending"
boot_sums | cmp -s - /tmp/boot-post || fail "cancel-revert did not put back the post-upgrade /boot"
must $ctl revert pre
must $ctl revert pre
boot_sums | cmp -s - /tmp/boot-pre || fail "a second revert changed /boot"
must $ctl cancel-revert
boot_sums | cmp -s - /tmp/boot-post || fail "cancel-revert after two reverts did not put back the post-upgrade /boot"

[ "$layout" = separate ] && { grep -qx grubx64 /mnt/boot/efi/BOOTX64.EFI || fail "the ESP under /boot was touched"; }

step "cancel-revert of an unmounted volume keeps the replaced /boot for when it is mounted again"
must $ctl revert pre
umount_root
must $ctl cancel-revert
mount_root
must $ctl revert pre
must $ctl cancel-revert
boot_sums | cmp -s - /tmp/boot-post || fail "the replaced /boot was lost to a cancel-revert while unmounted"

step "the merge brings the root back, and /boot still matches it"
must $ctl revert pre
must $ctl cancel-revert --keep-boot
boot_sums | cmp -s - /tmp/boot-pre || fail "cancel-revert --keep-boot changed /boot"
umount_root
must $ctl revert pre --now --keep-boot
must $ctl wait --timeout 300
mount_root
boot_sums | cmp -s - /tmp/boot-pre || fail "/boot changed after the merge"
grep -qx "version 1" /mnt/etc/pkg-version || fail "the root was not merged back"
pass
