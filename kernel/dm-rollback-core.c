// SPDX-License-Identifier: GPL-2.0
/*
 * dm-rollback: copy-on-write snapshots of a block device.
 *
 * rollback-origin sits on the device that is being snapshotted; a write to
 * it first copies the old data of the chunk into every snapshot that still
 * shares it.  rollback-snap shows the device as it was when the
 * snapshot became active.  The table grammar and the persistent COW format
 * are those of the upstream snapshot targets.  rollback-merge copies a
 * snapshot back into its origin (dm-rollback-merge.c).
 *
 * This file is what the targets share: the exception tables, the registry
 * of origins and their snapshots, invalidation, and the engines that copy
 * origin chunks into the COWs and commit them.  When an origin write hits
 * a chunk that several snapshots (of the same chunk size) still share, the
 * chunk is read once and written to all of their COW devices in one copy
 * job; their metadata is then committed together.
 */

#include "dm-rollback.h"

#include <linux/blkdev.h>
#include <linux/delay.h>
#include <linux/dm-kcopyd.h>
#include <linux/mempool.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/wait_bit.h>

#define DM_MSG_PREFIX "rollback"

#define DMRB_MIN_PENDING	256
#define DMRB_MAX_HASH_BITS	18

DECLARE_RWSEM(dmrb_origins_lock);
static LIST_HEAD(dmrb_origins);
struct kmem_cache *dmrb_exception_cache;
static struct kmem_cache *dmrb_pending_cache;
struct workqueue_struct *dmrb_wq;
/* Commits wait only for I/O, never for another work: a queue of their own. */
static struct workqueue_struct *dmrb_commit_wq;

/* Origin writes to send again once their copies are committed. */
static DEFINE_SPINLOCK(retry_lock);
static struct bio_list retry_bios = BIO_EMPTY_LIST;
static void retry_work_fn(struct work_struct *work);
static DECLARE_WORK(retry_work, retry_work_fn);
static void commit_work_fn(struct work_struct *work);

/*
 * For the tests: pending exceptions come only from the pools' reserves,
 * as when memory is short.
 */
static bool fail_pending_alloc;
module_param(fail_pending_alloc, bool, 0644);
MODULE_PARM_DESC(fail_pending_alloc, "Take pending exceptions only from the reserves (testing)");

/*
 * Copies in flight, per origin.  A burst of writeback would otherwise start
 * one per dirty chunk at once: kcopyd's worker then spends seconds
 * allocating their pages, and their pending exceptions wait for commits.
 * A write that would start one more waits in its map function, holding no
 * lock, as upstream's do; the retries, the merge and the commits, which
 * other writes wait on, never wait.  Per origin, so that one origin's
 * copies, or its COW device suspended, hold up no other origin.
 */
static unsigned int copy_limit = 2048;
module_param(copy_limit, uint, 0644);
MODULE_PARM_DESC(copy_limit, "Copies in flight per origin before new writes wait (0: no limit)");

static unsigned int copy_peak;
module_param(copy_peak, uint, 0644);
MODULE_PARM_DESC(copy_peak, "The most copies in flight of an origin so far (write 0 to reset)");

/* Counts the copies that ended with room left: what a waiter waits to see change. */
static atomic_t copies_ended = ATOMIC_INIT(0);
static DECLARE_WAIT_QUEUE_HEAD(copy_end_wait);

/*
 * Whether o may start another copy.  *seq is read first, so that a copy
 * ending after the check still ends dmrb_wait_for_copies(*seq).
 */
bool dmrb_copy_room(struct dmrb_origin *o, unsigned int *seq)
{
	unsigned int limit = READ_ONCE(copy_limit);

	*seq = atomic_read(&copies_ended);
	smp_rmb();	/* pairs with the full barrier of atomic_dec_return() */
	return !limit || atomic_read(&o->copies) < limit;
}

/* The waiter holds no lock: the origin may be gone when it wakes. */
void dmrb_wait_for_copies(unsigned int seq)
{
	io_wait_event(copy_end_wait, atomic_read(&copies_ended) != seq);
}

static void copy_started(struct dmrb_origin *o)
{
	unsigned int n = atomic_inc_return(&o->copies);
	unsigned int peak = READ_ONCE(copy_peak);

	while (n > peak) {
		unsigned int seen = cmpxchg(&copy_peak, peak, n);

		if (seen == peak)
			break;
		peak = seen;
	}
}

/*
 * Last in copy_done(): o outlives it, its kcopyd client waits for the
 * callback to return before the origin is freed.
 */
static void copy_ended(struct dmrb_origin *o)
{
	unsigned int limit = READ_ONCE(copy_limit);

	if (atomic_dec_return(&o->copies) >= limit && limit)
		return;
	atomic_inc(&copies_ended);
	if (wq_has_sleeper(&copy_end_wait))
		wake_up_all(&copy_end_wait);
}

static void *pending_pool_alloc(gfp_t gfp, void *cache)
{
	if (READ_ONCE(fail_pending_alloc))
		return NULL;
	return mempool_alloc_slab(gfp, cache);
}

/* ---- exception tables ---- */

