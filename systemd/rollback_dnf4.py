# SPDX-License-Identifier: GPL-2.0-or-later
# dnf4 plugin (/usr/lib/python3/site-packages/dnf-plugins/): a rollback
# snapshot of the root volume before each transaction, its COW sized for
# what the transaction installs (the packages' installed size).
import subprocess
import sys

import dnf

NO_SPACE = 5  # rollbackctl's exit status: the pool cannot hold it


class Rollback(dnf.Plugin):
    name = "rollback"

    def pre_transaction(self):
        cmd = ["rollbackctl", "snapshot", "--upgrade", "--description", "dnf transaction"]
        expected = sum(pkg.installsize or 0 for pkg in self.base.transaction.install_set)
        if expected > 0:
            rc = subprocess.call(cmd + ["--expect-writes", str(expected)], stdout=subprocess.DEVNULL)
            if rc == 0:
                return
            if rc == NO_SPACE:
                print("rollback: the pool cannot hold what this transaction will write "
                      "(%d MiB of packages); taking a snapshot of the usual size" % (expected >> 20),
                      file=sys.stderr)
        if subprocess.call(cmd, stdout=subprocess.DEVNULL) != 0:
            print("rollback: no snapshot was taken before this transaction", file=sys.stderr)
