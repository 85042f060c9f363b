/* SPDX-License-Identifier: GPL-2.0 */
/*
 * dm-rollback: copy-on-write snapshots whose changes can be undone.
 *
 * Definitions shared by the core (dm-rollback-core.c: exception tables,
 * origin registry, invalidation, the copy and commit engines), the
 * snapshot and origin targets (dm-rollback-snap.c), the merge
 * (dm-rollback-merge.c) and the exception stores (dm-rollback-store.c).
 */
#ifndef DM_ROLLBACK_H
#define DM_ROLLBACK_H

#include <linux/bio.h>
#include <linux/completion.h>
#include <linux/device-mapper.h>
#include <linux/list.h>
#include <linux/mempool.h>
#include <linux/mutex.h>
#include <linux/rwsem.h>
#include <linux/spinlock.h>
#include <linux/types.h>
#include <linux/wait.h>
#include <linux/workqueue.h>

typedef u64 dmrb_chunk_t;

struct dmrb_snapshot;

/*
 * One finished copy waiting to be recorded in the store, in allocation
 * order.
 */
struct dmrb_commit {
	struct list_head list;
	dmrb_chunk_t old_chunk;
	dmrb_chunk_t new_chunk;
};

struct dmrb_store_ops;

/*
 * An exception store: where a snapshot keeps its copied chunks and the
 * table of which origin chunk lives where.
 */
struct dmrb_store {
	const struct dmrb_store_ops *ops;
	struct dm_dev *cow;
	unsigned int chunk_sectors;
	unsigned int chunk_shift;
	void *context;
};

typedef int (*dmrb_add_exception_fn)(void *context, dmrb_chunk_t old_chunk,
				   dmrb_chunk_t new_chunk);

/* One recorded exception, as a merge takes them back. */
struct dmrb_merge_entry {
	dmrb_chunk_t old_chunk;
	dmrb_chunk_t new_chunk;
};

struct dmrb_store_ops {
	char type;			/* 'P' or 'N', as in the table */
	int (*create)(struct dmrb_store *store);
	void (*destroy)(struct dmrb_store *store);
	/*
	 * Reads the store from disk, calling add for every recorded
	 * exception.  Returns 1 if the store says the snapshot is invalid,
	 * 0 if it is valid, -errno on failure.  May change chunk_sectors to
	 * the value found on disk.
	 */
	int (*read_metadata)(struct dmrb_store *store, dmrb_add_exception_fn add,
			     void *context, char **error);
	/* Hands out the next free COW chunk, or -ENOSPC. */
	int (*allocate)(struct dmrb_store *store, dmrb_chunk_t *new_chunk);
	/*
	 * Puts a batch of dmrb_commit, in list order, into the metadata.
	 * Returns 1 if write_metadata must follow to make it durable, 0 if
	 * it already is, -errno on failure.
	 */
	int (*stage)(struct dmrb_store *store, struct list_head *batch);
	/*
	 * Makes what stage left in core durable, asynchronously; done is
	 * called from interrupt context.  First with data_flush set: the
	 * copied data is flushed to the COW.  Then without it: the metadata
	 * is written with FUA.  Nothing may be staged until both are done.
	 * Splitting the two lets a group of snapshots have all their
	 * flushes in flight together.
	 */
	void (*write_metadata)(struct dmrb_store *store, bool data_flush,
			       void (*done)(unsigned long error, void *context),
			       void *context);
	/*
	 * Merging (NULL if the store cannot merge): prepare_merge fills
	 * entries with up to max exceptions from the end of the recorded
	 * list, the last one first, and returns how many (0 when none are
	 * left); commit_merge durably removes the first n of them.
	 */
	int (*prepare_merge)(struct dmrb_store *store, struct dmrb_merge_entry *entries,
			     unsigned int max);
	int (*commit_merge)(struct dmrb_store *store, unsigned int n);
	/* Marks the store invalid on disk, for good. */
	int (*invalidate)(struct dmrb_store *store);
	void (*usage)(struct dmrb_store *store, sector_t *total,
		      sector_t *allocated, sector_t *metadata);
	/*
	 * Data chunks allocate could still hand out, with the COW device's
	 * size read now: it may have grown since the table was loaded.
	 */
	u64 (*free_chunks)(struct dmrb_store *store);
};

extern const struct dmrb_store_ops dmrb_persistent_store_ops;
extern const struct dmrb_store_ops dmrb_transient_store_ops;

/* ---- the core: dm-rollback-core.c ---- */

#define DMRB_TRACKED_BUCKETS	64
#define DMRB_MERGE_BATCH	256

struct dmrb_exception {
	struct hlist_node hash;
	dmrb_chunk_t old_chunk;
	dmrb_chunk_t new_chunk;
};

struct dmrb_table {
	struct hlist_head *buckets;
	u64 mask;
};