int dmrb_table_init(struct dmrb_table *t, sector_t cow_sectors,
		      unsigned int chunk_shift)
{
	u64 chunks = max_t(u64, cow_sectors >> chunk_shift, 64);
	unsigned int bits = min_t(unsigned int, ilog2(roundup_pow_of_two(chunks)),
				  DMRB_MAX_HASH_BITS);
	u64 i, n = 1ULL << bits;

	t->buckets = kvmalloc_array(n, sizeof(*t->buckets), GFP_KERNEL);
	if (!t->buckets)
		return -ENOMEM;
	for (i = 0; i < n; i++)
		INIT_HLIST_HEAD(&t->buckets[i]);
	t->mask = n - 1;
	return 0;
}

void dmrb_table_insert(struct dmrb_table *t, struct dmrb_exception *e)
{
	hlist_add_head(&e->hash, &t->buckets[e->old_chunk & t->mask]);
}

struct dmrb_exception *dmrb_table_lookup(struct dmrb_table *t, dmrb_chunk_t chunk)
{
	struct dmrb_exception *e;

	hlist_for_each_entry(e, &t->buckets[chunk & t->mask], hash)
		if (e->old_chunk == chunk)
			return e;
	return NULL;
}

/* Frees the complete table's entries; pending ones belong to dmrb_pending. */
void dmrb_table_destroy(struct dmrb_table *t, bool free_entries)
{
	struct dmrb_exception *e;
	struct hlist_node *tmp;
	u64 i;

	if (!t->buckets)
		return;
	if (free_entries)
		for (i = 0; i <= t->mask; i++)
			hlist_for_each_entry_safe(e, tmp, &t->buckets[i], hash)
				kmem_cache_free(dmrb_exception_cache, e);
	kvfree(t->buckets);
	t->buckets = NULL;
}

/*
 * Records old_chunk -> new_chunk as read from a COW: a later entry for the
 * same chunk supersedes an earlier one.  Returns 1 for a new entry, 0 for a
 * superseded one.
 */
int dmrb_table_record(struct dmrb_table *t, dmrb_chunk_t old_chunk,
		      dmrb_chunk_t new_chunk)
{
	struct dmrb_exception *e;

	e = dmrb_table_lookup(t, old_chunk);
	if (e) {
		e->new_chunk = new_chunk;
		return 0;
	}
	e = kmem_cache_alloc(dmrb_exception_cache, GFP_KERNEL);
	if (!e)
		return -ENOMEM;
	e->old_chunk = old_chunk;
	e->new_chunk = new_chunk;
	dmrb_table_insert(t, e);
	return 1;
}

int dmrb_add_recorded_exception(void *context, dmrb_chunk_t old_chunk,
				  dmrb_chunk_t new_chunk)
{
	struct dmrb_snapshot *s = context;
	int r = dmrb_table_record(&s->complete, old_chunk, new_chunk);

	if (r < 0)
		return r;
	s->exception_count += r;
	return 0;
}

/* ---- origin registry ---- */

/* Called with dmrb_origins_lock held. */
struct dmrb_origin *dmrb_find_origin(dev_t dev)
{
	struct dmrb_origin *o;

	list_for_each_entry(o, &dmrb_origins, list)
		if (o->dev == dev)
			return o;
	return NULL;
}

static void update_min_chunk(struct dmrb_origin *o)
{
	struct dmrb_snapshot *s;
	unsigned int min_chunk = 0;

	list_for_each_entry(s, &o->snapshots, origin_list)
		if (!min_chunk || s->store.chunk_sectors < min_chunk)
			min_chunk = s->store.chunk_sectors;
	o->min_chunk = min_chunk;
}

int dmrb_register_snapshot(struct dmrb_snapshot *s)
{
	struct dmrb_origin *o, *fresh;
	struct dmrb_snapshot *other;

	fresh = kzalloc(sizeof(*fresh), GFP_KERNEL);
	if (!fresh) {
		s->ti->error = "Cannot allocate origin registry entry";
		return -ENOMEM;
	}

	down_write(&dmrb_origins_lock);
	list_for_each_entry(o, &dmrb_origins, list) {
		list_for_each_entry(other, &o->snapshots, origin_list) {
			char *busy = NULL;

			if (other->merge && s->merge &&
			    other->origin_dev->bdev == s->origin_dev->bdev)
				busy = "A merge is already running on this origin";
			else if (other->cow_dev->bdev != s->cow_dev->bdev)
				continue;
			/* Two tables may share a COW: a snapshot handing it over to a merge. */
			else if (!s->merge || other->merge || other->handed_over)
				busy = "COW device is already in use";
			else if (s->merge->handover_src)
				busy = "COW device is already in use by two tables";
			else
				s->merge->handover_src = other;
			if (busy) {
				up_write(&dmrb_origins_lock);
				kfree(fresh);
				s->ti->error = busy;
				return -EBUSY;
			}
		}
	}

	o = dmrb_find_origin(s->origin_dev->bdev->bd_dev);
	if (!o) {
		fresh->kc = dm_kcopyd_client_create(NULL);
		if (IS_ERR(fresh->kc)) {
			int r = PTR_ERR(fresh->kc);

			up_write(&dmrb_origins_lock);
			kfree(fresh);
			s->ti->error = "Cannot create kcopyd client";
			return r;
		}
		fresh->dev = s->origin_dev->bdev->bd_dev;
		INIT_LIST_HEAD(&fresh->snapshots);
		spin_lock_init(&fresh->commit_lock);
		INIT_LIST_HEAD(&fresh->commit_snapshots);
		INIT_WORK(&fresh->commit_work, commit_work_fn);
		list_add_tail(&fresh->list, &dmrb_origins);
		o = fresh;
		fresh = NULL;
	}
	list_add_tail(&s->origin_list, &o->snapshots);
	s->origin = o;
	update_min_chunk(o);
	up_write(&dmrb_origins_lock);

	kfree(fresh);
	return 0;
}

