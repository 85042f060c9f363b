/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Test-only: with ROLLBACK_CRASH_AT=NAME in the environment, the process
 * kills itself at the crash point NAME, as a kill -9 or a power cut at that
 * moment would.  The tests use it to check that every step of an operation
 * leaves a state the next command or boot recovers from (docs/states.md).
 */
void rb_crash_point(const char *name);
