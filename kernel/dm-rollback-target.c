// SPDX-License-Identifier: GPL-2.0
/*
 * dm-rollback: copy-on-write snapshots of a block device.
 *
 * rollback-origin sits on the device that is being snapshotted; a write to
 * it first copies the old data of the chunk into every snapshot that still
 * shares it.  rollback-snap shows the device as it was when the
 * snapshot became active.  The table grammar and the persistent COW format
 * are those of the upstream snapshot targets.
 *
 * When an origin write hits a chunk that several snapshots (of the same
 * chunk size) still share, the chunk is read once and written to all of
 * their COW devices in one copy job.
 *
 * rollback-merge replaces the origin's table and copies a snapshot's
 * chunks back into the origin while the device stays in use; the other
 * snapshots get the old origin data first, as for any origin write.
 * Unlike upstream, it merges a batch of exceptions at a time (any chunks,
 * not only consecutive ones) with several copies in flight and one
 * metadata write per batch.
 */

#include "dm-rollback.h"

#include <linux/bio.h>
#include <linux/blkdev.h>
#include <linux/delay.h>
#include <linux/dm-kcopyd.h>
#include <linux/ktime.h>
#include <linux/mempool.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/rwsem.h>
#include <linux/slab.h>
#include <linux/wait.h>
#include <linux/wait_bit.h>
#include <linux/workqueue.h>

#define DM_MSG_PREFIX "rollback"

#define RB_MIN_PENDING		256
#define RB_MAX_HASH_BITS	18
#define RB_TRACKED_BUCKETS	64
#define RB_MERGE_BATCH		256

enum rb_merge_state {
	RB_MERGE_STOPPED,
	RB_MERGE_RUNNING,
	RB_MERGE_FAILED,
};

struct rb_exception {
	struct hlist_node hash;
	rb_chunk_t old_chunk;
	rb_chunk_t new_chunk;
};

struct rb_table {
	struct hlist_head *buckets;
	u64 mask;
};

/* The snapshots of one origin device. */
struct rb_origin {
	struct list_head list;		/* in rb_origins */
	dev_t dev;
	struct list_head snapshots;
	struct dm_kcopyd_client *kc;
	unsigned int min_chunk;		/* smallest chunk of its snapshots */
};

struct rb_snapshot {
	struct dm_target *ti;
	struct dm_dev *origin_dev;
	struct dm_dev *cow_dev;
	struct rb_origin *origin;
	struct list_head origin_list;
	unsigned int table_chunk;	/* as given in the table */
	struct rb_store store;

	/* Protects everything below except the tracked reads. */
	struct mutex lock;
	bool valid;
	bool active;
	bool invalidate_queued;
	struct rb_table complete;
	struct rb_table pending;
	struct list_head commit_queue;	/* rb_pending, allocation order */
	atomic_t pending_count;		/* see release_pending() */
	struct work_struct invalidate_work;

	/* Serialises commits: the store stages one batch at a time. */
	struct mutex commit_lock;

	/*
	 * Snapshot reads sent to the origin and still in flight; for a merge,
	 * every bio sent to the COW.
	 */
	spinlock_t tracked_lock;
	struct hlist_head tracked[RB_TRACKED_BUCKETS];

	/* Its COW was taken over by a merge: I/O fails, origin writes skip it. */
	bool handed_over;

	/* rollback-merge only; under lock unless noted. */
	bool merge;
	struct rb_snapshot *handover_src;	/* COW to take over at resume */
	enum rb_merge_state merge_state;
	bool merge_stop;
	bool merge_running;
	wait_queue_head_t merge_wait;
	struct work_struct merge_work;
	u64 exception_count;
	struct rb_merge_entry *batch;	/* the chunks being merged now */
	unsigned int batch_n;
	struct bio_list merge_waiting;	/* bios to those chunks */
	unsigned int throttle_kbs;	/* 0: unlimited */
	/* Worker only. */
	atomic_t merge_copies;
	int merge_copy_error;
	struct completion merge_copied;
};

/* A chunk being copied from the origin into one snapshot's COW. */
struct rb_pending {
	struct rb_exception e;		/* in snap->pending */
	struct rb_exception *done;	/* goes into snap->complete */
	struct rb_commit commit;
	struct list_head queue;		/* in snap->commit_queue */
	struct rb_snapshot *snap;
	struct rb_pending *next_copy;	/* other COWs filled by the same read */
	struct bio_list origin_bios;
	struct bio_list snap_bios;
	bool copied;
	int error;
};

/* Per-bio data of rollback-snap. */
struct rb_tracked {
	struct hlist_node node;
	rb_chunk_t chunk;
};

struct rb_origin_ctx {
	struct dm_dev *dev;
};

static DECLARE_RWSEM(rb_origins_lock);
static LIST_HEAD(rb_origins);
static struct kmem_cache *rb_exception_cache;
static struct kmem_cache *rb_pending_cache;
static mempool_t *rb_pending_pool;
static struct workqueue_struct *rb_wq;

/* ---- exception tables ---- */

static int table_init(struct rb_table *t, sector_t cow_sectors,
		      unsigned int chunk_shift)
{
	u64 chunks = max_t(u64, cow_sectors >> chunk_shift, 64);
	unsigned int bits = min_t(unsigned int, ilog2(roundup_pow_of_two(chunks)),
				  RB_MAX_HASH_BITS);
	u64 i, n = 1ULL << bits;

	t->buckets = kvmalloc_array(n, sizeof(*t->buckets), GFP_KERNEL);
	if (!t->buckets)
		return -ENOMEM;
	for (i = 0; i < n; i++)
		INIT_HLIST_HEAD(&t->buckets[i]);
	t->mask = n - 1;
	return 0;
}

static void table_insert(struct rb_table *t, struct rb_exception *e)
{
	hlist_add_head(&e->hash, &t->buckets[e->old_chunk & t->mask]);
}

static struct rb_exception *table_lookup(struct rb_table *t, rb_chunk_t chunk)
{
	struct rb_exception *e;

	hlist_for_each_entry(e, &t->buckets[chunk & t->mask], hash)
		if (e->old_chunk == chunk)
			return e;
	return NULL;
}

/* Frees the complete table's entries; pending ones belong to rb_pending. */
static void table_destroy(struct rb_table *t, bool free_entries)
{
	struct rb_exception *e;
	struct hlist_node *tmp;
	u64 i;

	if (!t->buckets)
		return;
	if (free_entries)
		for (i = 0; i <= t->mask; i++)
			hlist_for_each_entry_safe(e, tmp, &t->buckets[i], hash)
				kmem_cache_free(rb_exception_cache, e);
	kvfree(t->buckets);
	t->buckets = NULL;
}