/* ---- invalidation ---- */

static void retry_origin_bio(struct bio *bio);

static void invalidate_work_fn(struct work_struct *work)
{
	struct dmrb_snapshot *s = container_of(work, struct dmrb_snapshot,
					     invalidate_work);
	struct bio_list bios;
	struct bio *bio;

	/* Written with FUA: on disk once it returns. */
	if (s->store.ops->invalidate(&s->store))
		DMERR("%s: cannot mark the COW invalid on disk", s->cow_dev->name);

	/* Held back in vain if the write failed, so they go either way. */
	mutex_lock(&s->lock);
	s->invalidate_written = true;
	bios = s->invalidate_bios;
	bio_list_init(&s->invalidate_bios);
	mutex_unlock(&s->lock);

	while ((bio = bio_list_pop(&bios)))
		retry_origin_bio(bio);

	/* As upstream, an invalidated snapshot raises a table event. */
	queue_work(dmrb_wq, &s->event_work);
}

/*
 * Called with s->lock held; the header is written from the workqueue.
 * Until it is on disk, dmrb_origin_write holds back the origin writes: one
 * that changed a chunk this snapshot did not copy, with the header still
 * saying valid at a crash, would leave a valid snapshot with wrong data.
 */
void dmrb_invalidate(struct dmrb_snapshot *s, const char *why)
{
	if (!s->valid || s->handed_over)
		return;
	DMERR("%s: snapshot invalidated: %s", s->cow_dev->name, why);
	s->valid = false;
	if (!s->invalidate_queued) {
		s->invalidate_queued = true;
		queue_work(dmrb_wq, &s->invalidate_work);
	}
}

/* ---- a full COW: events and the no_space queue ---- */

#define DMRB_NOSPACE_POLL	(HZ / 20)

static void event_work_fn(struct work_struct *work)
{
	struct dmrb_snapshot *s = container_of(work, struct dmrb_snapshot, event_work);

	dm_table_event(s->ti->table);
}

/*
 * Called with s->lock held after an allocation: one event when the free
 * chunks fall to the low-water mark, the next once they have been above it
 * again (the COW grew).
 */
static void check_low_water(struct dmrb_snapshot *s)
{
	u64 free;

	s->full_signalled = false;
	if (!(s->features & DMRB_FEATURE_LOW_WATER))
		return;
	free = s->store.ops->free_chunks(&s->store);
	if (free > s->low_water_mark) {
		s->low_water_signalled = false;
	} else if (!s->low_water_signalled) {
		s->low_water_signalled = true;
		queue_work(dmrb_wq, &s->event_work);
	}
}

/*
 * Whether a write that needs a chunk of a full COW may wait for it to grow:
 * only with no_space queue, and never while the snapshot or its origin is
 * being suspended.  A suspend must end in bounded time, the step that grows
 * the COW may be waiting for it, and a write held here cannot be handed
 * back to device-mapper across a flushing suspend: from presuspend until
 * resume a full COW invalidates the snapshot, as with no_space error, and
 * the writes already waiting are sent on at once.
 */
static bool may_wait(struct dmrb_snapshot *s)
{
	return s->no_space_timeout_ms && !s->suspending &&
	       !READ_ONCE(s->origin->suspending);
}

/* Sends a snapshot write again that waited for the COW to grow. */
static void retry_snapshot_bio(struct dmrb_snapshot *s, struct bio *bio)
{
	switch (dmrb_snapshot_map_bio(s, bio, false)) {
	case DM_MAPIO_REMAPPED:
		submit_bio_noacct(bio);
		break;
	case DM_MAPIO_KILL:
		bio_io_error(bio);
		break;
	}
}

/*
 * Sends on, in order, the writes that waited: to be queued again behind
 * the rest if the COW is full again.  Origin writes were already remapped
 * to the origin device by the origin's map.
 */
static void resend_nospace_bios(struct dmrb_snapshot *s, struct bio_list *bios)
{
	struct bio *bio;

	while ((bio = bio_list_pop(bios))) {
		if (bio->bi_bdev == s->origin_dev->bdev)
			retry_origin_bio(bio);
		else
			retry_snapshot_bio(s, bio);
	}
}

/*
 * Polls the COW's size while writes wait (a resize of the dm device under
 * it tells the snapshot nothing): it sends them on once the COW has room,
 * or invalidates the snapshot at the deadline, or at once when waiting is
 * no longer allowed.
 */
static void nospace_work_fn(struct work_struct *work)
{
	struct dmrb_snapshot *s = container_of(to_delayed_work(work),
					     struct dmrb_snapshot, nospace_work);
	struct bio_list bios;

	mutex_lock(&s->lock);
	if (s->valid && s->nospace_waiting &&
	    !s->store.ops->free_chunks(&s->store)) {
		if (may_wait(s) && time_before(jiffies, s->nospace_deadline)) {
			queue_delayed_work(dmrb_wq, &s->nospace_work,
					   min_t(unsigned long, DMRB_NOSPACE_POLL,
						 s->nospace_deadline - jiffies));
			mutex_unlock(&s->lock);
			return;
		}
		dmrb_invalidate(s, "COW device is full");
	}
	if (s->valid && s->nospace_waiting)
		check_low_water(s);
	s->nospace_waiting = false;
	bios = s->nospace_bios;
	bio_list_init(&s->nospace_bios);
	mutex_unlock(&s->lock);

	resend_nospace_bios(s, &bios);
}

