// SPDX-License-Identifier: GPL-2.0
/*
 * dm-rollback: rollback-merge, which copies a snapshot back into its origin.
 *
 * It replaces the origin's table and merges while the device stays in
 * use; the other snapshots get the old origin data first, as for any
 * origin write.  Unlike upstream, it merges a batch of exceptions at a
 * time (any chunks, not only consecutive ones) with several copies in
 * flight and one metadata write per batch.
 */

#include "dm-rollback.h"

#include <linux/blkdev.h>
#include <linux/delay.h>
#include <linux/dm-kcopyd.h>
#include <linux/ktime.h>
#include <linux/module.h>
#include <linux/slab.h>

#define DM_MSG_PREFIX "rollback"

/* The longest pause between two looks at the other snapshots' copies. */
#define DMRB_MERGE_WAIT_MAX_US	20000UL

/*
 * A merge keeps at most merge_window copies in flight, and one while the
 * device is busy (see merge_busy()): a request of its own then waits
 * behind one copy at most, and the merge still moves on under steady load.
 */
static unsigned int merge_window = 16;
module_param(merge_window, uint, 0644);
MODULE_PARM_DESC(merge_window, "Copies of a merge in flight at once while its device is idle");

static unsigned int merge_quiet_us = 2000;
module_param(merge_quiet_us, uint, 0644);
MODULE_PARM_DESC(merge_quiet_us, "A merge's device is busy this long after its last bio (0: never)");

static bool chunk_in_batch(struct dmrb_merge *m, dmrb_chunk_t chunk)
{
	unsigned int i;

	for (i = 0; i < m->batch_n; i++)
		if (m->batch[i].old_chunk == chunk)
			return true;
	return false;
}

/*
 * Where a bio to the merging device goes: a chunk being merged right now
 * waits for the merge of its batch; a chunk not merged yet lives in the
 * COW; everything else (and all I/O once the snapshot is invalid) is the
 * origin, whose writes first copy into the other snapshots.
 */
static int merge_map_bio(struct dmrb_merge *m, struct bio *bio)
{
	struct dmrb_snapshot *s = m->snap;
	struct dmrb_tracked *t = dm_per_bio_data(bio, sizeof(*t));
	sector_t offset = dm_target_offset(s->ti, bio->bi_iter.bi_sector);
	dmrb_chunk_t chunk = offset >> s->store.chunk_shift;
	struct dmrb_exception *e;
	int r = DM_MAPIO_REMAPPED;

	mutex_lock(&s->lock);
	e = s->valid ? dmrb_table_lookup(&s->complete, chunk) : NULL;
	if (e && chunk_in_batch(m, chunk)) {
		/*
		 * The COW copy stays as it is until the merge is committed and
		 * is never reused: reads need not wait, writes must.
		 */
		if (bio_data_dir(bio) == READ) {
			dmrb_remap_to_cow(s, bio, e->new_chunk);
			mutex_unlock(&s->lock);
			return DM_MAPIO_REMAPPED;
		}
		/* Waiting for the batch, it must not make the batch go slower. */
		atomic_dec(&m->foreground);
		bio_list_add(&m->waiting, bio);
		mutex_unlock(&s->lock);
		return DM_MAPIO_SUBMITTED;
	}
	if (e) {
		/* Tracked under the lock, so a batch taking the chunk waits for it. */
		dmrb_track_read(s, t, chunk);
		dmrb_remap_to_cow(s, bio, e->new_chunk);
		mutex_unlock(&s->lock);
		return DM_MAPIO_REMAPPED;
	}
	mutex_unlock(&s->lock);

	bio_set_dev(bio, s->origin_dev->bdev);
	bio->bi_iter.bi_sector = offset;
	if (bio_data_dir(bio) == WRITE && bio_sectors(bio)) {
		down_read(&dmrb_origins_lock);
		r = dmrb_origin_write(s->origin, offset, bio_sectors(bio), bio);
		up_read(&dmrb_origins_lock);
	}
	return r;
}

