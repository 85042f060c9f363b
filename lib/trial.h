/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

#include "pool.h"

/*
 * Boot assessment (docs/boot-assessment.md).  An upgrade snapshot opens a
 * trial of its volume; each boot after it is counted before root is
 * mounted, and one that reaches boot-complete.target marks it good, ending
 * the trial.  When auto_revert_after boots in a row were not marked good,
 * the next one reverts to the trial's snapshot.
 */
enum trial_verdict {
        TRIAL_NONE,             /* no trial open: nothing counted */
        TRIAL_COUNTED,          /* a trial boot, counted */
        TRIAL_REVERT,           /* the trial failed: this boot reverts */
        _TRIAL_VERDICT_MAX,
        _TRIAL_VERDICT_INVALID = -EINVAL,
};
const char *trial_verdict_to_string(enum trial_verdict v);
enum trial_verdict trial_verdict_from_string(const char *s);

/* After an upgrade snapshot of v: the boots from now on are on trial (none with auto_revert_after=0). */
int rb_trial_open(struct pool *p, struct volume *v, const char *snapshot);

/*
 * A boot of v, before root is mounted: counts it when a trial is open, in
 * memory (the caller commits).  A trial whose snapshot can no longer be
 * reverted to ends here.
 */
enum trial_verdict rb_trial_count(struct pool *p, struct volume *v);

/* The running boot is good: ends the trial of volume and commits; 1 and the snapshot when one was open. */
int rb_trial_mark_good(struct pool *p, const char *volume, char **ret_snapshot);
