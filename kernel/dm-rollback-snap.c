// SPDX-License-Identifier: GPL-2.0
/*
 * dm-rollback: the snapshot and origin targets.
 *
 * rollback-snap shows the origin as it was when the snapshot became
 * active; rollback-origin sits on the origin and copies a chunk into the
 * snapshots that still share it before a write changes it.  A COW taken
 * over by a merge (dm-rollback-merge.c) fails its I/O from then on.
 */

#include "dm-rollback.h"

#include <linux/blkdev.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/wait_bit.h>

#define DM_MSG_PREFIX "rollback"

/* ---- rollback-snap ---- */

static int parse_chunk_size(const char *arg, unsigned int *chunk)
{
	if (kstrtouint(arg, 10, chunk))
		return -EINVAL;
	if (!*chunk || !is_power_of_2(*chunk) || *chunk > (INT_MAX >> SECTOR_SHIFT))
		return -EINVAL;
	return 0;
}

static void snapshot_free(struct dmrb_snapshot *s)
{
	if (s->store.ops)
		s->store.ops->destroy(&s->store);
	dmrb_table_destroy(&s->pending, false);
	dmrb_table_destroy(&s->complete, true);
	mempool_destroy(s->pending_pool);
	if (s->cow_dev)
		dm_put_device(s->ti, s->cow_dev);
	if (s->origin_dev)
		dm_put_device(s->ti, s->origin_dev);
	kfree(s);
}

#define DMRB_MAX_NO_SPACE_TIMEOUT_MS	3600000

/*
 * The optional features after the four upstream arguments, counted in
 * words as upstream counts its feature arguments.
 */
static int parse_features(struct dmrb_snapshot *s, struct dm_arg_set *as,
			  char **error)
{
	unsigned int count;
	const char *name;

	if (kstrtouint(dm_shift_arg(as), 10, &count) || count != as->argc) {
		*error = "Invalid argument count";
		return -EINVAL;
	}

	while (as->argc) {
		name = dm_shift_arg(as);
		if (!strcasecmp(name, "low_water_mark")) {
			if (s->features & DMRB_FEATURE_LOW_WATER) {
				*error = "Feature given twice";
				return -EINVAL;
			}
			if (!as->argc || kstrtou64(dm_shift_arg(as), 10, &s->low_water_mark)) {
				*error = "Invalid low_water_mark";
				return -EINVAL;
			}
			s->features |= DMRB_FEATURE_LOW_WATER;
		} else if (!strcasecmp(name, "no_space")) {
			const char *policy = as->argc ? dm_shift_arg(as) : "";

			if (s->features & DMRB_FEATURE_NO_SPACE) {
				*error = "Feature given twice";
				return -EINVAL;
			}
			if (!strcasecmp(policy, "queue")) {
				if (!as->argc ||
				    kstrtouint(dm_shift_arg(as), 10, &s->no_space_timeout_ms) ||
				    !s->no_space_timeout_ms ||
				    s->no_space_timeout_ms > DMRB_MAX_NO_SPACE_TIMEOUT_MS) {
					*error = "Invalid no_space queue timeout";
					return -EINVAL;
				}
			} else if (strcasecmp(policy, "error")) {
				*error = "Invalid no_space policy";
				return -EINVAL;
			}
			s->no_space_first = !(s->features & DMRB_FEATURE_LOW_WATER);
			s->features |= DMRB_FEATURE_NO_SPACE;
		} else {
			*error = "Unrecognised feature";
			return -EINVAL;
		}
	}
	return 0;
}

/*
 * Construct a snapshot:
 *   rollback-snap <origin_dev> <cow_dev> <P|N> <chunk_sectors>
 *                 [<#feature args> [<feature arg>]*]
 *
 * origin_dev is the device rollback-origin sits on, cow_dev receives the
 * copied chunks; P keeps them across reboots in the upstream persistent
 * format, N does not.  chunk_sectors is a power of two; the chunk size
 * recorded in an existing persistent COW wins.
 *
 * Features, each at most once:
 *   low_water_mark <chunks>
 *	raise a table event when the free chunks of the COW fall to
 *	<chunks>; again after the COW has grown above it
 *   no_space error
 *	a write that needs a chunk of a full COW invalidates the
 *	snapshot, as upstream (the default)
 *   no_space queue <timeout_ms>
 *	such writes wait, in order, for the COW device to grow, at most
 *	<timeout_ms> from the first of them, then go on or invalidate
 * A full COW raises a table event too.
 */
int dmrb_snapshot_ctr(struct dm_target *ti, unsigned int argc, char **argv,
		      struct dmrb_merge *merge)
{
	struct dm_arg_set as;
	struct dmrb_snapshot *s;
	int r;

