#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
# rbio write flushes once, after every thread's last write: a flush of one
# thread racing another's writes lets dm-log-writes log a COW copy after
# the commit that points at it (test-kernel-logwrites then fails at a
# crash point no disk can show).
set -eu
rbio=$1
command -v strace > /dev/null || { echo "strace is not installed"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
truncate -s 16M "$dir/target"
strace -f -qq -e trace=pwrite64,fsync -o "$dir/trace" \
        "$rbio" write "$dir/target" --seed 1 --count 400 --bs 4096 --threads 4 >/dev/null
first_flush=$(grep -n 'fsync(' "$dir/trace" | head -n1 | cut -d: -f1)
last_write=$(grep -n 'pwrite64(' "$dir/trace" | tail -n1 | cut -d: -f1)
[ -n "$first_flush" ] || { echo "rbio write did not flush"; exit 1; }
[ "$(grep -c 'fsync(' "$dir/trace")" = 1 ] || { echo "rbio write flushed more than once"; exit 1; }
if [ "$first_flush" -lt "$last_write" ]; then
        echo "rbio write flushed (trace line $first_flush) before its last write (line $last_write)"
        exit 1
fi
echo "one flush, after the last of 400 writes"
