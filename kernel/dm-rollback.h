/* SPDX-License-Identifier: GPL-2.0 */
/*
 * dm-rollback: copy-on-write snapshots whose changes can be undone.
 *
 * Definitions shared by the targets (dm-rollback-target.c) and the
 * exception stores (dm-rollback-store.c).
 */
#ifndef DM_ROLLBACK_H
#define DM_ROLLBACK_H

#include <linux/device-mapper.h>
#include <linux/list.h>
#include <linux/types.h>

typedef u64 rb_chunk_t;

struct rb_snapshot;

/*
 * One finished copy waiting to be recorded in the store, in allocation
 * order.
 */
struct rb_commit {
	struct list_head list;
	rb_chunk_t old_chunk;
	rb_chunk_t new_chunk;
};

struct rb_store_ops;

/*
 * An exception store: where a snapshot keeps its copied chunks and the
 * table of which origin chunk lives where.
 */
struct rb_store {
	const struct rb_store_ops *ops;
	struct dm_dev *cow;
	unsigned int chunk_sectors;
	unsigned int chunk_shift;
	void *context;
};

typedef int (*rb_add_exception_fn)(void *context, rb_chunk_t old_chunk,
				   rb_chunk_t new_chunk);

/* One recorded exception, as a merge takes them back. */
struct rb_merge_entry {
	rb_chunk_t old_chunk;
	rb_chunk_t new_chunk;
};

struct rb_store_ops {
	char type;			/* 'P' or 'N', as in the table */
	int (*create)(struct rb_store *store);
	void (*destroy)(struct rb_store *store);
	/*
	 * Reads the store from disk, calling add for every recorded
	 * exception.  Returns 1 if the store says the snapshot is invalid,
	 * 0 if it is valid, -errno on failure.  May change chunk_sectors to
	 * the value found on disk.
	 */
	int (*read_metadata)(struct rb_store *store, rb_add_exception_fn add,
			     void *context, char **error);
	/* Hands out the next free COW chunk, or -ENOSPC. */
	int (*allocate)(struct rb_store *store, rb_chunk_t *new_chunk);
	/*
	 * Puts a batch of rb_commit, in list order, into the metadata.
	 * Returns 1 if write_metadata must follow to make it durable, 0 if
	 * it already is, -errno on failure.
	 */
	int (*stage)(struct rb_store *store, struct list_head *batch);
	/*
	 * Makes what stage left in core durable, asynchronously; done is
	 * called from interrupt context.  First with data_flush set: the
	 * copied data is flushed to the COW.  Then without it: the metadata
	 * is written with FUA.  Nothing may be staged until both are done.
	 * Splitting the two lets a group of snapshots have all their
	 * flushes in flight together.
	 */
	void (*write_metadata)(struct rb_store *store, bool data_flush,
			       void (*done)(unsigned long error, void *context),
			       void *context);
	/*
	 * Merging (NULL if the store cannot merge): prepare_merge fills
	 * entries with up to max exceptions from the end of the recorded
	 * list, the last one first, and returns how many (0 when none are
	 * left); commit_merge durably removes the first n of them.
	 */
	int (*prepare_merge)(struct rb_store *store, struct rb_merge_entry *entries,
			     unsigned int max);
	int (*commit_merge)(struct rb_store *store, unsigned int n);
	/* Marks the store invalid on disk, for good. */
	int (*invalidate)(struct rb_store *store);
	void (*usage)(struct rb_store *store, sector_t *total,
		      sector_t *allocated, sector_t *metadata);
};

extern const struct rb_store_ops rb_persistent_store_ops;
extern const struct rb_store_ops rb_transient_store_ops;

#endif
