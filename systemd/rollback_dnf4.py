# SPDX-License-Identifier: GPL-2.0-or-later
# dnf4 plugin (/usr/lib/python3/site-packages/dnf-plugins/): a rollback
# snapshot of the root volume before each transaction.
import subprocess

import dnf


class Rollback(dnf.Plugin):
    name = "rollback"

    def pre_transaction(self):
        cmd = ["rollbackctl", "snapshot", "--upgrade", "--description", "dnf transaction"]
        if subprocess.call(cmd, stdout=subprocess.DEVNULL) != 0:
            print("rollback: no snapshot was taken before this transaction")