static int merge_map(struct dm_target *ti, struct bio *bio)
{
	struct dmrb_snapshot *s = ti->private;
	struct dmrb_tracked *t = dm_per_bio_data(bio, sizeof(*t));

	INIT_HLIST_NODE(&t->node);
	atomic_inc(&s->merge->foreground);
	WRITE_ONCE(s->merge->foreground_ns, ktime_get_ns());
	if (bio->bi_opf & REQ_PREFLUSH) {
		/* One flush for each device that holds data of this device. */
		bio_set_dev(bio, dm_bio_get_target_bio_nr(bio) ?
			    s->cow_dev->bdev : s->origin_dev->bdev);
		return DM_MAPIO_REMAPPED;
	}
	return merge_map_bio(s->merge, bio);
}

static int merge_end_io(struct dm_target *ti, struct bio *bio,
			blk_status_t *error)
{
	struct dmrb_merge *m = ((struct dmrb_snapshot *)ti->private)->merge;

	WRITE_ONCE(m->foreground_ns, ktime_get_ns());
	atomic_dec(&m->foreground);
	return dmrb_snapshot_end_io(ti, bio, error);
}

/* True once every other snapshot has its own copy of the origin range. */
static bool others_have_copied(struct dmrb_snapshot *s, sector_t sector,
			       sector_t count)
{
	struct dmrb_snapshot *t;
	bool done = true;

	list_for_each_entry(t, &s->origin->snapshots, origin_list) {
		dmrb_chunk_t chunk = sector >> t->store.chunk_shift;
		dmrb_chunk_t last = (sector + count - 1) >> t->store.chunk_shift;

		if (t == s || t->merge || t->handed_over)
			continue;
		mutex_lock(&t->lock);
		for (; chunk <= last && t->valid && t->active && done; chunk++)
			if (!dmrb_table_lookup(&t->complete, chunk))
				done = false;
		mutex_unlock(&t->lock);
		if (!done)
			break;
	}
	return done;
}

/*
 * Waits until every other snapshot has its own copy of chunk, taking the
 * origin registry only to look.  Held for the whole wait, a ctr or dtr
 * queued for writing would hold up every reader behind it, among them the
 * origin writes that the copies waited for send again.  A snapshot that
 * became active meanwhile gets its copy started here.
 */
static void wait_for_others(struct dmrb_snapshot *s, dmrb_chunk_t chunk)
{
	sector_t sector = chunk << s->store.chunk_shift;
	unsigned long delay_us = 100;
	bool done;

	for (;;) {
		down_read(&dmrb_origins_lock);
		done = others_have_copied(s, sector, s->store.chunk_sectors);
		if (!done)
			dmrb_origin_write(s->origin, sector, s->store.chunk_sectors, NULL);
		up_read(&dmrb_origins_lock);
		if (done)
			return;
		/* A copy takes a moment; a full COW may take its whole timeout. */
		usleep_range(delay_us, 2 * delay_us);
		delay_us = min(2 * delay_us, DMRB_MERGE_WAIT_MAX_US);
	}
}

static void merge_copy_done(int read_err, unsigned long write_err, void *context)
{
	struct dmrb_merge *m = context;

	if (read_err || write_err)
		m->copy_error = -EIO;
	if (atomic_dec_and_test(&m->copies))
		complete(&m->copied);
	else
		wake_up(&m->copy_end);
}

/*
 * Whether the merging device has I/O of its own in flight, or had within
 * merge_quiet_us.  In flight counts too: a request slower than that,
 * behind the merge's own, must not look like a pause.
 */
static bool merge_busy(struct dmrb_merge *m, u64 now)
{
	s64 quiet = (s64)READ_ONCE(merge_quiet_us) * NSEC_PER_USEC;

	return quiet && (atomic_read(&m->foreground) ||
			 (s64)(now - READ_ONCE(m->foreground_ns)) < quiet);
}

