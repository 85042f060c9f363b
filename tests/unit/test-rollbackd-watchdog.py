#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""rollbackd has a watchdog: its unit sets WatchdogSec=, and under a watchdog
(WATCHDOG_USEC, as systemd gives it) it sends READY=1 and then WATCHDOG=1 from
its loop, several times per period.  The daemon runs on a private bus, as an
unprivileged user when we are root, so it can touch no device."""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 77
unit, rollbackd = sys.argv[1], sys.argv[2]

text = open(unit).read()
m = re.search(r"^WatchdogSec=(\d+)", text, re.M)
if not m or int(m.group(1)) <= 0:
    sys.exit("FAIL: %s sets no WatchdogSec=" % unit)
if not re.search(r"^Type=notify", text, re.M):
    sys.exit("FAIL: %s is not Type=notify: the watchdog pings would be ignored" % unit)

dbus = shutil.which("dbus-daemon")
if not dbus:
    print("dbus-daemon missing")
    sys.exit(SKIP)

tmp = tempfile.mkdtemp(prefix="rb-watchdog-")
os.chmod(tmp, 0o755)
if os.getuid() == 0:
    os.chown(tmp, 65534, 65534)
bus_path = os.path.join(tmp, "bus")
conf = os.path.join(tmp, "bus.conf")
with open(conf, "w") as f:
    f.write("""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
""" % bus_path)

def drop():
    # Root on the host: the daemon must not look at its block devices.
    if os.getuid() == 0:
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)

notify_path = os.path.join(tmp, "notify")
notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
notify.bind(notify_path)
os.chmod(notify_path, 0o777)
notify.settimeout(0.2)

bus = subprocess.Popen([dbus, "--config-file=" + conf, "--nofork", "--nopidfile"], preexec_fn=drop)
daemon = None
try:
    for _ in range(50):
        if os.path.exists(bus_path):
            break
        time.sleep(0.1)
    else:
        sys.exit("FAIL: dbus-daemon did not start")
    period_usec = 600000
    # WATCHDOG_PID names the daemon itself: the shell's pid, which exec keeps.
    env = dict(os.environ, NOTIFY_SOCKET=notify_path, WATCHDOG_USEC=str(period_usec),
               DBUS_SYSTEM_BUS_ADDRESS="unix:path=" + bus_path)
    err = open(os.path.join(tmp, "rollbackd.err"), "w")
    daemon = subprocess.Popen(["/bin/sh", "-c", 'WATCHDOG_PID=$$ exec "$0" --interval 3600', rollbackd],
                              env=env, preexec_fn=drop, stdout=err, stderr=err)
    ready, pings, end = None, 0, time.monotonic() + 5
    while time.monotonic() < end:
        try:
            msg = notify.recv(4096).decode()
        except socket.timeout:
            continue
        lines = msg.split("\n")
        if "READY=1" in lines and ready is None:
            ready = time.monotonic()
        if "WATCHDOG=1" in lines:
            pings += 1
    if ready is None:
        sys.exit("FAIL: rollbackd never said READY=1: %s" % open(err.name).read())
    # 5 s at a period of 0.6 s: a ping at least every half period, minus start-up.
    if pings < 5:
        sys.exit("FAIL: %d WATCHDOG=1 in 5 s under WatchdogSec=0.6s" % pings)
    if daemon.poll() is not None:
        sys.exit("FAIL: rollbackd exited %d: %s" % (daemon.returncode, open(err.name).read()))
    print("rollbackd: READY=1, then %d WATCHDOG=1 in 5 s" % pings)
finally:
    for p in (daemon, bus):
        if p and p.poll() is None:
            p.terminate()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
    shutil.rmtree(tmp, ignore_errors=True)
