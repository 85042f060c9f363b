/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* rollbackd's D-Bus names; the interface is documented in docs/dbus.md. */

#include <systemd/sd-bus.h>

#define RB_BUS_NAME "org.rollback1"
/* Calls that copy /boot (CreateSnapshot, Revert) may take minutes on a slow disk. */
#define RB_BUS_LONG_CALL_USEC (10 * 60 * 1000000ULL)
#define RB_BUS_PATH "/org/rollback1"
#define RB_BUS_INTERFACE "org.rollback1.Manager"

/* Connects to the system bus and checks that rollbackd answers (activating it). */
int rb_bus_open_daemon(sd_bus **ret);