/* Waits until another copy may start: see merge_window. */
static void merge_wait_for_window(struct dmrb_merge *m)
{
	for (;;) {
		unsigned int in_flight = atomic_read(&m->copies) - 1;
		unsigned int window = merge_busy(m, ktime_get_ns()) ? 1 :
				      max(READ_ONCE(merge_window), 1U);

		if (in_flight < window)
			return;
		/* Looks again at least once a tick: the device may turn busy or idle. */
		wait_event_timeout(m->copy_end, atomic_read(&m->copies) - 1 < in_flight, 1);
	}
}

/*
 * Copies the batch from the COW into the origin, all copies in flight at
 * once; a run of chunks consecutive on both devices is one copy.  The
 * batch lists the last exception first, so a run counts down.
 */
static int merge_copy_batch(struct dmrb_merge *m, unsigned int n)
{
	struct dmrb_snapshot *s = m->snap;
	sector_t dev_size = bdev_nr_sectors(s->origin_dev->bdev);
	struct dmrb_merge_entry *b = m->batch;
	unsigned int i, run;

	m->copy_error = 0;
	init_completion(&m->copied);
	atomic_set(&m->copies, 1);
	for (i = 0; i < n; i += run) {
		struct dm_io_region src, dest;
		/* kcopyd splits a long run into sub-jobs in flight together. */
		unsigned int max_run = merge_busy(m, ktime_get_ns()) ? 1 : n;

		run = 1;
		if (b[i].old_chunk == ~0ULL)
			continue;
		while (i + run < n && run < max_run && b[i + run].old_chunk != ~0ULL &&
		       b[i + run].old_chunk + run == b[i].old_chunk &&
		       b[i + run].new_chunk + run == b[i].new_chunk)
			run++;

		dest.bdev = s->origin_dev->bdev;
		dest.sector = b[i + run - 1].old_chunk << s->store.chunk_shift;
		if (dest.sector >= dev_size)
			continue;
		dest.count = min_t(sector_t, (sector_t)run << s->store.chunk_shift,
				   dev_size - dest.sector);
		src.bdev = s->cow_dev->bdev;
		src.sector = b[i + run - 1].new_chunk << s->store.chunk_shift;
		src.count = dest.count;
		merge_wait_for_window(m);
		atomic_inc(&m->copies);
		dm_kcopyd_copy(m->kc, &src, 1, &dest, 0, merge_copy_done, m);
	}
	merge_copy_done(0, 0, m);
	wait_for_completion(&m->copied);
	return m->copy_error;
}

/*
 * Paces the merge at throttle_kbs: a batch starts no sooner than the last
 * one's size at that rate after the last one began.  The pace outlives a
 * suspend, a new rate applies to the wait under way, and a stop ends it:
 * a slow rate holds up neither a suspend nor a removal.
 */
static void merge_throttle(struct dmrb_merge *m)
{
	for (;;) {
		unsigned int rate = READ_ONCE(m->throttle_kbs);
		u64 due, now = ktime_get_ns();

		if (!rate || READ_ONCE(m->stop))
			return;
		due = m->last_start_ns + div_u64(m->last_kib * NSEC_PER_SEC, rate);
		if (due <= now)
			return;
		wait_event_timeout(m->wait,
				   READ_ONCE(m->stop) || READ_ONCE(m->throttle_kbs) != rate,
				   nsecs_to_jiffies(due - now));
	}
}

static void merge_stopped(struct dmrb_merge *m, enum dmrb_merge_state state)
{
	struct dmrb_snapshot *s = m->snap;

	mutex_lock(&s->lock);
	m->state = state;
	m->running = false;
	mutex_unlock(&s->lock);
	wake_up_all(&m->wait);
}

/*
 * One batch per round: take the last exceptions of the store, wait for the
 * I/O to them, give the other snapshots the origin data about to be
 * overwritten, copy, flush the origin, then drop the entries from the COW
 * with one metadata write.  A crash anywhere leaves entries that are
 * merged again, which is harmless.
 */