static int add_recorded_exception(void *context, rb_chunk_t old_chunk,
				  rb_chunk_t new_chunk)
{
	struct rb_snapshot *s = context;
	struct rb_exception *e;

	e = table_lookup(&s->complete, old_chunk);
	if (e) {
		/* A later entry for the same chunk supersedes an earlier one. */
		e->new_chunk = new_chunk;
		return 0;
	}
	e = kmem_cache_alloc(rb_exception_cache, GFP_KERNEL);
	if (!e)
		return -ENOMEM;
	e->old_chunk = old_chunk;
	e->new_chunk = new_chunk;
	table_insert(&s->complete, e);
	s->exception_count++;
	return 0;
}

/* ---- origin registry ---- */

static struct rb_origin *find_origin(dev_t dev)
{
	struct rb_origin *o;

	list_for_each_entry(o, &rb_origins, list)
		if (o->dev == dev)
			return o;
	return NULL;
}

static void update_min_chunk(struct rb_origin *o)
{
	struct rb_snapshot *s;
	unsigned int min_chunk = 0;

	list_for_each_entry(s, &o->snapshots, origin_list)
		if (!min_chunk || s->store.chunk_sectors < min_chunk)
			min_chunk = s->store.chunk_sectors;
	o->min_chunk = min_chunk;
}

static int register_snapshot(struct rb_snapshot *s)
{
	struct rb_origin *o, *fresh;
	struct rb_snapshot *other;

	fresh = kzalloc(sizeof(*fresh), GFP_KERNEL);
	if (!fresh) {
		s->ti->error = "Cannot allocate origin registry entry";
		return -ENOMEM;
	}

	down_write(&rb_origins_lock);
	list_for_each_entry(o, &rb_origins, list) {
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
			else if (s->handover_src)
				busy = "COW device is already in use by two tables";
			else
				s->handover_src = other;
			if (busy) {
				up_write(&rb_origins_lock);
				kfree(fresh);
				s->ti->error = busy;
				return -EBUSY;
			}
		}
	}

	o = find_origin(s->origin_dev->bdev->bd_dev);
	if (!o) {
		fresh->kc = dm_kcopyd_client_create(NULL);
		if (IS_ERR(fresh->kc)) {
			int r = PTR_ERR(fresh->kc);

			up_write(&rb_origins_lock);
			kfree(fresh);
			s->ti->error = "Cannot create kcopyd client";
			return r;
		}
		fresh->dev = s->origin_dev->bdev->bd_dev;
		INIT_LIST_HEAD(&fresh->snapshots);
		list_add_tail(&fresh->list, &rb_origins);
		o = fresh;
		fresh = NULL;
	}
	list_add_tail(&s->origin_list, &o->snapshots);
	s->origin = o;
	update_min_chunk(o);
	up_write(&rb_origins_lock);

	kfree(fresh);
	return 0;
}

/* Returns the origin entry to free once the snapshot's copies are done. */
static struct rb_origin *unregister_snapshot(struct rb_snapshot *s)
{
	struct rb_origin *o = s->origin;

	struct rb_snapshot *other;

	down_write(&rb_origins_lock);
	list_del(&s->origin_list);
	list_for_each_entry(other, &o->snapshots, origin_list)
		if (other->handover_src == s)
			other->handover_src = NULL;
	update_min_chunk(o);
	if (list_empty(&o->snapshots))
		list_del(&o->list);
	else
		o = NULL;
	up_write(&rb_origins_lock);
	return o;
}

/* ---- invalidation ---- */

static void invalidate_work_fn(struct work_struct *work)
{
	struct rb_snapshot *s = container_of(work, struct rb_snapshot,
					     invalidate_work);

	if (s->store.ops->invalidate(&s->store))
		DMERR("%s: cannot mark the COW invalid on disk", s->cow_dev->name);
}

/* Called with s->lock held; the header is written from the workqueue. */
static void invalidate_snapshot(struct rb_snapshot *s, const char *why)
{
	if (!s->valid || s->handed_over)
		return;
	DMERR("%s: snapshot invalidated: %s", s->cow_dev->name, why);
	s->valid = false;
	if (!s->invalidate_queued) {
		s->invalidate_queued = true;
		queue_work(rb_wq, &s->invalidate_work);
	}
}

/* ---- copies ---- */

/*
 * Called with s->lock held.  Returns NULL (having invalidated the
 * snapshot) when the COW is full.
 */
static struct rb_pending *new_pending(struct rb_snapshot *s, rb_chunk_t chunk)
{
	struct rb_pending *pe;
	struct rb_exception *done;
	rb_chunk_t new_chunk;

	done = kmem_cache_alloc(rb_exception_cache, GFP_NOIO);
	if (!done) {
		invalidate_snapshot(s, "out of memory");
		return NULL;
	}
	if (s->store.ops->allocate(&s->store, &new_chunk)) {
		kmem_cache_free(rb_exception_cache, done);
		invalidate_snapshot(s, "COW device is full");
		return NULL;
	}

	pe = mempool_alloc(rb_pending_pool, GFP_NOIO);
	memset(pe, 0, sizeof(*pe));
	pe->e.old_chunk = chunk;
	pe->e.new_chunk = new_chunk;
	pe->done = done;
	pe->commit.old_chunk = chunk;
	pe->commit.new_chunk = new_chunk;
	pe->snap = s;
	bio_list_init(&pe->origin_bios);
	bio_list_init(&pe->snap_bios);
	table_insert(&s->pending, &pe->e);
	list_add_tail(&pe->queue, &s->commit_queue);
	atomic_inc(&s->pending_count);
	return pe;
}

static void free_pending(struct rb_pending *pe)
{
	if (pe->done)
		kmem_cache_free(rb_exception_cache, pe->done);
	mempool_free(pe, rb_pending_pool);
}

/*
 * The last access to s by a committer: once the count is zero the
 * destructor may free s, and wake_up_var() does not dereference it.
 */
static void release_pending(struct rb_snapshot *s, unsigned int n)
{
	if (n && atomic_sub_and_test(n, &s->pending_count))
		wake_up_var(&s->pending_count);
}

/* One snapshot's part of a group commit. */
struct rb_commit_ctx {
	struct rb_snapshot *snap;
	struct list_head done;		/* rb_pending, allocation order */
	struct completion written;
	unsigned long write_error;
	bool writing;
};

static void merge_work_fn(struct work_struct *work);
static void commit_begin(struct rb_snapshot *s, struct rb_commit_ctx *c);
static void commit_write(struct rb_commit_ctx *c, bool data_flush);
static void commit_wait(struct rb_commit_ctx *c);
static void commit_end(struct rb_commit_ctx *c);

/*
 * Group commit: every snapshot of the copy stages its metadata, then all
 * of them flush their COW together and all write their metadata together,
 * so that snapshots whose COWs share a disk share its flushes.
 */
