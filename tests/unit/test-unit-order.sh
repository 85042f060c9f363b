#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
# The boot-assessment units as installed and enabled, with both example
# health checks: systemd finds no ordering cycle.  One ran through
# multi-user.target (which wants rollback-mark-good.service) to
# rollback-check-units.service (after multi-user.target), and systemd broke
# it by dropping the job that marks the boot good.
#   test-unit-order.sh BUILD_SYSTEMD_DIR
set -eu
units=$1
command -v systemd-analyze > /dev/null || { echo "FAIL: no systemd-analyze (scripts/install-deps installs systemd)"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/multi-user.target.wants" "$dir/boot-complete.target.requires"
for u in rollback-mark-good rollback-check-units rollback-check-network; do
        # Programs of the build tree need not be installed: what is checked is the ordering.
        sed 's|^ExecStart=.*|ExecStart=/bin/true|' "$units/$u.service" > "$dir/$u.service"
done
ln -s ../rollback-mark-good.service "$dir/multi-user.target.wants/"
ln -s ../rollback-check-units.service ../rollback-check-network.service "$dir/boot-complete.target.requires/"
rc=0
out=$(cd "$dir" && SYSTEMD_UNIT_PATH="$dir:" systemd-analyze verify --man=no rollback-mark-good.service \
        multi-user.target 2>&1) || rc=$?
if echo "$out" | grep -i "cycle"; then
        echo "FAIL: an ordering cycle among the boot-assessment units"
        exit 1
fi
# Silent and successful, or the units were not read as meant (a cycle unseen behind an error is no pass).
if [ "$rc" != 0 ] || [ -n "$out" ]; then
        echo "FAIL: systemd-analyze verify exited $rc and said: $out"
        exit 1
fi
echo ok