static void merge_work_fn(struct work_struct *work)
{
	struct dmrb_merge *m = container_of(work, struct dmrb_merge, work);
	struct dmrb_snapshot *s = m->snap;

	for (;;) {
		sector_t dev_size = bdev_nr_sectors(s->origin_dev->bdev);
		dmrb_chunk_t end_chunk = (dev_size + s->store.chunk_sectors - 1) >> s->store.chunk_shift;
		struct bio_list waiting;
		struct bio *bio;
		unsigned int i, beyond = 0;
		u64 start;
		int n, r;

		merge_throttle(m);
		start = ktime_get_ns();
		if (READ_ONCE(m->stop) || !READ_ONCE(s->valid)) {
			merge_stopped(m, DMRB_MERGE_STOPPED);
			return;
		}
		/*
		 * Only this worker uses the store of a merge; map uses the
		 * table.  A write to a chunk of the batch waits for all of it:
		 * while the device is busy, a batch is as small as the window.
		 */
		n = s->store.ops->prepare_merge(&s->store, m->batch,
						merge_busy(m, start) ?
						clamp(READ_ONCE(merge_window), 1U, DMRB_MERGE_BATCH) :
						DMRB_MERGE_BATCH);
		if (n <= 0) {
			if (n < 0)
				DMERR("%s: merge failed: cannot read COW metadata", s->cow_dev->name);
			merge_stopped(m, n < 0 ? DMRB_MERGE_FAILED : DMRB_MERGE_STOPPED);
			return;
		}
		mutex_lock(&s->lock);
		/*
		 * Entries superseded by a later one for the same chunk only
		 * need removing; the table says which copy is current.
		 */
		for (i = 0; i < n; i++) {
			struct dmrb_exception *e = dmrb_table_lookup(&s->complete, m->batch[i].old_chunk);

			if (!e || e->new_chunk != m->batch[i].new_chunk) {
				m->batch[i].old_chunk = ~0ULL;
			} else if (m->batch[i].old_chunk >= end_chunk) {
				/*
				 * The origin shrank since: there is nothing to
				 * merge into, and copying the other snapshots'
				 * share would read past the end and invalidate
				 * them.
				 */
				hlist_del(&e->hash);
				kmem_cache_free(dmrb_exception_cache, e);
				s->exception_count--;
				m->batch[i].old_chunk = ~0ULL;
				beyond++;
			}
		}
		m->batch_n = n;
		mutex_unlock(&s->lock);
		if (beyond)
			DMWARN("%s: %u exceptions beyond the end of the origin dropped",
			       s->cow_dev->name, beyond);

		for (i = 0; i < n; i++)
			if (m->batch[i].old_chunk != ~0ULL)
				dmrb_wait_for_tracked_reads(s, m->batch[i].old_chunk);

		down_read(&dmrb_origins_lock);
		for (i = 0; i < n; i++) {
			sector_t sector = m->batch[i].old_chunk << s->store.chunk_shift;

			if (m->batch[i].old_chunk != ~0ULL)
				dmrb_origin_write(s->origin, sector, s->store.chunk_sectors, NULL);
		}
		up_read(&dmrb_origins_lock);
		for (i = 0; i < n; i++)
			if (m->batch[i].old_chunk != ~0ULL)
				wait_for_others(s, m->batch[i].old_chunk);

		r = merge_copy_batch(m, n);
		if (!r)
			r = blkdev_issue_flush(s->origin_dev->bdev);
		if (!r)
			r = s->store.ops->commit_merge(&s->store, n);

		mutex_lock(&s->lock);
		if (!r) {
			for (i = 0; i < n; i++) {
				struct dmrb_exception *e;

				if (m->batch[i].old_chunk == ~0ULL)
					continue;
				e = dmrb_table_lookup(&s->complete, m->batch[i].old_chunk);
				hlist_del(&e->hash);
				kmem_cache_free(dmrb_exception_cache, e);
				s->exception_count--;
			}
		}
		m->batch_n = 0;
		waiting = m->waiting;
		bio_list_init(&m->waiting);
		mutex_unlock(&s->lock);

		while ((bio = bio_list_pop(&waiting))) {
			atomic_inc(&m->foreground);
			if (merge_map_bio(m, bio) == DM_MAPIO_REMAPPED)
				submit_bio_noacct(bio);
		}

		if (r) {
			DMERR("%s: merge failed: %d", s->cow_dev->name, r);
			merge_stopped(m, DMRB_MERGE_FAILED);
			return;
		}
		m->last_start_ns = start;
		m->last_kib = ((u64)n * s->store.chunk_sectors) >> 1;
		cond_resched();
	}
}