/* The snapshots of one origin device. */
struct dmrb_origin {
	struct list_head list;		/* in the origin registry */
	dev_t dev;
	struct list_head snapshots;
	struct dm_kcopyd_client *kc;
	atomic_t copies;		/* in flight on kc, see copy_limit */
	unsigned int min_chunk;		/* smallest chunk of its snapshots */
	/*
	 * Its snapshots with copies done, committed together by commit_work,
	 * one at a time: each store stages one batch at a time, and kcopyd's
	 * thread, which finishes every copy, never waits for a metadata write.
	 */
	spinlock_t commit_lock;
	struct list_head commit_snapshots;	/* dmrb_snapshot.commit_node */
	struct work_struct commit_work;
	/*
	 * The origin device is being suspended: no write waits for a full
	 * COW to grow (see dmrb_new_pending()).
	 */
	bool suspending;
};

struct dmrb_merge;
struct dmrb_snapshot;

/* One snapshot's part of a group commit. */
struct dmrb_commit_ctx {
	struct dmrb_snapshot *snap;
	struct list_head done;		/* dmrb_pending, allocation order */
	struct completion written;
	unsigned long write_error;
	bool writing;
	unsigned int committed;		/* for release_pending() */
};

/* A rollback-snap, or the snapshot that a rollback-merge takes back. */
struct dmrb_snapshot {
	struct dm_target *ti;
	struct dm_dev *origin_dev;
	struct dm_dev *cow_dev;
	struct dmrb_origin *origin;
	struct list_head origin_list;
	unsigned int table_chunk;	/* as given in the table */
	struct dmrb_store store;
	struct dmrb_merge *merge;	/* a rollback-merge only */
	mempool_t *pending_pool;	/* for struct dmrb_pending */

	/* Protects everything below except the tracked reads. */
	struct mutex lock;
	bool valid;
	bool active;
	bool invalidate_queued;
	bool invalidate_written;	/* the invalid header is on disk */
	/* Origin writes that may go only once the invalid header is on disk. */
	struct bio_list invalidate_bios;
	struct dmrb_table complete;
	struct dmrb_table pending;
	u64 exception_count;		/* entries in complete */
	struct list_head commit_queue;	/* dmrb_pending, allocation order */
	atomic_t pending_count;		/* see release_pending() */
	/* In origin->commit_snapshots, under its commit_lock; empty if not. */
	struct list_head commit_node;
	/* commit_work's only. */
	struct list_head commit_group;
	struct dmrb_commit_ctx commit_ctx;
	struct work_struct invalidate_work;

	/*
	 * Snapshot reads sent to the origin and still in flight; for a merge,
	 * every bio sent to the COW.
	 */
	spinlock_t tracked_lock;
	struct hlist_head tracked[DMRB_TRACKED_BUCKETS];

	/* Its COW was taken over by a merge: I/O fails, origin writes skip it. */
	bool handed_over;

	/* Optional features of the table; 0 when not given. */
	u64 low_water_mark;		/* in chunks */
	unsigned int no_space_timeout_ms;	/* no_space queue; 0: error */
	unsigned int features;		/* DMRB_FEATURE_*, as given */
	bool no_space_first;		/* no_space came before low_water_mark */

	/*
	 * Writes waiting for a full COW to grow, in arrival order (origin
	 * writes and snapshot writes), under lock.  nospace_work checks the
	 * COW's size until it has grown or the deadline has passed.
	 */
	struct bio_list nospace_bios;
	bool nospace_waiting;
	unsigned long nospace_deadline;	/* jiffies */
	bool suspending;		/* presuspend until resume */
	bool low_water_signalled;
	bool full_signalled;
	struct delayed_work nospace_work;
	struct work_struct event_work;
};

#define DMRB_FEATURE_LOW_WATER	BIT(0)
#define DMRB_FEATURE_NO_SPACE	BIT(1)

enum dmrb_merge_state {
	DMRB_MERGE_STOPPED,
	DMRB_MERGE_RUNNING,
	DMRB_MERGE_FAILED,
};

/* What only a rollback-merge has; allocated by its ctr. */
struct dmrb_merge {
	struct dmrb_snapshot *snap;
	/* A rollback-snap whose COW to take over at resume; under dmrb_origins_lock. */
	struct dmrb_snapshot *handover_src;
	/*
	 * The ctr found a live rollback-snap on the COW: what it read may be
	 * stale by the resume, which reads the COW again (also when that
	 * snapshot is gone by then).  Stays set until a resume has done so.
	 */
	bool reread;

	/* Under snap->lock unless noted. */
	enum dmrb_merge_state state;
	bool stop;
	bool running;
	bool suspending;	/* presuspend until resume */
	wait_queue_head_t wait;
	struct work_struct work;
	struct dmrb_merge_entry batch[DMRB_MERGE_BATCH];	/* being merged now */
	unsigned int batch_n;
	struct bio_list waiting;	/* bios to the chunks of the batch */
	unsigned int throttle_kbs;	/* 0: unlimited; read without the lock */

