/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Called while long work goes on (between the blocks a /boot copy reads and
 * writes, while a program run by rb_run() has not ended): a daemon under a
 * watchdog pings it from there, so that slow work is not taken for a hang
 * and killed half-way.  NULL calls nothing.
 */
void rb_set_keepalive(void (*keepalive)(void));
void rb_keepalive(void);