static void merge_start(struct dmrb_merge *m)
{
	struct dmrb_snapshot *s = m->snap;

	mutex_lock(&s->lock);
	m->stop = false;
	if (!m->running && m->state != DMRB_MERGE_FAILED && s->valid) {
		m->running = true;
		m->state = DMRB_MERGE_RUNNING;
		queue_work(dmrb_wq, &m->work);
	}
	mutex_unlock(&s->lock);
}

/*
 * Stops after the batch in flight is committed.  The worker touches s after
 * it clears running (the wake-up): flush it before s can be freed.
 */
static void merge_stop(struct dmrb_merge *m)
{
	struct dmrb_snapshot *s = m->snap;

	mutex_lock(&s->lock);
	m->stop = true;
	mutex_unlock(&s->lock);
	wake_up_all(&m->wait);
	wait_event(m->wait, !READ_ONCE(m->running));
	flush_work(&m->work);
}

/*
 * Construct a merge, in place of the origin's table:
 *   rollback-merge <origin_dev> <cow_dev> P <chunk_sectors>
 *                  [<#feature args> [<feature arg>]*]
 *
 * As rollback-snap, features included (a merge takes no new exceptions, so
 * they only come back in the table; the other snapshots of the origin
 * apply their own).  If a rollback-snap uses cow_dev, the merge takes its
 * COW over when it resumes; that snapshot must be suspended then, and
 * fails its I/O from then on.
 */
static int merge_ctr(struct dm_target *ti, unsigned int argc, char **argv)
{
	struct dmrb_snapshot *src;
	struct dmrb_merge *m;
	char *error = NULL;
	int r;

	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!m) {
		ti->error = "Cannot allocate merge context";
		return -ENOMEM;
	}
	init_waitqueue_head(&m->wait);
	init_waitqueue_head(&m->copy_end);
	INIT_WORK(&m->work, merge_work_fn);
	bio_list_init(&m->waiting);
	m->kc = dm_kcopyd_client_create(NULL);
	if (IS_ERR(m->kc)) {
		r = PTR_ERR(m->kc);
		ti->error = "Cannot create kcopyd client";
		goto free_merge;
	}

	r = dmrb_snapshot_ctr(ti, argc, argv, m);
	if (r)
		goto destroy_kcopyd;
	m->snap = ti->private;

	down_read(&dmrb_origins_lock);
	src = m->handover_src;
	if (src) {
		mutex_lock(&src->lock);
		if (src->origin_dev->bdev != m->snap->origin_dev->bdev)
			error = "COW belongs to a snapshot of another origin";
		else if (!src->valid)
			error = "Cannot merge an invalid snapshot";
		mutex_unlock(&src->lock);
	}
	m->reread = !!src;
	up_read(&dmrb_origins_lock);
	if (error) {
		ti->error = error;
		r = -EINVAL;
		goto destroy_snapshot;
	}

	ti->num_flush_bios = 2;
	return 0;

destroy_snapshot:
	dmrb_snapshot_dtr(ti);
destroy_kcopyd:
	dm_kcopyd_client_destroy(m->kc);
free_merge:
	kfree(m);
	return r;
}

