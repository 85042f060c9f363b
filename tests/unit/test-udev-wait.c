/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * rbdm_udev_wait() gives up on a udev that never answers: -ETIMEDOUT after
 * RBDM_UDEV_TIMEOUT_SEC, never a wait without end, and no semaphore left
 * behind: the cookie is completed and collected.  libdevmapper's
 * dm_udev_wait_immediate() and usleep() are replaced here (the program's own
 * definitions win over the shared libraries'), so no udev and no real time
 * are involved.
 */
#include <errno.h>
#include <stdbool.h>
#include <libdevmapper.h>
#include <stdint.h>
#include <unistd.h>

#include "dm.h"
#include "test.h"

static enum { NEVER, AFTER_3, BROKEN } udev;
static unsigned calls, completed;
static bool collected;
static uint64_t slept_usec;

int dm_udev_wait_immediate(uint32_t cookie, int *ready) {
        CHECK(cookie == 42);
        calls++;
        if (completed) {
                /* The count at zero: libdevmapper destroys the semaphore. */
                *ready = 1;
                collected = true;
                return 1;
        }
        switch (udev) {
        case NEVER:
                *ready = 0;
                return 1;
        case AFTER_3:
                *ready = calls >= 3;
                return 1;
        default:
                return 0;
        }
}

int dm_udev_complete(uint32_t cookie) {
        CHECK(cookie == 42);
        completed++;
        return 1;
}

int usleep(useconds_t usec) {
        slept_usec += usec;
        return 0;
}

static void reset(int what) {
        udev = what;
        calls = 0;
        completed = 0;
        collected = false;
        slept_usec = 0;
}

int main(void) {
        /* A udev that never says ready: given up on after the timeout, not before. */
        reset(NEVER);
        CHECK(rbdm_udev_wait(42) == -ETIMEDOUT);
        CHECK(slept_usec >= (uint64_t) (RBDM_UDEV_TIMEOUT_SEC - 1) * 1000000);
        CHECK(slept_usec <= (uint64_t) (RBDM_UDEV_TIMEOUT_SEC + 1) * 1000000);
        CHECK(completed == 1 && collected);

        /* Ready on the third look: no more waiting than that. */
        reset(AFTER_3);
        CHECK(rbdm_udev_wait(42) == 0);
        CHECK(calls == 3);
        CHECK(slept_usec < 1000000);
        CHECK(completed == 0);

        /* The semaphore gone: an error at once. */
        reset(BROKEN);
        CHECK(rbdm_udev_wait(42) == -EIO);
        CHECK(calls == 1);
        return 0;
}