/*
 * A suspend of the snapshot or of its origin has begun (see may_wait()):
 * the writes waiting go on now.
 */
void dmrb_end_nospace_wait(struct dmrb_snapshot *s)
{
	mod_delayed_work(dmrb_wq, &s->nospace_work, 0);
}

/* The origin device dev is being suspended, or resumes. */
void dmrb_origin_suspending(dev_t dev, bool suspending)
{
	struct dmrb_snapshot *s;
	struct dmrb_origin *o;

	down_read(&dmrb_origins_lock);
	o = dmrb_find_origin(dev);
	if (o) {
		WRITE_ONCE(o->suspending, suspending);
		if (suspending)
			list_for_each_entry(s, &o->snapshots, origin_list)
				dmrb_end_nospace_wait(s);
	}
	up_read(&dmrb_origins_lock);
}

/*
 * The parts of a new snapshot that the core looks after.  Its own reserve
 * of pending exceptions: one that others share may be held empty by the
 * very snapshot whose commits would fill it.
 */
int dmrb_snapshot_init(struct dmrb_snapshot *s)
{
	unsigned int i;

	s->pending_pool = mempool_create(DMRB_MIN_PENDING, pending_pool_alloc,
					 mempool_free_slab, dmrb_pending_cache);
	if (!s->pending_pool)
		return -ENOMEM;
	mutex_init(&s->lock);
	bio_list_init(&s->invalidate_bios);
	INIT_LIST_HEAD(&s->commit_queue);
	atomic_set(&s->pending_count, 0);
	INIT_LIST_HEAD(&s->commit_node);
	INIT_WORK(&s->invalidate_work, invalidate_work_fn);
	bio_list_init(&s->nospace_bios);
	INIT_DELAYED_WORK(&s->nospace_work, nospace_work_fn);
	INIT_WORK(&s->event_work, event_work_fn);
	spin_lock_init(&s->tracked_lock);
	for (i = 0; i < DMRB_TRACKED_BUCKETS; i++)
		INIT_HLIST_HEAD(&s->tracked[i]);
	return 0;
}

/*
 * Takes s out of the registry and waits until no copy refers to it any
 * more; the last snapshot of an origin takes the origin with it.
 */
void dmrb_unregister_snapshot(struct dmrb_snapshot *s)
{
	struct dmrb_origin *o = s->origin;
	struct dmrb_snapshot *other;
	struct bio_list bios;
	struct bio *bio;

	down_write(&dmrb_origins_lock);
	list_del(&s->origin_list);
	list_for_each_entry(other, &o->snapshots, origin_list)
		if (other->merge && other->merge->handover_src == s)
			other->merge->handover_src = NULL;
	update_min_chunk(o);
	if (list_empty(&o->snapshots))
		list_del(&o->list);
	else
		o = NULL;
	up_write(&dmrb_origins_lock);

	/*
	 * Writes still waiting for the COW: the origin's go on without this
	 * snapshot, its own fail.  A presuspend has normally sent them on.
	 */
	cancel_delayed_work_sync(&s->nospace_work);
	mutex_lock(&s->lock);
	bios = s->nospace_bios;
	bio_list_init(&s->nospace_bios);
	s->nospace_waiting = false;
	mutex_unlock(&s->lock);
	while ((bio = bio_list_pop(&bios))) {
		if (bio->bi_bdev == s->origin_dev->bdev)
			retry_origin_bio(bio);
		else
			bio_io_error(bio);
	}

	wait_var_event(&s->pending_count, !atomic_read(&s->pending_count));
	flush_work(&s->invalidate_work);
	flush_work(&s->event_work);
	if (o) {
		/* No copy ends after this, so no commit_work is queued after the flush. */
		dm_kcopyd_client_destroy(o->kc);
		flush_work(&o->commit_work);
		kfree(o);
	}
}

/* ---- copies ---- */

/*
 * A pending exception for s with its complete exception, or NULL.  With
 * GFP_NOIO it may wait for the copies of s to be committed, which needs
 * s->lock: the caller must not hold it then.
 */
struct dmrb_pending *dmrb_alloc_pending(struct dmrb_snapshot *s, gfp_t gfp)
{
	struct dmrb_pending *pe;

	pe = mempool_alloc(s->pending_pool, gfp);
	if (!pe)
		return NULL;
	pe->done = kmem_cache_alloc(dmrb_exception_cache, gfp);
	if (!pe->done) {
		mempool_free(pe, s->pending_pool);
		return NULL;
	}
	pe->snap = s;
	return pe;
}

/* Frees one from dmrb_alloc_pending, used or not. */
void dmrb_free_pending(struct dmrb_pending *pe)
{
	if (pe->done)
		kmem_cache_free(dmrb_exception_cache, pe->done);
	mempool_free(pe, pe->snap->pending_pool);
}

/*
 * Called with s->lock held when the COW of s is full, or writes already
 * wait for it: -EAGAIN if bio (when given) now waits behind them for the
 * COW to grow, -ENOSPC if the snapshot has been invalidated instead.  The
 * first write to wait sets the deadline.
 */