/* As an origin's: its other snapshots stop waiting for full COWs meanwhile. */
static void merge_set_suspending(struct dmrb_snapshot *s, bool suspending)
{
	s->merge->suspending = suspending;
	dmrb_origin_suspending(s->origin_dev->bdev->bd_dev, suspending);
}

static void merge_dtr(struct dm_target *ti)
{
	struct dmrb_snapshot *s = ti->private;
	struct dmrb_merge *m = s->merge;

	merge_stop(m);
	/* Removed while suspended: the other snapshots may wait again. */
	if (m->suspending)
		merge_set_suspending(s, false);
	dmrb_snapshot_dtr(ti);
	dm_kcopyd_client_destroy(m->kc);
	kfree(m);
}

/* The complete table of a COW read again, built aside. */
struct reread_table {
	struct dmrb_table table;
	u64 count;
};

static int reread_add(void *context, dmrb_chunk_t old_chunk, dmrb_chunk_t new_chunk)
{
	struct reread_table *t = context;
	int r = dmrb_table_record(&t->table, old_chunk, new_chunk);

	if (r < 0)
		return r;
	t->count += r;
	return 0;
}

/*
 * Reads the COW again into a new store and table and only then swaps them
 * in: a failure leaves what the ctr read, and the next resume tries again.
 */
static int merge_reread(struct dmrb_snapshot *s)
{
	struct dmrb_store store = s->store;
	struct reread_table t = {};
	char *error = NULL;
	int r;

	store.context = NULL;
	r = store.ops->create(&store);
	if (r) {
		DMERR("%s: handover: cannot create exception store", s->cow_dev->name);
		return r;
	}
	r = dmrb_table_init(&t.table, bdev_nr_sectors(s->cow_dev->bdev), store.chunk_shift);
	if (r) {
		DMERR("%s: handover: cannot allocate exception table", s->cow_dev->name);
		goto destroy_store;
	}

	r = store.ops->read_metadata(&store, reread_add, &t, &error);
	if (r > 0) {
		DMERR("%s: Cannot merge an invalid snapshot", s->cow_dev->name);
		r = -EINVAL;
	} else if (r) {
		DMERR("%s: handover: %s", s->cow_dev->name, error ?: "cannot read COW");
	} else if (store.chunk_sectors != s->store.chunk_sectors) {
		/* The table's I/O limits were set for the chunk size the ctr read. */
		DMERR("%s: handover: chunk size changed", s->cow_dev->name);
		r = -EINVAL;
	}
	if (r)
		goto destroy_table;

	mutex_lock(&s->lock);
	swap(s->store, store);
	swap(s->complete, t.table);
	s->exception_count = t.count;
	mutex_unlock(&s->lock);

	/* From here on, store and t hold what the ctr read. */
destroy_table:
	dmrb_table_destroy(&t.table, true);
destroy_store:
	store.ops->destroy(&store);
	return r;
}

/*
 * A merge loaded beside a live rollback-snap takes its COW over now: that
 * snapshot must be suspended, so that it commits nothing more, and valid.
 * Whether it is still there or not, what the ctr read may be stale.
 */
static int merge_preresume(struct dm_target *ti)
{
	struct dmrb_snapshot *s = ti->private, *src;
	struct dmrb_merge *m = s->merge;
	int r = 0;

	if (!m->reread)
		return 0;

	down_read(&dmrb_origins_lock);
	src = m->handover_src;
	if (src) {
		mutex_lock(&src->lock);
		if (!dm_suspended(src->ti)) {
			DMERR("%s: the snapshot handing over its COW must be suspended",
			      s->cow_dev->name);
			r = -EINVAL;
		} else if (!src->valid) {
			DMERR("%s: Cannot merge an invalid snapshot", s->cow_dev->name);
			r = -EINVAL;
		} else {
			src->handed_over = true;
		}
		mutex_unlock(&src->lock);
	}
	up_read(&dmrb_origins_lock);
	if (r)
		return r;

	r = merge_reread(s);

	/* src may have been removed meanwhile: only the registry knows. */
	down_read(&dmrb_origins_lock);
	if (src && m->handover_src == src) {
		mutex_lock(&src->lock);
		if (r)
			src->handed_over = false;
		else
			m->handover_src = NULL;
		mutex_unlock(&src->lock);
	}
	up_read(&dmrb_origins_lock);
	if (!r)
		m->reread = false;
	return r;
}

