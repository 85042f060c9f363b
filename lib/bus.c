/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "bus.h"
#include "macro.h"

int rb_bus_open_daemon(sd_bus **ret) {
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        int r;

        r = sd_bus_open_system(&bus);
        if (r < 0)
                return r;
        /* A snapshot freezes the filesystem and waits for udev: allow it time. */
        (void) sd_bus_set_method_call_timeout(bus, 300 * 1000000ULL);
        r = sd_bus_call_method(bus, RB_BUS_NAME, RB_BUS_PATH, "org.freedesktop.DBus.Peer", "Ping",
                               &error, NULL, "");
        if (r < 0)
                return r;
        *ret = TAKE_PTR(bus);
        return 0;
}
