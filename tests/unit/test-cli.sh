#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
# rollbackctl's argument parsing: a bad argument is one line on stderr and a
# documented exit code, before anything is touched.
set -u
ctl=$1
fails=0

expect() {
        want=$1
        shift
        err=$("$ctl" "$@" 2>&1 >/dev/null)
        rc=$?
        lines=$(printf '%s\n' "$err" | grep -c .)
        if [ "$rc" != "$want" ] || [ "$lines" -ne 1 ]; then
                echo "FAIL: rollbackctl $* -> exit $rc, stderr: $err (want exit $want, one line)"
                fails=$((fails + 1))
        fi
}

expect 2
expect 2 frobnicate
expect 2 --bogus list
expect 2 snapshot --size 12Q
expect 2 snapshot --size 0
expect 2 snapshot --size -5M
expect 2 snapshot --expect-writes lots
expect 2 snapshot --expect-writes 0
expect 2 snapshot --name 'bad/name'
expect 2 snapshot a b
expect 2 revert
expect 2 revert a b
expect 2 delete
expect 2 init
expect 2 init --extent-size 1000 /dev/null
expect 2 init --backend zfs /dev/null
expect 2 wait --timeout soon
expect 2 list extra
expect 3 init /nonexistent/device

"$ctl" --help | grep -q 'Exit status' || { echo "FAIL: --help lacks exit codes"; fails=$((fails + 1)); }
for verb in init snapshot list status revert cancel-revert delete wait config; do
        "$ctl" --help | grep -q "^  $verb" || { echo "FAIL: --help lacks $verb"; fails=$((fails + 1)); }
done
"$ctl" --version | grep -q '^rollbackctl ' || { echo "FAIL: --version"; fails=$((fails + 1)); }

# Under systemd (stderr is the journal stream) each line carries its priority, so
# that journalctl -p err shows the errors; on a terminal it does not.
log=$(mktemp)
JOURNAL_STREAM=$(stat -c %d:%i "$log") "$ctl" frobnicate 2> "$log"
grep -q '^<3>' "$log" || { echo "FAIL: no error priority for the journal: $(cat "$log")"; fails=$((fails + 1)); }
"$ctl" frobnicate 2> "$log"
grep -q '^<' "$log" && { echo "FAIL: a priority prefix outside the journal"; fails=$((fails + 1)); }
rm -f "$log"

[ $fails -eq 0 ] && echo ok
exit $fails