static void merge_resume(struct dm_target *ti)
{
	struct dmrb_snapshot *s = ti->private;

	/*
	 * Without a live snapshot to hand over there is nothing to refuse:
	 * the table stays, with all I/O going to the origin, as upstream.
	 */
	if (!READ_ONCE(s->valid))
		DMERR("%s: Cannot merge an invalid snapshot", s->cow_dev->name);
	merge_set_suspending(s, false);
	merge_start(s->merge);
}

/*
 * Before the merge stops: the other snapshots stop waiting for full COWs
 * to grow, or the batch in flight could wait for one (see may_wait() in
 * dm-rollback-core.c).
 */
static void merge_presuspend(struct dm_target *ti)
{
	struct dmrb_snapshot *s = ti->private;

	merge_set_suspending(s, true);
	merge_stop(s->merge);
}

/* A suspend given up after presuspend (interrupted, say): go on merging. */
static void merge_presuspend_undo(struct dm_target *ti)
{
	struct dmrb_snapshot *s = ti->private;

	merge_set_suspending(s, false);
	merge_start(s->merge);
}

static void merge_status(struct dm_target *ti, status_type_t type,
			 unsigned int status_flags, char *result,
			 unsigned int maxlen)
{
	static const char *const states[] = {
		[DMRB_MERGE_STOPPED] = "stopped",
		[DMRB_MERGE_RUNNING] = "running",
		[DMRB_MERGE_FAILED] = "failed",
	};
	struct dmrb_snapshot *s = ti->private;
	struct dmrb_merge *m = s->merge;
	sector_t total, allocated, metadata;
	unsigned int sz = 0;

	if (type != STATUSTYPE_INFO) {
		dmrb_snapshot_status(ti, type, status_flags, result, maxlen);
		return;
	}
	mutex_lock(&s->lock);
	if (!s->valid) {
		DMEMIT("Invalid");
	} else if (m->state == DMRB_MERGE_FAILED) {
		DMEMIT("Merge failed");
	} else {
		s->store.ops->usage(&s->store, &total, &allocated, &metadata);
		DMEMIT("%llu/%llu %llu %llu %s", (unsigned long long)allocated,
		       (unsigned long long)total, (unsigned long long)metadata,
		       (unsigned long long)s->exception_count, states[m->state]);
	}
	mutex_unlock(&s->lock);
}

static int merge_message(struct dm_target *ti, unsigned int argc, char **argv,
			 char *result, unsigned int maxlen)
{
	struct dmrb_snapshot *s = ti->private;
	struct dmrb_merge *m = s->merge;
	unsigned int rate;

	if (argc == 2 && !strcasecmp(argv[0], "merge_throttle")) {
		if (kstrtouint(argv[1], 10, &rate)) {
			DMERR("merge_throttle takes KiB/s, 0 for unlimited");
			return -EINVAL;
		}
		WRITE_ONCE(m->throttle_kbs, rate);
		wake_up_all(&m->wait);
		return 0;
	}
	DMERR("Unrecognised message '%s'", argc ? argv[0] : "");
	return -EINVAL;
}

struct target_type dmrb_merge_target = {
	.name = "rollback-merge",
	.version = {1, 6, 1},
	.module = THIS_MODULE,
	.ctr = merge_ctr,
	.dtr = merge_dtr,
	.map = merge_map,
	.end_io = merge_end_io,
	.preresume = merge_preresume,
	.resume = merge_resume,
	.presuspend = merge_presuspend,
	.presuspend_undo = merge_presuspend_undo,
	.status = merge_status,
	.message = merge_message,
	.iterate_devices = dmrb_snapshot_iterate_devices,
};