static int wait_for_space(struct dmrb_snapshot *s, struct bio *bio, bool full)
{
	if (full && !s->full_signalled) {
		s->full_signalled = true;
		queue_work(dmrb_wq, &s->event_work);
	}
	if (!may_wait(s) ||
	    (s->nospace_waiting && !time_before(jiffies, s->nospace_deadline))) {
		dmrb_invalidate(s, "COW device is full");
		/* The writes waiting go on, to the invalidated snapshot. */
		if (s->nospace_waiting)
			mod_delayed_work(dmrb_wq, &s->nospace_work, 0);
		return -ENOSPC;
	}
	if (!s->nospace_waiting) {
		unsigned long wait = max(msecs_to_jiffies(s->no_space_timeout_ms), 1UL);

		s->nospace_waiting = true;
		s->nospace_deadline = jiffies + wait;
		queue_delayed_work(dmrb_wq, &s->nospace_work,
				   min_t(unsigned long, DMRB_NOSPACE_POLL, wait));
	}
	if (bio)
		bio_list_add(&s->nospace_bios, bio);
	return -EAGAIN;
}

/*
 * Called with s->lock held; pe comes from dmrb_alloc_pending.  Returns
 * ERR_PTR(-EAGAIN) when the COW is full (or writes already wait for it)
 * and bio, if given, waits for it to grow (no_space queue), and
 * ERR_PTR(-ENOSPC) when the snapshot has been invalidated because it is
 * full; pe is still the caller's then.
 */
struct dmrb_pending *dmrb_new_pending(struct dmrb_snapshot *s, dmrb_chunk_t chunk,
				      struct dmrb_pending *pe, struct bio *bio)
{
	struct dmrb_exception *done = pe->done;
	dmrb_chunk_t new_chunk;
	int r;

	/*
	 * Behind the writes that wait, unless waiting has ended: past the
	 * deadline the COW may have grown, and only a failed allocation
	 * invalidates.
	 */
	if (s->nospace_waiting && may_wait(s) &&
	    time_before(jiffies, s->nospace_deadline)) {
		r = wait_for_space(s, bio, false);
		return ERR_PTR(r);
	}
	if (s->store.ops->allocate(&s->store, &new_chunk)) {
		r = wait_for_space(s, bio, true);
		return ERR_PTR(r);
	}
	check_low_water(s);

	memset(pe, 0, sizeof(*pe));
	pe->e.old_chunk = chunk;
	pe->e.new_chunk = new_chunk;
	pe->done = done;
	pe->commit.old_chunk = chunk;
	pe->commit.new_chunk = new_chunk;
	pe->snap = s;
	bio_list_init(&pe->origin_bios);
	bio_list_init(&pe->snap_bios);
	dmrb_table_insert(&s->pending, &pe->e);
	list_add_tail(&pe->queue, &s->commit_queue);
	atomic_inc(&s->pending_count);
	return pe;
}

/*
 * The last access to s by a committer: once the count is zero the
 * destructor may free s, and wake_up_var() does not dereference it.
 */
static void release_pending(struct dmrb_snapshot *s, unsigned int n)
{
	if (n && atomic_sub_and_test(n, &s->pending_count))
		wake_up_var(&s->pending_count);
}

static void commit_begin(struct dmrb_snapshot *s, struct dmrb_commit_ctx *c);
static void commit_write(struct dmrb_commit_ctx *c, bool data_flush);
static void commit_wait(struct dmrb_commit_ctx *c);
static void commit_end(struct dmrb_commit_ctx *c, struct bio_list *origin_bios);

/*
 * Marks the copy done and hands its snapshots to the origin's commit_work.
 * Each snapshot is queued under its lock, where the copy is marked: a
 * commit that took it off the queue before sees the copy when it takes
 * the lock.  Being queued holds a reference, which the commit that takes
 * it off releases: that commit may find nothing left to commit, an
 * earlier one having taken the copy along.  Another reference keeps it
 * until its lock is dropped here.
 */
static void copy_done(int read_err, unsigned long write_err, void *context)
{
	struct dmrb_pending *pe = context;
	struct dmrb_origin *o = pe->snap->origin;
	unsigned int n = 0;

	while (pe) {
		/* pe may be freed as soon as it is committed. */
		struct dmrb_pending *next = pe->next_copy;
		struct dmrb_snapshot *s = pe->snap;

		atomic_inc(&s->pending_count);
		mutex_lock(&s->lock);
		if (read_err || (write_err & BIT(n)))
			pe->error = -EIO;
		pe->copied = true;
		spin_lock(&o->commit_lock);
		if (list_empty(&s->commit_node)) {
			atomic_inc(&s->pending_count);
			list_add_tail(&s->commit_node, &o->commit_snapshots);
		}
		spin_unlock(&o->commit_lock);
		mutex_unlock(&s->lock);
		release_pending(s, 1);
		pe = next;
		n++;
	}
	queue_work(dmrb_commit_wq, &o->commit_work);
	copy_ended(o);
}

/*
 * Group commit of every copy done so far: each snapshot stages its
 * metadata, then all of them flush their COW together and all write their
 * metadata together, so that snapshots whose COWs share a disk share its
 * flushes, and a copy that ends meanwhile is in the next group.
 */
