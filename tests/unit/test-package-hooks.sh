#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
# The package hooks' own logic, with rollbackctl stubbed (it records its
# arguments and exits as told): the apt hook sums the Installed-Size of
# the .deb files apt gives it (real ones, built here; 0512 is 512) and passes it as
# --expect-writes; when the pool cannot hold that (exit 5) it says so and
# takes a snapshot of the usual size, or with Rollback::Require in apt's
# configuration stops the upgrade.  The dnf4 plugin, with a stand-in dnf
# module, passes its transaction's installed size the same way.
#   test-package-hooks APT_HOOK DNF4_PLUGIN
set -eu
hook_in=$1
plugin=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# The stub: each call appends its arguments to calls, exits with the next
# code of codes (0 when none is left).
cat > "$dir/rollbackctl" <<EOS
#!/bin/sh
echo "\$*" >> "$dir/calls"
code=\$(head -n 1 "$dir/codes" 2>/dev/null)
sed -i 1d "$dir/codes" 2>/dev/null
exit \${code:-0}
EOS
chmod +x "$dir/rollbackctl"
sed "s|^set -- [^ ]*/rollbackctl |set -- $dir/rollbackctl |" "$hook_in" > "$dir/hook"
grep -q "^set -- $dir/rollbackctl " "$dir/hook" || fail "the hook does not call rollbackctl as expected"
# Run under a process named apt-get: the hook takes one snapshot per apt
# process, and marks it done in /run/rollback, removed here again.
printf '#!/bin/sh\nsh "%s"\nrc=$?\nrm -f /run/rollback/apt-$$-*\nexit $rc\n' "$dir/hook" > "$dir/apt-get"
chmod +x "$dir/apt-get"

mkdeb() {
        mkdir -p "$dir/pkg/DEBIAN"
        printf 'Package: %s\nVersion: 1\nArchitecture: all\nMaintainer: t <t@localhost>\nInstalled-Size: %s\nDescription: t\n' \
                "$1" "$2" > "$dir/pkg/DEBIAN/control"
        dpkg-deb --root-owner-group --build "$dir/pkg" "$dir/$1.deb" > /dev/null
        rm -rf "$dir/pkg"
}
mkdeb libfoo 10240
mkdeb foo-data 5120
# A leading zero would be octal to the shell (08: an error that stops apt).
mkdeb foo-doc 0512
: > "$dir/apt.conf"
export APT_CONFIG="$dir/apt.conf"

# run_hook CODES...: the hook on the two .debs, rollbackctl exiting CODES.
run_hook() {
        rm -f "$dir/calls"
        printf '%s\n' "$@" > "$dir/codes"
        printf '%s\n' "$dir/libfoo.deb" "$dir/foo-data.deb" "$dir/foo-doc.deb" | "$dir/apt-get" 2> "$dir/err"
}

run_hook 0 || fail "the hook failed: $(cat "$dir/err")"
grep -q -- "--upgrade .*--expect-writes 15872K$" "$dir/calls" || fail "no --expect-writes 15872K: $(cat "$dir/calls")"
[ "$(wc -l < "$dir/calls")" = 1 ] || fail "more than one snapshot: $(cat "$dir/calls")"
echo "15.5 MiB of packages: $(cat "$dir/calls")"

run_hook 5 0 || fail "the hook failed when the pool could not hold the packages: $(cat "$dir/err")"
grep -q "the pool cannot hold what this upgrade will write (15 MiB of packages)" "$dir/err" ||
        fail "no word that the pool cannot hold it: $(cat "$dir/err")"
[ "$(sed -n 2p "$dir/calls" | grep -c -- --expect-writes)" = 0 ] || fail "the second try still expects writes"
[ "$(wc -l < "$dir/calls")" = 2 ] || fail "no snapshot of the usual size: $(cat "$dir/calls")"
echo "pool too small: $(tr '\n' ' ' < "$dir/err")"

echo 'Rollback::Require "true";' > "$dir/apt.conf"
run_hook 5 && fail "with Rollback::Require the hook let the upgrade go on"
[ "$(wc -l < "$dir/calls")" = 1 ] || fail "with Rollback::Require it still took a snapshot: $(cat "$dir/calls")"
run_hook 3 && fail "with Rollback::Require a failed snapshot let the upgrade go on"
: > "$dir/apt.conf"
ROLLBACK_APT_REQUIRE=1 run_hook 3 && fail "with ROLLBACK_APT_REQUIRE=1 a failed snapshot let the upgrade go on"
run_hook 3 || fail "a failed snapshot stopped the upgrade without Require"
echo "Rollback::Require and ROLLBACK_APT_REQUIRE=1 stop the upgrade"

# No .deb (a removal): a snapshot of the usual size.
rm -f "$dir/calls"
: | "$dir/apt-get" 2> "$dir/err" || fail "the hook failed on a removal"
grep -q -- --expect-writes "$dir/calls" && fail "a removal expected writes"

# dnf4: a stand-in dnf module and transaction, rollbackctl on PATH.
mkdir -p "$dir/py/dnf"
echo 'class Plugin:
    def __init__(self, base=None, cli=None):
        self.base = base' > "$dir/py/dnf/__init__.py"
cp "$plugin" "$dir/py/rollback_dnf4.py"
rm -f "$dir/calls"
printf '5\n0\n' > "$dir/codes"
PATH="$dir:$PATH" PYTHONPATH="$dir/py" python3 - > "$dir/out" 2>&1 <<'EOP' || fail "the dnf4 plugin failed: $(cat "$dir/out")"
import types
import rollback_dnf4
pkg = lambda size: types.SimpleNamespace(installsize=size)
base = types.SimpleNamespace(transaction=types.SimpleNamespace(install_set=[pkg(10 << 20), pkg(5 << 20)]))
rollback_dnf4.Rollback(base).pre_transaction()
EOP
grep -q -- "--expect-writes 15728640$" "$dir/calls" || fail "dnf4: no --expect-writes 15728640: $(cat "$dir/calls")"
grep -q "(15 MiB of packages)" "$dir/out" || fail "dnf4: no word that the pool cannot hold it: $(cat "$dir/out")"
[ "$(wc -l < "$dir/calls")" = 2 ] || fail "dnf4: no snapshot of the usual size"
echo "dnf4: $(tr '\n' ' ' < "$dir/calls")"
echo "PASS"