static void copy_done(int read_err, unsigned long write_err, void *context)
{
	struct rb_commit_ctx ctx[DM_KCOPYD_MAX_REGIONS];
	struct rb_pending *pe = context;
	unsigned int i, n = 0;

	while (pe) {
		/* pe may be freed as soon as it is committed. */
		struct rb_pending *next = pe->next_copy;
		struct rb_snapshot *s = pe->snap;

		mutex_lock(&s->lock);
		if (read_err || (write_err & BIT(n)))
			pe->error = -EIO;
		pe->copied = true;
		mutex_unlock(&s->lock);
		ctx[n++].snap = s;
		pe = next;
	}

	for (i = 0; i < n; i++)
		commit_begin(ctx[i].snap, &ctx[i]);
	for (i = 0; i < n; i++)
		commit_write(&ctx[i], true);
	for (i = 0; i < n; i++)
		commit_wait(&ctx[i]);
	for (i = 0; i < n; i++)
		commit_write(&ctx[i], false);
	for (i = 0; i < n; i++)
		commit_end(&ctx[i]);
}

/*
 * Starts one copy for a chain of pending exceptions of the same origin
 * chunk and chunk size: one read, one write per COW.
 */
static void start_copy(struct rb_origin *o, struct rb_pending *chain)
{
	struct dm_io_region src, dests[DM_KCOPYD_MAX_REGIONS];
	struct rb_snapshot *s = chain->snap;
	sector_t dev_size = bdev_nr_sectors(s->origin_dev->bdev);
	struct rb_pending *pe;
	unsigned int n = 0;

	src.bdev = s->origin_dev->bdev;
	src.sector = chain->e.old_chunk << s->store.chunk_shift;
	src.count = min_t(sector_t, s->store.chunk_sectors, dev_size - src.sector);

	for (pe = chain; pe; pe = pe->next_copy, n++) {
		dests[n].bdev = pe->snap->cow_dev->bdev;
		dests[n].sector = pe->e.new_chunk << pe->snap->store.chunk_shift;
		dests[n].count = src.count;
	}

	dm_kcopyd_copy(o->kc, &src, n, dests, 0, copy_done, chain);
}

/*
 * Groups new pending exceptions that copy the same origin range, up to
 * the number of destinations one copy job takes, and starts the copies.
 */
static void start_copies(struct rb_origin *o, struct rb_pending *list)
{
	while (list) {
		struct rb_pending *chain = list, *tail = list, *pe, **link;
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
		start_copy(o, chain);
	}
}

/*
 * Makes sure every active snapshot of o has (or is getting) its own copy
 * of the chunks that [sector, sector + count) touches.  If bio is given
 * and some copy is still in flight, bio is queued on it and retried when
 * it is committed: returns DM_MAPIO_SUBMITTED.  Otherwise the write may go
 * ahead: DM_MAPIO_REMAPPED.  Called with rb_origins_lock held.
 */
static int origin_write(struct rb_origin *o, sector_t sector,
			unsigned int count, struct bio *bio)
{
	struct rb_pending *new_list = NULL;
	struct rb_snapshot *s;
	bool queued = false;

	list_for_each_entry(s, &o->snapshots, origin_list) {
		rb_chunk_t chunk = sector >> s->store.chunk_shift;
		rb_chunk_t last = (sector + count - 1) >> s->store.chunk_shift;

		/* A merge never takes new exceptions; a handed-over COW is not ours. */
		if (s->merge || s->handed_over)
			continue;
		mutex_lock(&s->lock);
		for (; chunk <= last && s->valid && s->active; chunk++) {
			struct rb_exception *e;
			struct rb_pending *pe;

			if (table_lookup(&s->complete, chunk))
				continue;
			e = table_lookup(&s->pending, chunk);
			if (e) {
				pe = container_of(e, struct rb_pending, e);
			} else {
				pe = new_pending(s, chunk);
				if (!pe)
					break;
				pe->next_copy = new_list;
				new_list = pe;
			}
			if (bio && !queued) {
				bio_list_add(&pe->origin_bios, bio);
				queued = true;
			}
		}
		mutex_unlock(&s->lock);
	}

	start_copies(o, new_list);
	return queued ? DM_MAPIO_SUBMITTED : DM_MAPIO_REMAPPED;
}

/* Sends an origin write again once the copy it waited for is committed. */
static void retry_origin_bio(struct bio *bio)
{
	struct rb_origin *o;
	int r = DM_MAPIO_REMAPPED;

	down_read(&rb_origins_lock);
	o = find_origin(bio->bi_bdev->bd_dev);
	if (o)
		r = origin_write(o, bio->bi_iter.bi_sector, bio_sectors(bio), bio);
	up_read(&rb_origins_lock);

	if (r == DM_MAPIO_REMAPPED)
		submit_bio_noacct(bio);
}

static void remap_to_cow(struct rb_snapshot *s, struct bio *bio,
			 rb_chunk_t new_chunk)
{
	sector_t offset = dm_target_offset(s->ti, bio->bi_iter.bi_sector);

	bio_set_dev(bio, s->cow_dev->bdev);
	bio->bi_iter.bi_sector = (new_chunk << s->store.chunk_shift) |
				 (offset & (s->store.chunk_sectors - 1));
}