static void commit_work_fn(struct work_struct *work)
{
	struct dmrb_origin *o = container_of(work, struct dmrb_origin, commit_work);
	struct dmrb_snapshot *s, *tmp;
	struct bio_list origin_bios;
	LIST_HEAD(group);

	spin_lock(&o->commit_lock);
	list_for_each_entry_safe(s, tmp, &o->commit_snapshots, commit_node) {
		list_del_init(&s->commit_node);
		list_add_tail(&s->commit_group, &group);
	}
	spin_unlock(&o->commit_lock);

	list_for_each_entry(s, &group, commit_group)
		commit_begin(s, &s->commit_ctx);
	list_for_each_entry(s, &group, commit_group)
		commit_write(&s->commit_ctx, true);
	list_for_each_entry(s, &group, commit_group)
		commit_wait(&s->commit_ctx);
	list_for_each_entry(s, &group, commit_group)
		commit_write(&s->commit_ctx, false);
	bio_list_init(&origin_bios);
	list_for_each_entry(s, &group, commit_group)
		commit_end(&s->commit_ctx, &origin_bios);
	/* s may be freed once released: its exceptions, and its place in the queue. */
	list_for_each_entry_safe(s, tmp, &group, commit_group) {
		list_del(&s->commit_group);
		release_pending(s, s->commit_ctx.committed + 1);
	}

	/*
	 * Not from here: a retried write may wait for a reserve that only
	 * this work's commits fill.
	 */
	if (!bio_list_empty(&origin_bios)) {
		spin_lock(&retry_lock);
		bio_list_merge(&retry_bios, &origin_bios);
		spin_unlock(&retry_lock);
		queue_work(dmrb_wq, &retry_work);
	}
}

/*
 * Starts one copy for a chain of pending exceptions of the same origin
 * chunk and chunk size: one read, one write per COW.
 */
void dmrb_start_copy(struct dmrb_origin *o, struct dmrb_pending *chain)
{
	struct dm_io_region src, dests[DM_KCOPYD_MAX_REGIONS];
	struct dmrb_snapshot *s = chain->snap;
	sector_t dev_size = bdev_nr_sectors(s->origin_dev->bdev);
	struct dmrb_pending *pe;
	unsigned int n = 0;

	src.bdev = s->origin_dev->bdev;
	src.sector = chain->e.old_chunk << s->store.chunk_shift;
	src.count = min_t(sector_t, s->store.chunk_sectors, dev_size - src.sector);

	for (pe = chain; pe; pe = pe->next_copy, n++) {
		dests[n].bdev = pe->snap->cow_dev->bdev;
		dests[n].sector = pe->e.new_chunk << pe->snap->store.chunk_shift;
		dests[n].count = src.count;
	}

	copy_started(o);
	dm_kcopyd_copy(o->kc, &src, n, dests, 0, copy_done, chain);
}

static void full_write_done(struct bio *bio)
{
	dm_kcopyd_do_callback(bio->bi_private, 0, bio->bi_status ? 1 : 0);
}

/*
 * A snapshot write of a whole chunk that no copy holds yet is that chunk's
 * copy, with no origin read: it goes to the COW (bio is remapped there) and
 * ends once committed, as a copy's snapshot writes do.  Its completion
 * runs copy_done() on kcopyd's thread, as a copy's does.
 */
void dmrb_start_full_write(struct dmrb_origin *o, struct dmrb_pending *pe, struct bio *bio)
{
	void *job = dm_kcopyd_prepare_callback(o->kc, copy_done, pe);

	pe->full_bio = bio;
	pe->full_bio_end_io = bio->bi_end_io;
	bio->bi_end_io = full_write_done;
	bio->bi_private = job;
	copy_started(o);
	submit_bio_noacct(bio);
}

/*
 * Groups new pending exceptions that copy the same origin range, up to
 * the number of destinations one copy job takes, and starts the copies.
 */
static void start_copies(struct dmrb_origin *o, struct dmrb_pending *list)
{
	while (list) {
		struct dmrb_pending *chain = list, *tail = list, *pe, **link;
		unsigned int n = 1;

		list = list->next_copy;
		chain->next_copy = NULL;
		link = &list;
		while ((pe = *link)) {
			if (n < DM_KCOPYD_MAX_REGIONS &&
			    pe->e.old_chunk == chain->e.old_chunk &&
			    pe->snap->store.chunk_shift == chain->snap->store.chunk_shift) {
				*link = pe->next_copy;
				pe->next_copy = NULL;
				tail->next_copy = pe;
				tail = pe;
				n++;
			} else {
				link = &pe->next_copy;
			}
		}
		dmrb_start_copy(o, chain);
	}
}

/*
 * Makes sure every active snapshot of o has (or is getting) its own copy
 * of the chunks that [sector, sector + count) touches.  If bio is given
 * and some copy is still in flight, bio is queued on it and retried when
 * it is committed: returns DM_MAPIO_SUBMITTED.  Otherwise the write may go
 * ahead: DM_MAPIO_REMAPPED.  Called with dmrb_origins_lock held.
 */