	/* Its own: the origin's copies for other snapshots never queue behind it. */
	struct dm_kcopyd_client *kc;
	/* The device's own I/O, without the lock: see merge_busy(). */
	atomic_t foreground;	/* bios mapped and not ended */
	u64 foreground_ns;	/* the last one mapped or ended */

	/* The worker's only. */
	u64 last_start_ns;	/* the last batch began, of last_kib */
	u64 last_kib;
	atomic_t copies;	/* in flight, plus one while the batch starts them */
	wait_queue_head_t copy_end;
	int copy_error;
	struct completion copied;
};

/* A chunk being copied from the origin into one snapshot's COW. */
struct dmrb_pending {
	struct dmrb_exception e;	/* in snap->pending */
	struct dmrb_exception *done;	/* goes into snap->complete */
	struct dmrb_commit commit;
	struct list_head queue;		/* in snap->commit_queue */
	struct dmrb_snapshot *snap;
	struct dmrb_pending *next_copy;	/* other COWs filled by the same read */
	struct bio_list origin_bios;
	struct bio_list snap_bios;
	/* A snapshot write of the whole chunk, which is the copy: see dmrb_start_full_write(). */
	struct bio *full_bio;
	bio_end_io_t *full_bio_end_io;
	bool copied;
	int error;
};

/* Per-bio data of rollback-snap and rollback-merge. */
struct dmrb_tracked {
	struct hlist_node node;
	dmrb_chunk_t chunk;
};

extern struct rw_semaphore dmrb_origins_lock;
extern struct kmem_cache *dmrb_exception_cache;
extern struct workqueue_struct *dmrb_wq;

int dmrb_table_init(struct dmrb_table *t, sector_t cow_sectors,
		    unsigned int chunk_shift);
void dmrb_table_insert(struct dmrb_table *t, struct dmrb_exception *e);
struct dmrb_exception *dmrb_table_lookup(struct dmrb_table *t, dmrb_chunk_t chunk);
void dmrb_table_destroy(struct dmrb_table *t, bool free_entries);
int dmrb_table_record(struct dmrb_table *t, dmrb_chunk_t old_chunk,
		      dmrb_chunk_t new_chunk);
int dmrb_add_recorded_exception(void *context, dmrb_chunk_t old_chunk,
				dmrb_chunk_t new_chunk);

struct dmrb_origin *dmrb_find_origin(dev_t dev);
int dmrb_snapshot_init(struct dmrb_snapshot *s);
int dmrb_register_snapshot(struct dmrb_snapshot *s);
void dmrb_unregister_snapshot(struct dmrb_snapshot *s);
void dmrb_invalidate(struct dmrb_snapshot *s, const char *why);

struct dmrb_pending *dmrb_alloc_pending(struct dmrb_snapshot *s, gfp_t gfp);
void dmrb_free_pending(struct dmrb_pending *pe);
struct dmrb_pending *dmrb_new_pending(struct dmrb_snapshot *s, dmrb_chunk_t chunk,
				      struct dmrb_pending *pe, struct bio *bio);
void dmrb_end_nospace_wait(struct dmrb_snapshot *s);
void dmrb_origin_suspending(dev_t dev, bool suspending);
bool dmrb_copy_room(struct dmrb_origin *o, unsigned int *seq);
void dmrb_wait_for_copies(unsigned int seq);
void dmrb_start_copy(struct dmrb_origin *o, struct dmrb_pending *chain);
void dmrb_start_full_write(struct dmrb_origin *o, struct dmrb_pending *pe, struct bio *bio);
int dmrb_origin_write(struct dmrb_origin *o, sector_t sector,
		      unsigned int count, struct bio *bio);
void dmrb_remap_to_cow(struct dmrb_snapshot *s, struct bio *bio,
		       dmrb_chunk_t new_chunk);
void dmrb_track_read(struct dmrb_snapshot *s, struct dmrb_tracked *t,
		     dmrb_chunk_t chunk);
void dmrb_wait_for_tracked_reads(struct dmrb_snapshot *s, dmrb_chunk_t chunk);

/* ---- the targets: dm-rollback-snap.c, dm-rollback-merge.c ---- */

int dmrb_snapshot_ctr(struct dm_target *ti, unsigned int argc, char **argv,
		      struct dmrb_merge *merge);
void dmrb_snapshot_dtr(struct dm_target *ti);
int dmrb_snapshot_map_bio(struct dmrb_snapshot *s, struct bio *bio, bool may_wait);
int dmrb_snapshot_end_io(struct dm_target *ti, struct bio *bio,
			 blk_status_t *error);
void dmrb_snapshot_status(struct dm_target *ti, status_type_t type,
			  unsigned int status_flags, char *result,
			  unsigned int maxlen);
int dmrb_snapshot_iterate_devices(struct dm_target *ti,
				  iterate_devices_callout_fn fn, void *data);

extern struct target_type dmrb_origin_target;
extern struct target_type dmrb_snapshot_target;
extern struct target_type dmrb_merge_target;

#endif