static bool chunk_is_tracked(struct rb_snapshot *s, rb_chunk_t chunk)
{
	struct rb_tracked *t;
	bool found = false;

	spin_lock_irq(&s->tracked_lock);
	hlist_for_each_entry(t, &s->tracked[chunk % RB_TRACKED_BUCKETS], node) {
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
static void wait_for_tracked_reads(struct rb_snapshot *s, rb_chunk_t chunk)
{
	while (chunk_is_tracked(s, chunk))
		usleep_range(50, 100);
}

static void metadata_written(unsigned long error, void *context)
{
	struct rb_commit_ctx *c = context;

	c->write_error = error;
	complete(&c->written);
}

/*
 * Takes the copies that are done, in allocation order (a crash then
 * leaves no hole), and starts writing their metadata.  Copies done out of
 * order wait for the one before them, whose own commit takes them along.
 */
static void commit_begin(struct rb_snapshot *s, struct rb_commit_ctx *c)
{
	struct rb_pending *pe, *tmp;
	LIST_HEAD(batch);
	bool valid;
	int r = 0;

	c->snap = s;
	c->writing = false;
	INIT_LIST_HEAD(&c->done);

	mutex_lock(&s->commit_lock);
	mutex_lock(&s->lock);
	list_for_each_entry_safe(pe, tmp, &s->commit_queue, queue) {
		if (!pe->copied)
			break;
		list_move_tail(&pe->queue, &c->done);
		if (pe->error)
			invalidate_snapshot(s, "copy to COW failed");
		else
			list_add_tail(&pe->commit.list, &batch);
	}
	valid = s->valid;
	mutex_unlock(&s->lock);

	/* May write a full area: under commit_lock, not s->lock. */
	if (valid && !list_empty(&batch))
		r = s->store.ops->stage(&s->store, &batch);
	if (r < 0) {
		mutex_lock(&s->lock);
		invalidate_snapshot(s, "COW metadata write failed");
		mutex_unlock(&s->lock);
	} else if (r > 0) {
		c->writing = true;
	}
}

static void commit_write(struct rb_commit_ctx *c, bool data_flush)
{
	if (!c->writing)
		return;
	init_completion(&c->written);
	c->snap->store.ops->write_metadata(&c->snap->store, data_flush,
					   metadata_written, c);
}

static void commit_wait(struct rb_commit_ctx *c)
{
	struct rb_snapshot *s = c->snap;

	if (!c->writing)
		return;
	wait_for_completion(&c->written);
	if (c->write_error) {
		c->writing = false;
		mutex_lock(&s->lock);
		invalidate_snapshot(s, "COW metadata write failed");
		mutex_unlock(&s->lock);
	}
}

/* Waits for the metadata, then lets the I/O that waited for it go. */
static void commit_end(struct rb_commit_ctx *c)
{
	struct rb_snapshot *s = c->snap;
	struct rb_pending *pe, *tmp;
	unsigned int n = 0;

	commit_wait(c);

	list_for_each_entry_safe(pe, tmp, &c->done, queue) {
		struct bio_list origin_bios, snap_bios;
		struct bio *bio;
		bool ok;

		wait_for_tracked_reads(s, pe->e.old_chunk);

		mutex_lock(&s->lock);
		hlist_del(&pe->e.hash);
		ok = s->valid && !pe->error;
		if (ok) {
			pe->done->old_chunk = pe->e.old_chunk;
			pe->done->new_chunk = pe->e.new_chunk;
			table_insert(&s->complete, pe->done);
			pe->done = NULL;
		}
		origin_bios = pe->origin_bios;
		snap_bios = pe->snap_bios;
		mutex_unlock(&s->lock);

		while ((bio = bio_list_pop(&snap_bios))) {
			if (ok) {
				remap_to_cow(s, bio, pe->e.new_chunk);
				submit_bio_noacct(bio);
			} else {
				bio_io_error(bio);
			}
		}
		while ((bio = bio_list_pop(&origin_bios)))
			retry_origin_bio(bio);

		list_del(&pe->queue);
		free_pending(pe);
		n++;
	}
	mutex_unlock(&s->commit_lock);
	release_pending(s, n);
}

/* ---- rollback-snap ---- */

static int parse_chunk_size(const char *arg, unsigned int *chunk)
{
	if (kstrtouint(arg, 10, chunk))
		return -EINVAL;
	if (!*chunk || !is_power_of_2(*chunk) || *chunk > (INT_MAX >> SECTOR_SHIFT))
		return -EINVAL;
	return 0;
}

static void snapshot_free(struct rb_snapshot *s)
{
	if (s->store.ops)
		s->store.ops->destroy(&s->store);
	table_destroy(&s->pending, false);
	table_destroy(&s->complete, true);
	if (s->cow_dev)
		dm_put_device(s->ti, s->cow_dev);
	if (s->origin_dev)
		dm_put_device(s->ti, s->origin_dev);
	kfree(s);
}

/*
 * Construct a snapshot:
 *   rollback-snap <origin_dev> <cow_dev> <P|N> <chunk_sectors>
 *
 * origin_dev is the device rollback-origin sits on, cow_dev receives the
 * copied chunks; P keeps them across reboots in the upstream persistent
 * format, N does not.  chunk_sectors is a power of two; the chunk size
 * recorded in an existing persistent COW wins.
 */
static int snapshot_ctr_common(struct dm_target *ti, unsigned int argc,
			       char **argv, bool merge)
{
	struct rb_snapshot *s;
	unsigned int i;
	int r;

	if (argc != 4) {
		ti->error = "Invalid argument count";
		return -EINVAL;
	}

	s = kzalloc(sizeof(*s), GFP_KERNEL);
	if (!s) {
		ti->error = "Cannot allocate snapshot context";
		return -ENOMEM;
	}
	s->ti = ti;
	s->valid = true;
	s->merge = merge;
	init_waitqueue_head(&s->merge_wait);
	INIT_WORK(&s->merge_work, merge_work_fn);
	bio_list_init(&s->merge_waiting);
	mutex_init(&s->lock);
	mutex_init(&s->commit_lock);
	INIT_LIST_HEAD(&s->commit_queue);
	atomic_set(&s->pending_count, 0);
	INIT_WORK(&s->invalidate_work, invalidate_work_fn);
	spin_lock_init(&s->tracked_lock);
	for (i = 0; i < RB_TRACKED_BUCKETS; i++)
		INIT_HLIST_HEAD(&s->tracked[i]);

	if (!strcasecmp(argv[2], "P")) {
		s->store.ops = &rb_persistent_store_ops;
	} else if (!strcasecmp(argv[2], "N")) {
		s->store.ops = &rb_transient_store_ops;
	} else {
		ti->error = "Store type is not P or N";
		r = -EINVAL;
		goto bad_args;
	}

	if (parse_chunk_size(argv[3], &s->table_chunk)) {
		ti->error = "Invalid chunk size";
		r = -EINVAL;
		goto bad_args;
	}

	if (merge && !s->store.ops->prepare_merge) {
		ti->error = "Store does not support merging";
		r = -EINVAL;
		goto bad_args;
	}

	/* A merge writes the origin. */
	r = dm_get_device(ti, argv[0], merge ? dm_table_get_mode(ti->table) : FMODE_READ,
			  &s->origin_dev);
	if (r) {
		ti->error = "Cannot get origin device";
		goto bad_args;
	}
	r = dm_get_device(ti, argv[1], dm_table_get_mode(ti->table), &s->cow_dev);
	if (r) {
		ti->error = "Cannot get COW device";
		goto bad_args;
	}
	if (s->cow_dev->bdev == s->origin_dev->bdev) {
		ti->error = "COW device cannot be the origin device";
		r = -EINVAL;
		goto bad_args;
	}
	if (s->table_chunk % (bdev_logical_block_size(s->cow_dev->bdev) >> SECTOR_SHIFT) ||
	    s->table_chunk % (bdev_logical_block_size(s->origin_dev->bdev) >> SECTOR_SHIFT)) {
		ti->error = "Chunk size is not a multiple of the block size";
		r = -EINVAL;
		goto bad_args;
	}

	s->store.cow = s->cow_dev;
	s->store.chunk_sectors = s->table_chunk;
	s->store.chunk_shift = __ffs(s->table_chunk);
	r = s->store.ops->create(&s->store);
	if (r) {
		s->store.ops = NULL;
		ti->error = "Cannot create exception store";
		goto bad_args;
	}

	/* Sized for the table's chunk; a bigger on-disk chunk only helps. */
	r = table_init(&s->complete, bdev_nr_sectors(s->cow_dev->bdev),
		       s->store.chunk_shift);
	if (!r)
		r = table_init(&s->pending, bdev_nr_sectors(s->cow_dev->bdev) >> 4,
			       s->store.chunk_shift);
	if (r) {
		ti->error = "Cannot allocate exception tables";
		goto bad_args;
	}

	r = s->store.ops->read_metadata(&s->store, add_recorded_exception, s,
					&ti->error);
	if (r < 0)
		goto bad_args;
	if (r > 0) {
		DMWARN("%s: COW is marked invalid", s->cow_dev->name);
		s->valid = false;
		s->invalidate_queued = true;	/* already on disk */
	}

	if (s->store.chunk_sectors > ti->len) {
		ti->error = "Chunk size is larger than the device";
		r = -EINVAL;
		goto bad_args;
	}

	r = dm_set_target_max_io_len(ti, s->store.chunk_sectors);
	if (r) {
		ti->error = "Cannot set chunk-sized I/O";
		goto bad_args;
	}

	r = register_snapshot(s);
	if (r)
		goto bad_args;

	ti->private = s;
	ti->num_flush_bios = 1;
	ti->per_io_data_size = sizeof(struct rb_tracked);
	return 0;

bad_args:
	snapshot_free(s);
	return r;
}

static int snapshot_ctr(struct dm_target *ti, unsigned int argc, char **argv)
{
	return snapshot_ctr_common(ti, argc, argv, false);
}

static void snapshot_dtr(struct dm_target *ti)
{
	struct rb_snapshot *s = ti->private;
	struct rb_origin *o;

	o = unregister_snapshot(s);
	wait_var_event(&s->pending_count, !atomic_read(&s->pending_count));
	flush_work(&s->invalidate_work);
	if (o) {
		dm_kcopyd_client_destroy(o->kc);
		kfree(o);
	}
	snapshot_free(s);
}

static void track_read(struct rb_snapshot *s, struct rb_tracked *t,
		       rb_chunk_t chunk)
{
	t->chunk = chunk;
	spin_lock_irq(&s->tracked_lock);
	hlist_add_head(&t->node, &s->tracked[chunk % RB_TRACKED_BUCKETS]);
	spin_unlock_irq(&s->tracked_lock);
}

static int snapshot_map(struct dm_target *ti, struct bio *bio)
{
	struct rb_snapshot *s = ti->private;
	struct rb_tracked *t = dm_per_bio_data(bio, sizeof(*t));
	struct rb_exception *e;
	struct rb_pending *pe = NULL;
	rb_chunk_t chunk;
	int r = DM_MAPIO_REMAPPED;

	INIT_HLIST_NODE(&t->node);

	if (bio->bi_opf & REQ_PREFLUSH) {
		bio_set_dev(bio, s->cow_dev->bdev);
		return DM_MAPIO_REMAPPED;
	}

	chunk = dm_target_offset(ti, bio->bi_iter.bi_sector) >> s->store.chunk_shift;

	mutex_lock(&s->lock);
	if (!s->valid || s->handed_over) {
		r = DM_MAPIO_KILL;
		goto out_unlock;
	}

	e = table_lookup(&s->complete, chunk);
	if (e) {
		remap_to_cow(s, bio, e->new_chunk);
		goto out_unlock;
	}

	if (bio_data_dir(bio) == WRITE) {
		e = table_lookup(&s->pending, chunk);
		if (e) {
			bio_list_add(&container_of(e, struct rb_pending, e)->snap_bios, bio);
		} else {
			pe = new_pending(s, chunk);
			if (!pe) {
				r = DM_MAPIO_KILL;
				goto out_unlock;
			}
			bio_list_add(&pe->snap_bios, bio);
		}
		r = DM_MAPIO_SUBMITTED;
		goto out_unlock;
	}

	/* Not copied (or still being copied): the origin still holds it. */
	track_read(s, t, chunk);
	bio_set_dev(bio, s->origin_dev->bdev);
	bio->bi_iter.bi_sector = dm_target_offset(ti, bio->bi_iter.bi_sector);

out_unlock:
	mutex_unlock(&s->lock);
	if (pe)
		start_copy(s->origin, pe);
	return r;
}

static int snapshot_end_io(struct dm_target *ti, struct bio *bio,
			   blk_status_t *error)
{
	struct rb_snapshot *s = ti->private;
	struct rb_tracked *t = dm_per_bio_data(bio, sizeof(*t));
	unsigned long flags;

	if (!hlist_unhashed(&t->node)) {
		spin_lock_irqsave(&s->tracked_lock, flags);
		hlist_del_init(&t->node);
		spin_unlock_irqrestore(&s->tracked_lock, flags);
	}
	return DM_ENDIO_DONE;
}

static void snapshot_resume(struct dm_target *ti)
{
	struct rb_snapshot *s = ti->private;

	/* Stays active while suspended: the origin must keep copying. */
	mutex_lock(&s->lock);
	s->active = true;
	mutex_unlock(&s->lock);
}

static void snapshot_status(struct dm_target *ti, status_type_t type,
			    unsigned int status_flags, char *result,
			    unsigned int maxlen)
{
	struct rb_snapshot *s = ti->private;
	sector_t total, allocated, metadata;
	unsigned int sz = 0;

	switch (type) {
	case STATUSTYPE_INFO:
		mutex_lock(&s->lock);
		if (!s->valid) {
			DMEMIT("Invalid");
		} else {
			s->store.ops->usage(&s->store, &total, &allocated, &metadata);
			DMEMIT("%llu/%llu %llu", (unsigned long long)allocated,
			       (unsigned long long)total,
			       (unsigned long long)metadata);
		}
		mutex_unlock(&s->lock);
		break;
	case STATUSTYPE_TABLE:
		DMEMIT("%s %s %c %u", s->origin_dev->name, s->cow_dev->name,
		       s->store.ops->type, s->table_chunk);
		break;
	case STATUSTYPE_IMA:
		DMEMIT_TARGET_NAME_VERSION(ti->type);
		DMEMIT(",snap_origin_name=%s,snap_cow_name=%s,snap_valid=%c;",
		       s->origin_dev->name, s->cow_dev->name, s->valid ? 'y' : 'n');
		break;
	}
}

static int snapshot_iterate_devices(struct dm_target *ti,
				    iterate_devices_callout_fn fn, void *data)
{
	struct rb_snapshot *s = ti->private;
	int r;

	r = fn(ti, s->origin_dev, 0, ti->len, data);
	if (!r)
		r = fn(ti, s->cow_dev, 0, bdev_nr_sectors(s->cow_dev->bdev), data);
	return r;
}

/* ---- rollback-merge ---- */

static bool chunk_in_batch(struct rb_snapshot *s, rb_chunk_t chunk)
{
	unsigned int i;

	for (i = 0; i < s->batch_n; i++)
		if (s->batch[i].old_chunk == chunk)
			return true;
	return false;
}

/*
 * Where a bio to the merging device goes: a chunk being merged right now
 * waits for the merge of its batch; a chunk not merged yet lives in the
 * COW; everything else (and all I/O once the snapshot is invalid) is the
 * origin, whose writes first copy into the other snapshots.
 */
static int merge_map_bio(struct rb_snapshot *s, struct bio *bio)
{
	struct rb_tracked *t = dm_per_bio_data(bio, sizeof(*t));
	sector_t offset = dm_target_offset(s->ti, bio->bi_iter.bi_sector);
	rb_chunk_t chunk = offset >> s->store.chunk_shift;
	struct rb_exception *e;
	int r = DM_MAPIO_REMAPPED;

	mutex_lock(&s->lock);
	e = s->valid ? table_lookup(&s->complete, chunk) : NULL;
	if (e && chunk_in_batch(s, chunk)) {
		/*
		 * The COW copy stays as it is until the merge is committed and
		 * is never reused: reads need not wait, writes must.
		 */
		if (bio_data_dir(bio) == READ) {
			remap_to_cow(s, bio, e->new_chunk);
			mutex_unlock(&s->lock);
			return DM_MAPIO_REMAPPED;
		}
		bio_list_add(&s->merge_waiting, bio);
		mutex_unlock(&s->lock);
		return DM_MAPIO_SUBMITTED;
	}
	if (e) {
		/* Tracked under the lock, so a batch taking the chunk waits for it. */
		track_read(s, t, chunk);
		remap_to_cow(s, bio, e->new_chunk);
		mutex_unlock(&s->lock);
		return DM_MAPIO_REMAPPED;
	}
	mutex_unlock(&s->lock);

	bio_set_dev(bio, s->origin_dev->bdev);
	bio->bi_iter.bi_sector = offset;
	if (bio_data_dir(bio) == WRITE && bio_sectors(bio)) {
		down_read(&rb_origins_lock);
		r = origin_write(s->origin, offset, bio_sectors(bio), bio);
		up_read(&rb_origins_lock);
	}
	return r;
}

static int merge_map(struct dm_target *ti, struct bio *bio)
{
	struct rb_snapshot *s = ti->private;
	struct rb_tracked *t = dm_per_bio_data(bio, sizeof(*t));

	INIT_HLIST_NODE(&t->node);
	if (bio->bi_opf & REQ_PREFLUSH) {
		/* One flush for each device that holds data of this device. */
		bio_set_dev(bio, dm_bio_get_target_bio_nr(bio) ?
			    s->cow_dev->bdev : s->origin_dev->bdev);
		return DM_MAPIO_REMAPPED;
	}
	return merge_map_bio(s, bio);
}

/* True once every other snapshot has its own copy of the origin range. */
static bool others_have_copied(struct rb_snapshot *s, sector_t sector,
			       sector_t count)
{
	struct rb_snapshot *t;
	bool done = true;

	list_for_each_entry(t, &s->origin->snapshots, origin_list) {
		rb_chunk_t chunk = sector >> t->store.chunk_shift;
		rb_chunk_t last = (sector + count - 1) >> t->store.chunk_shift;

		if (t == s || t->merge || t->handed_over)
			continue;
		mutex_lock(&t->lock);
		for (; chunk <= last && t->valid && t->active && done; chunk++)
			if (!table_lookup(&t->complete, chunk))
				done = false;
		mutex_unlock(&t->lock);
		if (!done)
			break;
	}
	return done;
}

static void merge_copy_done(int read_err, unsigned long write_err, void *context)
{
	struct rb_snapshot *s = context;

	if (read_err || write_err)
		s->merge_copy_error = -EIO;
	if (atomic_dec_and_test(&s->merge_copies))
		complete(&s->merge_copied);
}

/*
 * Copies the batch from the COW into the origin, all copies in flight at
 * once; a run of chunks consecutive on both devices is one copy.  The
 * batch lists the last exception first, so a run counts down.
 */
static int merge_copy_batch(struct rb_snapshot *s, unsigned int n)
{
	sector_t dev_size = bdev_nr_sectors(s->origin_dev->bdev);
	struct rb_merge_entry *b = s->batch;
	unsigned int i, run;

	s->merge_copy_error = 0;
	init_completion(&s->merge_copied);
	atomic_set(&s->merge_copies, 1);
	for (i = 0; i < n; i += run) {
		struct dm_io_region src, dest;

		run = 1;
		if (b[i].old_chunk == ~0ULL)
			continue;
		while (i + run < n && b[i + run].old_chunk != ~0ULL &&
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
		atomic_inc(&s->merge_copies);
		dm_kcopyd_copy(s->origin->kc, &src, 1, &dest, 0, merge_copy_done, s);
	}
	merge_copy_done(0, 0, s);
	wait_for_completion(&s->merge_copied);
	return s->merge_copy_error;
}

static void merge_throttle(struct rb_snapshot *s, unsigned int n, u64 start)
{
	u64 kib = ((u64)n * s->store.chunk_sectors) >> 1;
	u64 want_ns, took_ns = ktime_get_ns() - start;
	unsigned int rate = READ_ONCE(s->throttle_kbs);

	if (!rate)
		return;
	want_ns = div_u64(kib * NSEC_PER_SEC, rate);
	if (want_ns <= took_ns)
		return;
	/* A slow rate must not hold up a suspend or removal, nor a new rate. */
	wait_event_timeout(s->merge_wait,
			   READ_ONCE(s->merge_stop) || READ_ONCE(s->throttle_kbs) != rate,
			   nsecs_to_jiffies(want_ns - took_ns));
}

static void merge_stopped(struct rb_snapshot *s, enum rb_merge_state state)
{
	mutex_lock(&s->lock);
	s->merge_state = state;
	s->merge_running = false;
	mutex_unlock(&s->lock);
	wake_up_all(&s->merge_wait);
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
	struct rb_snapshot *s = container_of(work, struct rb_snapshot, merge_work);

	for (;;) {
		struct bio_list waiting;
		struct bio *bio;
		unsigned int i;
		u64 start = ktime_get_ns();
		int n, r;

		if (READ_ONCE(s->merge_stop) || !READ_ONCE(s->valid)) {
			merge_stopped(s, RB_MERGE_STOPPED);
			return;
		}
		/* Only this worker uses the store of a merge; map uses the table. */
		n = s->store.ops->prepare_merge(&s->store, s->batch, RB_MERGE_BATCH);
		if (n <= 0) {
			if (n < 0)
				DMERR("%s: merge failed: cannot read COW metadata", s->cow_dev->name);
			merge_stopped(s, n < 0 ? RB_MERGE_FAILED : RB_MERGE_STOPPED);
			return;
		}
		mutex_lock(&s->lock);
		/*
		 * Entries superseded by a later one for the same chunk only
		 * need removing; the table says which copy is current.
		 */
		for (i = 0; i < n; i++) {
			struct rb_exception *e = table_lookup(&s->complete, s->batch[i].old_chunk);

			if (!e || e->new_chunk != s->batch[i].new_chunk)
				s->batch[i].old_chunk = ~0ULL;
		}
		s->batch_n = n;
		mutex_unlock(&s->lock);

		for (i = 0; i < n; i++)
			if (s->batch[i].old_chunk != ~0ULL)
				wait_for_tracked_reads(s, s->batch[i].old_chunk);

		down_read(&rb_origins_lock);
		for (i = 0; i < n; i++) {
			sector_t sector = s->batch[i].old_chunk << s->store.chunk_shift;

			if (s->batch[i].old_chunk != ~0ULL)
				origin_write(s->origin, sector, s->store.chunk_sectors, NULL);
		}
		for (i = 0; i < n; i++) {
			sector_t sector = s->batch[i].old_chunk << s->store.chunk_shift;

			while (s->batch[i].old_chunk != ~0ULL &&
			       !others_have_copied(s, sector, s->store.chunk_sectors))
				usleep_range(100, 200);
		}
		up_read(&rb_origins_lock);

		r = merge_copy_batch(s, n);
		if (!r)
			r = blkdev_issue_flush(s->origin_dev->bdev);
		if (!r)
			r = s->store.ops->commit_merge(&s->store, n);

		mutex_lock(&s->lock);
		if (!r) {
			for (i = 0; i < n; i++) {
				struct rb_exception *e;

				if (s->batch[i].old_chunk == ~0ULL)
					continue;
				e = table_lookup(&s->complete, s->batch[i].old_chunk);
				hlist_del(&e->hash);
				kmem_cache_free(rb_exception_cache, e);
				s->exception_count--;
			}
		}
		s->batch_n = 0;
		waiting = s->merge_waiting;
		bio_list_init(&s->merge_waiting);
		mutex_unlock(&s->lock);

		while ((bio = bio_list_pop(&waiting)))
			if (merge_map_bio(s, bio) == DM_MAPIO_REMAPPED)
				submit_bio_noacct(bio);

		if (r) {
			DMERR("%s: merge failed: %d", s->cow_dev->name, r);
			merge_stopped(s, RB_MERGE_FAILED);
			return;
		}
		merge_throttle(s, n, start);
		cond_resched();
	}
}

static void merge_start(struct rb_snapshot *s)
{
	mutex_lock(&s->lock);
	s->merge_stop = false;
	if (!s->merge_running && s->merge_state != RB_MERGE_FAILED && s->valid) {
		s->merge_running = true;
		s->merge_state = RB_MERGE_RUNNING;
		queue_work(rb_wq, &s->merge_work);
	}
	mutex_unlock(&s->lock);
}

/*
 * Stops after the batch in flight is committed.  The worker touches s after
 * it clears merge_running (the wake-up): flush it before s can be freed.
 */
static void merge_stop(struct rb_snapshot *s)
{
	mutex_lock(&s->lock);
	s->merge_stop = true;
	mutex_unlock(&s->lock);
	wake_up_all(&s->merge_wait);
	wait_event(s->merge_wait, !READ_ONCE(s->merge_running));
	flush_work(&s->merge_work);
}

/*
 * Construct a merge, in place of the origin's table:
 *   rollback-merge <origin_dev> <cow_dev> P <chunk_sectors>
 *
 * As rollback-snap.  If a rollback-snap uses cow_dev, the merge takes its
 * COW over when it resumes; that snapshot must be suspended then, and
 * fails its I/O from then on.
 */
static int merge_ctr(struct dm_target *ti, unsigned int argc, char **argv)
{
	struct rb_snapshot *s;
	int r;

	r = snapshot_ctr_common(ti, argc, argv, true);
	if (r)
		return r;
	s = ti->private;
	s->batch = kcalloc(RB_MERGE_BATCH, sizeof(*s->batch), GFP_KERNEL);
	if (!s->batch) {
		snapshot_dtr(ti);
		ti->error = "Cannot allocate merge batch";
		return -ENOMEM;
	}
	ti->num_flush_bios = 2;
	return 0;
}

static void merge_dtr(struct dm_target *ti)
{
	struct rb_snapshot *s = ti->private;

	merge_stop(s);
	kfree(s->batch);
	snapshot_dtr(ti);
}

/* Takes the exceptions over from the suspended snapshot that had the COW. */
static int merge_preresume(struct dm_target *ti)
{
	struct rb_snapshot *s = ti->private, *src;
	int r = 0;

	down_read(&rb_origins_lock);
	src = s->handover_src;
	if (src && !dm_suspended(src->ti)) {
		DMERR("%s: the snapshot handing over its COW must be suspended",
		      s->cow_dev->name);
		r = -EINVAL;
	} else if (src) {
		mutex_lock(&src->lock);
		src->handed_over = true;
		mutex_unlock(&src->lock);
		s->handover_src = NULL;
	}
	up_read(&rb_origins_lock);
	if (r || !src)
		return r;

	/* What the snapshot committed until it stopped is on disk now. */
	table_destroy(&s->complete, true);
	s->exception_count = 0;
	s->store.ops->destroy(&s->store);
	r = s->store.ops->create(&s->store);
	if (!r)
		r = table_init(&s->complete, bdev_nr_sectors(s->cow_dev->bdev),
			       s->store.chunk_shift);
	if (!r) {
		char *error = NULL;

		r = s->store.ops->read_metadata(&s->store, add_recorded_exception, s, &error);
		if (r > 0) {
			s->valid = false;
			r = 0;
		} else if (r) {
			DMERR("%s: handover: %s", s->cow_dev->name, error ?: "cannot read COW");
		}
	}
	return r;
}

static void merge_resume(struct dm_target *ti)
{
	merge_start(ti->private);
}

static void merge_presuspend(struct dm_target *ti)
{
	merge_stop(ti->private);
}

static void merge_status(struct dm_target *ti, status_type_t type,
			 unsigned int status_flags, char *result,
			 unsigned int maxlen)
{
	static const char *const states[] = {
		[RB_MERGE_STOPPED] = "stopped",
		[RB_MERGE_RUNNING] = "running",
		[RB_MERGE_FAILED] = "failed",
	};
	struct rb_snapshot *s = ti->private;
	sector_t total, allocated, metadata;
	unsigned int sz = 0;

	if (type != STATUSTYPE_INFO) {
		snapshot_status(ti, type, status_flags, result, maxlen);
		return;
	}
	mutex_lock(&s->lock);
	if (!s->valid) {
		DMEMIT("Invalid");
	} else if (s->merge_state == RB_MERGE_FAILED) {
		DMEMIT("Merge failed");
	} else {
		s->store.ops->usage(&s->store, &total, &allocated, &metadata);
		DMEMIT("%llu/%llu %llu %llu %s", (unsigned long long)allocated,
		       (unsigned long long)total, (unsigned long long)metadata,
		       (unsigned long long)s->exception_count, states[s->merge_state]);
	}
	mutex_unlock(&s->lock);
}

static int merge_message(struct dm_target *ti, unsigned int argc, char **argv,
			 char *result, unsigned int maxlen)
{
	struct rb_snapshot *s = ti->private;
	unsigned int rate;

	if (argc == 2 && !strcasecmp(argv[0], "merge_throttle")) {
		if (kstrtouint(argv[1], 10, &rate)) {
			DMERR("merge_throttle takes KiB/s, 0 for unlimited");
			return -EINVAL;
		}
		WRITE_ONCE(s->throttle_kbs, rate);
		wake_up_all(&s->merge_wait);
		return 0;
	}
	DMERR("Unrecognised message '%s'", argc ? argv[0] : "");
	return -EINVAL;
}

/* ---- rollback-origin ---- */

/*
 * Construct an origin:
 *   rollback-origin <dev>
 *
 * dev is the device whose snapshots are rollback-snap targets.
 */
static int origin_ctr(struct dm_target *ti, unsigned int argc, char **argv)
{
	struct rb_origin_ctx *oc;
	int r;

	if (argc != 1) {
		ti->error = "Invalid argument count";
		return -EINVAL;
	}

	oc = kzalloc(sizeof(*oc), GFP_KERNEL);
	if (!oc) {
		ti->error = "Cannot allocate origin context";
		return -ENOMEM;
	}

	r = dm_get_device(ti, argv[0], dm_table_get_mode(ti->table), &oc->dev);
	if (r) {
		ti->error = "Cannot get origin device";
		goto bad_dev;
	}

	ti->private = oc;
	ti->num_flush_bios = 1;
	return 0;

bad_dev:
	kfree(oc);
	return r;
}

static void origin_dtr(struct dm_target *ti)
{
	struct rb_origin_ctx *oc = ti->private;

	dm_put_device(ti, oc->dev);
	kfree(oc);
}

static int origin_map(struct dm_target *ti, struct bio *bio)
{
	struct rb_origin_ctx *oc = ti->private;
	struct rb_origin *o;
	sector_t sector;
	int r = DM_MAPIO_REMAPPED;

	bio_set_dev(bio, oc->dev->bdev);
	bio->bi_iter.bi_sector = dm_target_offset(ti, bio->bi_iter.bi_sector);

	if (bio->bi_opf & REQ_PREFLUSH || bio_data_dir(bio) != WRITE ||
	    !bio_sectors(bio))
		return DM_MAPIO_REMAPPED;

	sector = bio->bi_iter.bi_sector;
	down_read(&rb_origins_lock);
	o = find_origin(oc->dev->bdev->bd_dev);
	if (o && o->min_chunk) {
		unsigned int room = o->min_chunk - (sector & (o->min_chunk - 1));

		/* One chunk per bio keeps each write waiting on one copy. */
		if (bio_sectors(bio) > room)
			dm_accept_partial_bio(bio, room);
		r = origin_write(o, sector, bio_sectors(bio), bio);
	}
	up_read(&rb_origins_lock);
	return r;
}

static void origin_status(struct dm_target *ti, status_type_t type,
			  unsigned int status_flags, char *result,
			  unsigned int maxlen)
{
	struct rb_origin_ctx *oc = ti->private;
	unsigned int sz = 0;

	switch (type) {
	case STATUSTYPE_INFO:
		result[0] = '\0';
		break;
	case STATUSTYPE_TABLE:
		DMEMIT("%s", oc->dev->name);
		break;
	case STATUSTYPE_IMA:
		DMEMIT_TARGET_NAME_VERSION(ti->type);
		DMEMIT(",origin_name=%s;", oc->dev->name);
		break;
	}
}

static int origin_iterate_devices(struct dm_target *ti,
				  iterate_devices_callout_fn fn, void *data)
{
	struct rb_origin_ctx *oc = ti->private;

	return fn(ti, oc->dev, 0, ti->len, data);
}

static struct target_type origin_target = {
	.name = "rollback-origin",
	.version = {1, 1, 0},
	.module = THIS_MODULE,
	.ctr = origin_ctr,
	.dtr = origin_dtr,
	.map = origin_map,
	.status = origin_status,
	.iterate_devices = origin_iterate_devices,
};

static struct target_type snapshot_target = {
	.name = "rollback-snap",
	.version = {1, 1, 0},
	.module = THIS_MODULE,
	.ctr = snapshot_ctr,
	.dtr = snapshot_dtr,
	.map = snapshot_map,
	.end_io = snapshot_end_io,
	.resume = snapshot_resume,
	.status = snapshot_status,
	.iterate_devices = snapshot_iterate_devices,
};

static struct target_type merge_target = {
	.name = "rollback-merge",
	.version = {1, 1, 0},
	.module = THIS_MODULE,
	.ctr = merge_ctr,
	.dtr = merge_dtr,
	.map = merge_map,
	.end_io = snapshot_end_io,
	.preresume = merge_preresume,
	.resume = merge_resume,
	.presuspend = merge_presuspend,
	.status = merge_status,
	.message = merge_message,
	.iterate_devices = snapshot_iterate_devices,
};

static int __init dm_rollback_init(void)
{
	int r = -ENOMEM;

	rb_exception_cache = KMEM_CACHE(rb_exception, 0);
	if (!rb_exception_cache)
		goto bad_exception_cache;
	rb_pending_cache = KMEM_CACHE(rb_pending, 0);
	if (!rb_pending_cache)
		goto bad_pending_cache;
	rb_pending_pool = mempool_create_slab_pool(RB_MIN_PENDING, rb_pending_cache);
	if (!rb_pending_pool)
		goto bad_pending_pool;
	rb_wq = alloc_workqueue("dm-rollback", WQ_MEM_RECLAIM, 0);
	if (!rb_wq)
		goto bad_wq;

	r = dm_register_target(&origin_target);
	if (r)
		goto bad_origin_target;
	r = dm_register_target(&snapshot_target);
	if (r)
		goto bad_snapshot_target;
	r = dm_register_target(&merge_target);
	if (r)
		goto bad_merge_target;
	return 0;

bad_merge_target:
	dm_unregister_target(&snapshot_target);
bad_snapshot_target:
	dm_unregister_target(&origin_target);
bad_origin_target:
	destroy_workqueue(rb_wq);
bad_wq:
	mempool_destroy(rb_pending_pool);
bad_pending_pool:
	kmem_cache_destroy(rb_pending_cache);
bad_pending_cache:
	kmem_cache_destroy(rb_exception_cache);
bad_exception_cache:
	return r;
}

static void __exit dm_rollback_exit(void)
{
	dm_unregister_target(&merge_target);
	dm_unregister_target(&snapshot_target);
	dm_unregister_target(&origin_target);
	destroy_workqueue(rb_wq);
	mempool_destroy(rb_pending_pool);
	kmem_cache_destroy(rb_pending_cache);
	kmem_cache_destroy(rb_exception_cache);
}

module_init(dm_rollback_init);
module_exit(dm_rollback_exit);

MODULE_DESCRIPTION(DM_NAME " copy-on-write snapshots that can be rolled back");
MODULE_LICENSE("GPL");
