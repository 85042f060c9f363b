/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Test-only: with ROLLBACK_CRASH_AT=NAME in the environment, the process
 * kills itself at the crash point NAME, as a kill -9 or a power cut at that
 * moment would.  With ROLLBACK_CUT_AT=NAME it prints "CUT-HERE at NAME" on
 * stderr instead and waits for ever, syncing nothing, for the test's host to
 * cut the power there (tests/userspace/power-cut-host).  The tests use them to
 * check that every step of an operation leaves a state the next command or
 * boot recovers from (docs/states.md).
 */
void rb_crash_point(const char *name);