int dmrb_origin_write(struct dmrb_origin *o, sector_t sector,
			unsigned int count, struct bio *bio)
{
	struct dmrb_pending *new_list = NULL;
	struct dmrb_snapshot *s;
	bool queued = false;

	list_for_each_entry(s, &o->snapshots, origin_list) {
		dmrb_chunk_t chunk = sector >> s->store.chunk_shift;
		dmrb_chunk_t last = (sector + count - 1) >> s->store.chunk_shift;
		struct dmrb_pending *spare = NULL;

		/* A merge never takes new exceptions; a handed-over COW is not ours. */
		if (s->merge || s->handed_over)
			continue;
		mutex_lock(&s->lock);
		while (chunk <= last && s->valid && s->active) {
			struct dmrb_exception *e;
			struct dmrb_pending *pe;

			if (dmrb_table_lookup(&s->complete, chunk)) {
				chunk++;
				continue;
			}
			e = dmrb_table_lookup(&s->pending, chunk);
			if (e) {
				pe = container_of(e, struct dmrb_pending, e);
			} else {
				if (!spare)
					spare = dmrb_alloc_pending(s, GFP_NOWAIT);
				if (!spare) {
					/*
					 * The reserve of s fills as its copies are
					 * committed, in allocation order: ours must
					 * be started, and commits take s->lock.
					 */
					mutex_unlock(&s->lock);
					start_copies(o, new_list);
					new_list = NULL;
					spare = dmrb_alloc_pending(s, GFP_NOIO);
					mutex_lock(&s->lock);
					if (!spare) {
						dmrb_invalidate(s, "out of memory");
						break;
					}
					continue;	/* the tables may have changed */
				}
				pe = dmrb_new_pending(s, chunk, spare, queued ? NULL : bio);
				if (IS_ERR(pe)) {
					/* Waits for the COW to grow, or s is invalid. */
					if (PTR_ERR(pe) == -EAGAIN && bio)
						queued = true;
					break;
				}
				spare = NULL;
				pe->next_copy = new_list;
				new_list = pe;
			}
			if (bio && !queued) {
				bio_list_add(&pe->origin_bios, bio);
				queued = true;
			}
			chunk++;
		}
		if (!s->valid && !s->invalidate_written && bio && !queued) {
			bio_list_add(&s->invalidate_bios, bio);
			queued = true;
		}
		mutex_unlock(&s->lock);
		if (spare)
			dmrb_free_pending(spare);
	}

	start_copies(o, new_list);
	return queued ? DM_MAPIO_SUBMITTED : DM_MAPIO_REMAPPED;
}

/* Sends an origin write again once the copy it waited for is committed. */
static void retry_origin_bio(struct bio *bio)
{
	struct dmrb_origin *o;
	int r = DM_MAPIO_REMAPPED;

	down_read(&dmrb_origins_lock);
	o = dmrb_find_origin(bio->bi_bdev->bd_dev);
	if (o)
		r = dmrb_origin_write(o, bio->bi_iter.bi_sector, bio_sectors(bio), bio);
	up_read(&dmrb_origins_lock);

	if (r == DM_MAPIO_REMAPPED)
		submit_bio_noacct(bio);
}

static void retry_work_fn(struct work_struct *work)
{
	struct bio_list bios;
	struct bio *bio;

	spin_lock(&retry_lock);
	bios = retry_bios;
	bio_list_init(&retry_bios);
	spin_unlock(&retry_lock);

	while ((bio = bio_list_pop(&bios)))
		retry_origin_bio(bio);
}

void dmrb_remap_to_cow(struct dmrb_snapshot *s, struct bio *bio,
			 dmrb_chunk_t new_chunk)
{
	sector_t offset = dm_target_offset(s->ti, bio->bi_iter.bi_sector);

	bio_set_dev(bio, s->cow_dev->bdev);
	bio->bi_iter.bi_sector = (new_chunk << s->store.chunk_shift) |
				 (offset & (s->store.chunk_sectors - 1));
}

void dmrb_track_read(struct dmrb_snapshot *s, struct dmrb_tracked *t,
		     dmrb_chunk_t chunk)
{
	t->chunk = chunk;
	spin_lock_irq(&s->tracked_lock);
	hlist_add_head(&t->node, &s->tracked[chunk % DMRB_TRACKED_BUCKETS]);
	spin_unlock_irq(&s->tracked_lock);
}

static bool chunk_is_tracked(struct dmrb_snapshot *s, dmrb_chunk_t chunk)
{
	struct dmrb_tracked *t;
	bool found = false;

	spin_lock_irq(&s->tracked_lock);
	hlist_for_each_entry(t, &s->tracked[chunk % DMRB_TRACKED_BUCKETS], node) {
		if (t->chunk == chunk) {
			found = true;
			break;
		}
	}
	spin_unlock_irq(&s->tracked_lock);
	return found;
}

/*
 * An origin write may only follow a snapshot read of the same chunk that
 * was sent to the origin once that read has finished.
 */
void dmrb_wait_for_tracked_reads(struct dmrb_snapshot *s, dmrb_chunk_t chunk)
{
	while (chunk_is_tracked(s, chunk))
		usleep_range(50, 100);
}

static void metadata_written(unsigned long error, void *context)
{
	struct dmrb_commit_ctx *c = context;

	c->write_error = error;
	complete(&c->written);
}

/*
 * Takes the copies that are done, in allocation order (a crash then
 * leaves no hole), and starts writing their metadata.  Copies done out of
 * order wait for the one before them, whose own commit takes them along.
 */
