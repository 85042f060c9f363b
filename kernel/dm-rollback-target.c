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
 */

#include "dm-rollback.h"

#include <linux/bio.h>
#include <linux/delay.h>
#include <linux/dm-kcopyd.h>
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

	/* Snapshot reads sent to the origin and still in flight. */
	spinlock_t tracked_lock;
	struct hlist_head tracked[RB_TRACKED_BUCKETS];
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
			if (other->cow_dev->bdev->bd_dev == s->cow_dev->bdev->bd_dev) {
				up_write(&rb_origins_lock);
				kfree(fresh);
				s->ti->error = "COW device is already in use";
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

	down_write(&rb_origins_lock);
	list_del(&s->origin_list);
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
	if (!s->valid)
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
static int snapshot_ctr(struct dm_target *ti, unsigned int argc, char **argv)
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

	r = dm_get_device(ti, argv[0], FMODE_READ, &s->origin_dev);
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
	if (!s->valid) {
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
	.version = {1, 0, 0},
	.module = THIS_MODULE,
	.ctr = origin_ctr,
	.dtr = origin_dtr,
	.map = origin_map,
	.status = origin_status,
	.iterate_devices = origin_iterate_devices,
};

static struct target_type snapshot_target = {
	.name = "rollback-snap",
	.version = {1, 0, 0},
	.module = THIS_MODULE,
	.ctr = snapshot_ctr,
	.dtr = snapshot_dtr,
	.map = snapshot_map,
	.end_io = snapshot_end_io,
	.resume = snapshot_resume,
	.status = snapshot_status,
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
	return 0;

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