	if (argc < 4) {
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
	r = dmrb_snapshot_init(s);
	if (r) {
		ti->error = "Cannot allocate pending exceptions";
		goto bad_args;
	}

	if (!strcasecmp(argv[2], "P")) {
		s->store.ops = &dmrb_persistent_store_ops;
	} else if (!strcasecmp(argv[2], "N")) {
		s->store.ops = &dmrb_transient_store_ops;
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

	if (argc > 4) {
		as.argc = argc - 4;
		as.argv = argv + 4;
		r = parse_features(s, &as, &ti->error);
		if (r)
			goto bad_args;
	}

	if (merge && !s->store.ops->prepare_merge) {
		ti->error = "Store does not support merging";
		r = -EINVAL;
		goto bad_args;
	}

	/*
	 * The COW first, in the table's mode: had the origin been got
	 * read-only first, a COW on the same device would upgrade the
	 * table's entry for it, freeing the dm_dev the origin holds.  A
	 * mode already held is never upgraded.
	 */
	r = dm_get_device(ti, argv[1], dm_table_get_mode(ti->table), &s->cow_dev);
	if (r) {
		ti->error = "Cannot get COW device";
		goto bad_args;
	}
	/* A merge writes the origin. */
	r = dm_get_device(ti, argv[0], merge ? dm_table_get_mode(ti->table) : FMODE_READ,
			  &s->origin_dev);
	if (r) {
		ti->error = "Cannot get origin device";
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
	r = dmrb_table_init(&s->complete, bdev_nr_sectors(s->cow_dev->bdev),
		       s->store.chunk_shift);
	if (!r)
		r = dmrb_table_init(&s->pending, bdev_nr_sectors(s->cow_dev->bdev) >> 4,
			       s->store.chunk_shift);
	if (r) {
		ti->error = "Cannot allocate exception tables";
		goto bad_args;
	}

	r = s->store.ops->read_metadata(&s->store, dmrb_add_recorded_exception, s,
					&ti->error);
	if (r < 0)
		goto bad_args;
	if (r > 0) {
		DMWARN("%s: COW is marked invalid", s->cow_dev->name);
		s->valid = false;
		/* Already on disk. */
		s->invalidate_queued = true;
		s->invalidate_written = true;
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

	r = dmrb_register_snapshot(s);
	if (r)
		goto bad_args;

	ti->private = s;
	ti->num_flush_bios = 1;
	ti->per_io_data_size = sizeof(struct dmrb_tracked);
	return 0;

bad_args:
	snapshot_free(s);
	return r;
}

static int snap_ctr(struct dm_target *ti, unsigned int argc, char **argv)
{
	return dmrb_snapshot_ctr(ti, argc, argv, NULL);
}

void dmrb_snapshot_dtr(struct dm_target *ti)
{
	struct dmrb_snapshot *s = ti->private;

	dmrb_unregister_snapshot(s);
	snapshot_free(s);
}

/* may_wait: false for a write sent again by a worker, which must not sleep here. */
int dmrb_snapshot_map_bio(struct dmrb_snapshot *s, struct bio *bio, bool may_wait)
{
	struct dm_target *ti = s->ti;
	struct dmrb_tracked *t = dm_per_bio_data(bio, sizeof(*t));
	struct dmrb_exception *e;
	struct dmrb_pending *pe = NULL, *copying, *spare = NULL, *full = NULL;
	sector_t offset;
	dmrb_chunk_t chunk;
	unsigned int seq;
	int r = DM_MAPIO_REMAPPED;

	INIT_HLIST_NODE(&t->node);

	if (bio->bi_opf & REQ_PREFLUSH) {
		bio_set_dev(bio, s->cow_dev->bdev);
		return DM_MAPIO_REMAPPED;
	}

	offset = dm_target_offset(ti, bio->bi_iter.bi_sector);
	chunk = offset >> s->store.chunk_shift;

again:
	mutex_lock(&s->lock);
	if (!s->valid || s->handed_over) {
		r = DM_MAPIO_KILL;
		goto out_unlock;
	}

	e = dmrb_table_lookup(&s->complete, chunk);
	if (e) {
		dmrb_remap_to_cow(s, bio, e->new_chunk);
		goto out_unlock;
	}

	e = dmrb_table_lookup(&s->pending, chunk);
	copying = e ? container_of(e, struct dmrb_pending, e) : NULL;

	if (bio_data_dir(bio) == WRITE) {
		if (copying) {
			bio_list_add(&copying->snap_bios, bio);
		} else {
			if (may_wait && !dmrb_copy_room(s->origin, &seq)) {
				mutex_unlock(&s->lock);
				dmrb_wait_for_copies(seq);
				goto again;
			}
			if (!spare)
				spare = dmrb_alloc_pending(s, GFP_NOWAIT);
			if (!spare) {
				/* The reserve fills as copies commit, which takes s->lock. */
				mutex_unlock(&s->lock);
				spare = dmrb_alloc_pending(s, GFP_NOIO);
				if (spare)
					goto again;
				mutex_lock(&s->lock);
				dmrb_invalidate(s, "out of memory");
				r = DM_MAPIO_KILL;
				goto out_unlock;
			}
			pe = dmrb_new_pending(s, chunk, spare, bio);
			if (IS_ERR(pe)) {
				/* Waiting for the COW to grow, or invalidated. */
				r = PTR_ERR(pe) == -EAGAIN ? DM_MAPIO_SUBMITTED : DM_MAPIO_KILL;
				pe = NULL;
				goto out_unlock;
			}
			spare = NULL;
			if (bio_op(bio) == REQ_OP_WRITE &&
			    bio_sectors(bio) == s->store.chunk_sectors &&
			    !(offset & (s->store.chunk_sectors - 1))) {
				dmrb_remap_to_cow(s, bio, pe->e.new_chunk);
				full = pe;
				pe = NULL;
			} else {
				bio_list_add(&pe->snap_bios, bio);
			}
		}
		r = DM_MAPIO_SUBMITTED;
		goto out_unlock;
	}

	/*
	 * Copied, not yet committed: the COW has the chunk already.  The
	 * commit waits only for the origin reads tracked before the copy was
	 * done, then releases the origin write; a read sent to the origin
	 * after that wait could be overtaken by the write.
	 */
	if (copying && copying->copied && !copying->error) {
		dmrb_remap_to_cow(s, bio, copying->e.new_chunk);
		goto out_unlock;
	}

	/* Not copied (or still being copied): the origin still holds it. */
	dmrb_track_read(s, t, chunk);
	bio_set_dev(bio, s->origin_dev->bdev);
	bio->bi_iter.bi_sector = dm_target_offset(ti, bio->bi_iter.bi_sector);

out_unlock:
	mutex_unlock(&s->lock);
	if (spare)
		dmrb_free_pending(spare);
	if (pe)
		dmrb_start_copy(s->origin, pe);
	if (full)
		dmrb_start_full_write(s->origin, full, bio);
	return r;
}

int dmrb_snapshot_end_io(struct dm_target *ti, struct bio *bio,
			 blk_status_t *error)
{
	struct dmrb_snapshot *s = ti->private;
	struct dmrb_tracked *t = dm_per_bio_data(bio, sizeof(*t));
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
	struct dmrb_snapshot *s = ti->private;

	/* Stays active while suspended: the origin must keep copying. */
	mutex_lock(&s->lock);
	s->active = true;
	s->suspending = false;
	mutex_unlock(&s->lock);
}

/* Writes waiting for the COW to grow go on now (see may_wait()). */
static void snapshot_presuspend(struct dm_target *ti)
{
	struct dmrb_snapshot *s = ti->private;

	mutex_lock(&s->lock);
	s->suspending = true;
	mutex_unlock(&s->lock);
	dmrb_end_nospace_wait(s);
}

static void snapshot_presuspend_undo(struct dm_target *ti)
{
	struct dmrb_snapshot *s = ti->private;

	mutex_lock(&s->lock);
	s->suspending = false;
	mutex_unlock(&s->lock);
}

static unsigned int feature_args(struct dmrb_snapshot *s)
{
	unsigned int n = 0;

	if (s->features & DMRB_FEATURE_LOW_WATER)
		n += 2;
	if (s->features & DMRB_FEATURE_NO_SPACE)
		n += s->no_space_timeout_ms ? 3 : 2;
	return n;
}

void dmrb_snapshot_status(struct dm_target *ti, status_type_t type,
			  unsigned int status_flags, char *result,
			  unsigned int maxlen)
{
	struct dmrb_snapshot *s = ti->private;
	sector_t total, allocated, metadata;
	unsigned int i, sz = 0;

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
		if (!s->features)
			break;
		DMEMIT(" %u", feature_args(s));
		/* In the order given. */
		for (i = 0; i < 2; i++) {
			if ((i == 0) != s->no_space_first) {
				if (s->features & DMRB_FEATURE_LOW_WATER)
					DMEMIT(" low_water_mark %llu",
					       (unsigned long long)s->low_water_mark);
			} else if (!(s->features & DMRB_FEATURE_NO_SPACE)) {
				continue;
			} else if (s->no_space_timeout_ms) {
				DMEMIT(" no_space queue %u", s->no_space_timeout_ms);
			} else {
				DMEMIT(" no_space error");
			}
		}
		break;
	case STATUSTYPE_IMA:
		DMEMIT_TARGET_NAME_VERSION(ti->type);
		DMEMIT(",snap_origin_name=%s,snap_cow_name=%s,snap_valid=%c;",
		       s->origin_dev->name, s->cow_dev->name, s->valid ? 'y' : 'n');
		break;
	}
}

int dmrb_snapshot_iterate_devices(struct dm_target *ti,
				  iterate_devices_callout_fn fn, void *data)
{
	struct dmrb_snapshot *s = ti->private;
	int r;

	r = fn(ti, s->origin_dev, 0, ti->len, data);
	if (!r)
		r = fn(ti, s->cow_dev, 0, bdev_nr_sectors(s->cow_dev->bdev), data);
	return r;
}

/* ---- rollback-origin ---- */

struct dmrb_origin_ctx {
	struct dm_dev *dev;
	bool suspending;	/* presuspend until resume */
};

/*
 * The origin's snapshots stop waiting for full COWs while it is being
 * suspended (see may_wait() in dm-rollback-core.c).
 */
static void origin_set_suspending(struct dmrb_origin_ctx *oc, bool suspending)
{
	oc->suspending = suspending;
	dmrb_origin_suspending(oc->dev->bdev->bd_dev, suspending);
}

/*
 * Construct an origin:
 *   rollback-origin <dev>
 *
 * dev is the device whose snapshots are rollback-snap targets.
 */
static int origin_ctr(struct dm_target *ti, unsigned int argc, char **argv)
{
	struct dmrb_origin_ctx *oc;
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
	struct dmrb_origin_ctx *oc = ti->private;

	/* Removed while suspended: the snapshots may wait again. */
	if (oc->suspending)
		origin_set_suspending(oc, false);
	dm_put_device(ti, oc->dev);
	kfree(oc);
}

static int origin_map(struct dm_target *ti, struct bio *bio)
{
	struct dmrb_origin_ctx *oc = ti->private;
	struct dmrb_origin *o;
	sector_t sector;
	int r = DM_MAPIO_REMAPPED;

	bio_set_dev(bio, oc->dev->bdev);
	bio->bi_iter.bi_sector = dm_target_offset(ti, bio->bi_iter.bi_sector);

	if (bio->bi_opf & REQ_PREFLUSH || bio_data_dir(bio) != WRITE ||
	    !bio_sectors(bio))
		return DM_MAPIO_REMAPPED;

	sector = bio->bi_iter.bi_sector;
again:
	down_read(&dmrb_origins_lock);
	o = dmrb_find_origin(oc->dev->bdev->bd_dev);
	if (o && o->min_chunk) {
		unsigned int room, seq;

		if (!dmrb_copy_room(o, &seq)) {
			up_read(&dmrb_origins_lock);
			dmrb_wait_for_copies(seq);
			goto again;
		}
		room = o->min_chunk - (sector & (o->min_chunk - 1));

		/* One chunk per bio keeps each write waiting on one copy. */
		if (bio_sectors(bio) > room)
			dm_accept_partial_bio(bio, room);
		r = dmrb_origin_write(o, sector, bio_sectors(bio), bio);
	}
	up_read(&dmrb_origins_lock);
	return r;
}

static void origin_presuspend(struct dm_target *ti)
{
	origin_set_suspending(ti->private, true);
}

static void origin_presuspend_undo(struct dm_target *ti)
{
	origin_set_suspending(ti->private, false);
}

static void origin_resume(struct dm_target *ti)
{
	origin_set_suspending(ti->private, false);
}

static void origin_status(struct dm_target *ti, status_type_t type,
			  unsigned int status_flags, char *result,
			  unsigned int maxlen)
{
	struct dmrb_origin_ctx *oc = ti->private;
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
	struct dmrb_origin_ctx *oc = ti->private;

	return fn(ti, oc->dev, 0, ti->len, data);
}

struct target_type dmrb_origin_target = {
	.name = "rollback-origin",
	.version = {1, 6, 1},
	.module = THIS_MODULE,
	.ctr = origin_ctr,
	.dtr = origin_dtr,
	.map = origin_map,
	.presuspend = origin_presuspend,
	.presuspend_undo = origin_presuspend_undo,
	.resume = origin_resume,
	.status = origin_status,
	.iterate_devices = origin_iterate_devices,
};

static int snap_map(struct dm_target *ti, struct bio *bio)
{
	return dmrb_snapshot_map_bio(ti->private, bio, true);
}

struct target_type dmrb_snapshot_target = {
	.name = "rollback-snap",
	.version = {1, 6, 1},
	.module = THIS_MODULE,
	.ctr = snap_ctr,
	.dtr = dmrb_snapshot_dtr,
	.map = snap_map,
	.end_io = dmrb_snapshot_end_io,
	.presuspend = snapshot_presuspend,
	.presuspend_undo = snapshot_presuspend_undo,
	.resume = snapshot_resume,
	.status = dmrb_snapshot_status,
	.iterate_devices = dmrb_snapshot_iterate_devices,
};