static void commit_begin(struct dmrb_snapshot *s, struct dmrb_commit_ctx *c)
{
	struct dmrb_pending *pe, *tmp;
	LIST_HEAD(batch);
	bool valid;
	int r = 0;

	c->snap = s;
	c->writing = false;
	INIT_LIST_HEAD(&c->done);

	mutex_lock(&s->lock);
	list_for_each_entry_safe(pe, tmp, &s->commit_queue, queue) {
		if (!pe->copied)
			break;
		list_move_tail(&pe->queue, &c->done);
		if (pe->error)
			dmrb_invalidate(s, "copy to COW failed");
		else
			list_add_tail(&pe->commit.list, &batch);
	}
	valid = s->valid;
	mutex_unlock(&s->lock);

	/* May write a full area: in the origin's commit_work, not under s->lock. */
	if (valid && !list_empty(&batch))
		r = s->store.ops->stage(&s->store, &batch);
	if (r < 0) {
		mutex_lock(&s->lock);
		dmrb_invalidate(s, "COW metadata write failed");
		mutex_unlock(&s->lock);
	} else if (r > 0) {
		c->writing = true;
	}
}

static void commit_write(struct dmrb_commit_ctx *c, bool data_flush)
{
	if (!c->writing)
		return;
	init_completion(&c->written);
	c->snap->store.ops->write_metadata(&c->snap->store, data_flush,
					   metadata_written, c);
}

static void commit_wait(struct dmrb_commit_ctx *c)
{
	struct dmrb_snapshot *s = c->snap;

	if (!c->writing)
		return;
	wait_for_completion(&c->written);
	if (c->write_error) {
		c->writing = false;
		mutex_lock(&s->lock);
		dmrb_invalidate(s, "COW metadata write failed");
		mutex_unlock(&s->lock);
	}
}

/*
 * Waits for the metadata, then lets the snapshot writes that waited for it
 * go; the origin writes are added to origin_bios, for the caller to send
 * again from another work.
 */
static void commit_end(struct dmrb_commit_ctx *c, struct bio_list *origin_bios)
{
	struct dmrb_snapshot *s = c->snap;
	struct dmrb_pending *pe, *tmp;
	unsigned int n = 0;

	commit_wait(c);

	list_for_each_entry_safe(pe, tmp, &c->done, queue) {
		struct bio_list snap_bios;
		struct bio *bio;
		bool ok;

		dmrb_wait_for_tracked_reads(s, pe->e.old_chunk);

		mutex_lock(&s->lock);
		hlist_del(&pe->e.hash);
		ok = s->valid && !pe->error;
		if (ok) {
			pe->done->old_chunk = pe->e.old_chunk;
			pe->done->new_chunk = pe->e.new_chunk;
			dmrb_table_insert(&s->complete, pe->done);
			pe->done = NULL;
		}
		bio_list_merge(origin_bios, &pe->origin_bios);
		snap_bios = pe->snap_bios;
		mutex_unlock(&s->lock);

		while ((bio = bio_list_pop(&snap_bios))) {
			if (ok) {
				dmrb_remap_to_cow(s, bio, pe->e.new_chunk);
				submit_bio_noacct(bio);
			} else {
				bio_io_error(bio);
			}
		}
		bio = pe->full_bio;
		if (bio) {
			bio->bi_end_io = pe->full_bio_end_io;
			if (ok)
				bio_endio(bio);
			else
				bio_io_error(bio);
		}

		list_del(&pe->queue);
		dmrb_free_pending(pe);
		n++;
	}
	c->committed = n;
}

/* ---- the module ---- */

static int __init dm_rollback_init(void)
{
	int r = -ENOMEM;

	dmrb_exception_cache = KMEM_CACHE(dmrb_exception, 0);
	if (!dmrb_exception_cache)
		goto bad_exception_cache;
	dmrb_pending_cache = KMEM_CACHE(dmrb_pending, 0);
	if (!dmrb_pending_cache)
		goto bad_pending_cache;
	dmrb_wq = alloc_workqueue("dm-rollback", WQ_MEM_RECLAIM, 0);
	if (!dmrb_wq)
		goto bad_wq;
	dmrb_commit_wq = alloc_workqueue("dm-rollback-commit", WQ_MEM_RECLAIM, 0);
	if (!dmrb_commit_wq)
		goto bad_commit_wq;

	r = dm_register_target(&dmrb_origin_target);
	if (r)
		goto bad_origin_target;
	r = dm_register_target(&dmrb_snapshot_target);
	if (r)
		goto bad_snapshot_target;
	r = dm_register_target(&dmrb_merge_target);
	if (r)
		goto bad_merge_target;
	return 0;

bad_merge_target:
	dm_unregister_target(&dmrb_snapshot_target);
bad_snapshot_target:
	dm_unregister_target(&dmrb_origin_target);
bad_origin_target:
	destroy_workqueue(dmrb_commit_wq);
bad_commit_wq:
	destroy_workqueue(dmrb_wq);
bad_wq:
	kmem_cache_destroy(dmrb_pending_cache);
bad_pending_cache:
	kmem_cache_destroy(dmrb_exception_cache);
bad_exception_cache:
	return r;
}

static void __exit dm_rollback_exit(void)
{
	dm_unregister_target(&dmrb_merge_target);
	dm_unregister_target(&dmrb_snapshot_target);
	dm_unregister_target(&dmrb_origin_target);
	destroy_workqueue(dmrb_commit_wq);
	destroy_workqueue(dmrb_wq);
	kmem_cache_destroy(dmrb_pending_cache);
	kmem_cache_destroy(dmrb_exception_cache);
}

module_init(dm_rollback_init);
module_exit(dm_rollback_exit);

MODULE_DESCRIPTION(DM_NAME " copy-on-write snapshots that can be rolled back");
MODULE_LICENSE("GPL");
