// SPDX-License-Identifier: GPL-2.0
/*
 * dm-rollback exception stores.
 *
 * The persistent store ('P') uses the same on-disk layout as the
 * upstream persistent snapshot store, so a COW device written by either
 * implementation can be read by the other:
 *
 *   chunk 0          header: magic "SnAp", valid, version 1, chunk size
 *   chunk 1          metadata area 0
 *   chunks 2..       the data chunks that area 0 describes
 *   ...              area N at chunk 1 + N * (entries_per_area + 1)
 *
 * An area is one chunk of little-endian {old_chunk, new_chunk} pairs.  The
 * list ends at the first entry whose new_chunk is 0 (chunk 0 is the
 * header, so no exception can point there).  A full area is followed by
 * the next one, which is zeroed before the full one is written.
 *
 * The transient store ('N') keeps nothing on disk.
 */

#include "dm-rollback.h"

#include <linux/dm-io.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>

#define DM_MSG_PREFIX "rollback-store"

#define DMRB_DISK_MAGIC		0x70416e53	/* "SnAp" */
#define DMRB_DISK_VERSION		1
#define DMRB_HEADER_CHUNKS	1

struct dmrb_disk_header {
	__le32 magic;
	__le32 valid;
	__le32 version;
	__le32 chunk_size;
} __packed;

struct dmrb_disk_exception {
	__le64 old_chunk;
	__le64 new_chunk;
} __packed;

struct dmrb_pstore {
	struct dm_io_client *io_client;
	void *area;		/* in-core copy of the current area */
	void *zero_area;
	void *header_area;	/* separate: invalidation may race a commit */
	u32 entries_per_area;
	u64 current_area;
	u32 area_used;		/* entries recorded in the current area */
	dmrb_chunk_t next_free;
	bool valid;
};

static sector_t cow_sectors(struct dmrb_store *store)
{
	return bdev_nr_sectors(store->cow->bdev);
}

/*
 * I/O of count sectors at a chunk of the COW; synchronous unless done is
 * given (then called from interrupt context).  count 0 with REQ_PREFLUSH
 * is an empty flush.
 */
static int pstore_submit(struct dmrb_store *store, void *buf, dmrb_chunk_t chunk,
			 sector_t count, blk_opf_t opf,
			 void (*done)(unsigned long error, void *context),
			 void *context)
{
	struct dmrb_pstore *ps = store->context;
	struct dm_io_region where = {
		.bdev = store->cow->bdev,
		.sector = chunk << store->chunk_shift,
		.count = count,
	};
	struct dm_io_request req = {
		.bi_opf = opf,
		.mem.type = DM_IO_VMA,
		.mem.ptr.vma = buf,
		.client = ps->io_client,
		.notify.fn = done,
		.notify.context = context,
	};

	return dm_io(&req, 1, &where, NULL, IOPRIO_DEFAULT);
}

static int pstore_io(struct dmrb_store *store, void *buf, dmrb_chunk_t chunk,
		     blk_opf_t opf)
{
	return pstore_submit(store, buf, chunk, store->chunk_sectors, opf,
			     NULL, NULL);
}

static dmrb_chunk_t area_chunk(struct dmrb_pstore *ps, u64 area)
{
	return DMRB_HEADER_CHUNKS + area * (ps->entries_per_area + 1);
}

/* Data chunks never land on a metadata area. */
static void skip_area_chunk(struct dmrb_pstore *ps)
{
	u64 pos = ps->next_free;

	if (do_div(pos, ps->entries_per_area + 1) == DMRB_HEADER_CHUNKS)
		ps->next_free++;
}

/* The header and the metadata areas: never the copy of a chunk. */
static bool is_metadata_chunk(struct dmrb_pstore *ps, dmrb_chunk_t chunk)
{
	u64 pos = chunk - DMRB_HEADER_CHUNKS;

	return chunk < DMRB_HEADER_CHUNKS || !do_div(pos, ps->entries_per_area + 1);
}

static void free_areas(struct dmrb_pstore *ps)
{
	vfree(ps->area);
	vfree(ps->zero_area);
	vfree(ps->header_area);
	ps->area = NULL;
	ps->zero_area = NULL;
	ps->header_area = NULL;
}

static int alloc_areas(struct dmrb_store *store)
{
	struct dmrb_pstore *ps = store->context;
	size_t len = (size_t)store->chunk_sectors << SECTOR_SHIFT;

	ps->area = vzalloc(len);
	ps->zero_area = vzalloc(len);
	ps->header_area = vzalloc(len);
	if (!ps->area || !ps->zero_area || !ps->header_area) {
		free_areas(ps);
		return -ENOMEM;
	}
	ps->entries_per_area = len / sizeof(struct dmrb_disk_exception);
	return 0;
}

static int pstore_create(struct dmrb_store *store)
{
	struct dmrb_pstore *ps;

	ps = kzalloc(sizeof(*ps), GFP_KERNEL);
	if (!ps)
		return -ENOMEM;

	ps->io_client = dm_io_client_create();
	if (IS_ERR(ps->io_client)) {
		int r = PTR_ERR(ps->io_client);

		kfree(ps);
		return r;
	}
	store->context = ps;
	ps->valid = true;
	ps->next_free = DMRB_HEADER_CHUNKS + 1;
	return 0;
}

static void pstore_destroy(struct dmrb_store *store)
{
	struct dmrb_pstore *ps = store->context;

	if (!ps)
		return;
	free_areas(ps);
	dm_io_client_destroy(ps->io_client);
	kfree(ps);
	store->context = NULL;
}

static int write_header(struct dmrb_store *store)
{
	struct dmrb_pstore *ps = store->context;
	struct dmrb_disk_header *dh = ps->header_area;

	memset(ps->header_area, 0, (size_t)store->chunk_sectors << SECTOR_SHIFT);
	dh->magic = cpu_to_le32(DMRB_DISK_MAGIC);
	dh->valid = cpu_to_le32(ps->valid ? 1 : 0);
	dh->version = cpu_to_le32(DMRB_DISK_VERSION);
	dh->chunk_size = cpu_to_le32(store->chunk_sectors);

	return pstore_io(store, ps->header_area, 0,
			 REQ_OP_WRITE | REQ_PREFLUSH | REQ_FUA | REQ_SYNC);
}

/*
 * Reads the header with a chunk-sized buffer of the table's chunk size;
 * the header fits in the first sector whatever the chunk size is.
 */
static int read_header(struct dmrb_store *store, bool *fresh, char **error)
{
	struct dmrb_pstore *ps = store->context;
	struct dmrb_disk_header *dh;
	unsigned int disk_chunk;
	int r;

	r = alloc_areas(store);
	if (r) {
		*error = "Cannot allocate metadata buffers";
		return r;
	}

	r = pstore_io(store, ps->header_area, 0, REQ_OP_READ);
	if (r) {
		*error = "Cannot read COW header";
		return r;
	}

	dh = ps->header_area;
	if (le32_to_cpu(dh->magic) == 0) {
		*fresh = true;
		return 0;
	}
	if (le32_to_cpu(dh->magic) != DMRB_DISK_MAGIC) {
		*error = "COW has a wrong magic number";
		return -EINVAL;
	}
	if (le32_to_cpu(dh->version) != DMRB_DISK_VERSION) {
		*error = "COW has an unsupported version";
		return -EINVAL;
	}

	*fresh = false;
	ps->valid = le32_to_cpu(dh->valid) != 0;
	disk_chunk = le32_to_cpu(dh->chunk_size);
	if (disk_chunk == store->chunk_sectors)
		return 0;

	if (!is_power_of_2(disk_chunk) || disk_chunk > (INT_MAX >> SECTOR_SHIFT) ||
	    disk_chunk % (bdev_logical_block_size(store->cow->bdev) >> SECTOR_SHIFT)) {
		*error = "COW has an invalid chunk size";
		return -EINVAL;
	}

	/* The chunk size on disk wins over the table's. */
	DMINFO("%s: using on-disk chunk size %u instead of %u",
	       store->cow->name, disk_chunk, store->chunk_sectors);
	free_areas(ps);
	store->chunk_sectors = disk_chunk;
	store->chunk_shift = __ffs(disk_chunk);
	r = alloc_areas(store);
	if (r)
		*error = "Cannot allocate metadata buffers";
	return r;
}

/*
 * Walks the areas while they are full; the first one that is not full is
 * the current one and stays in core.
 */
static int read_areas(struct dmrb_store *store, dmrb_add_exception_fn add,
		      void *context, char **error)
{
	struct dmrb_pstore *ps = store->context;
	size_t len = (size_t)store->chunk_sectors << SECTOR_SHIFT;
	sector_t size = cow_sectors(store);
	u64 area;
	u32 i;
	int r;

	for (area = 0;; area++) {
		struct dmrb_disk_exception *de = ps->area;

		if ((area_chunk(ps, area) + 1) << store->chunk_shift > size) {
			*error = "COW metadata runs past the end of the device";
			return -EINVAL;
		}
		r = pstore_io(store, ps->area, area_chunk(ps, area), REQ_OP_READ);
		if (r) {
			*error = "Cannot read COW metadata";
			return r;
		}

		for (i = 0; i < ps->entries_per_area; i++) {
			dmrb_chunk_t old_chunk = le64_to_cpu(de[i].old_chunk);
			dmrb_chunk_t new_chunk = le64_to_cpu(de[i].new_chunk);

			if (!new_chunk)
				break;
			/* Shifted, a corrupt new_chunk could wrap into the device. */
			if (new_chunk >= size >> store->chunk_shift) {
				*error = "COW metadata points past the end of the device";
				return -EINVAL;
			}
			/* Copies written there would overwrite the metadata. */
			if (is_metadata_chunk(ps, new_chunk)) {
				*error = "COW metadata points at COW metadata";
				return -EINVAL;
			}
			if (new_chunk >= ps->next_free)
				ps->next_free = new_chunk + 1;
			r = add(context, old_chunk, new_chunk);
			if (r) {
				*error = "Cannot allocate exception table entry";
				return r;
			}
		}

		if (i < ps->entries_per_area) {
			ps->current_area = area;
			ps->area_used = i;
			break;
		}
	}

	/* Entries past the end of the list must read back as zero. */
	memset((struct dmrb_disk_exception *)ps->area + ps->area_used, 0,
	       len - ps->area_used * sizeof(struct dmrb_disk_exception));
	skip_area_chunk(ps);
	return 0;
}

static int pstore_read_metadata(struct dmrb_store *store, dmrb_add_exception_fn add,
				void *context, char **error)
{
	struct dmrb_pstore *ps = store->context;
	bool fresh = false;
	int r;

	r = read_header(store, &fresh, error);
	if (r)
		return r;

	if (fresh) {
		ps->current_area = 0;
		ps->area_used = 0;
		r = pstore_io(store, ps->zero_area, area_chunk(ps, 0), REQ_OP_WRITE);
		if (!r)
			r = write_header(store);
		if (r)
			*error = "Cannot initialise COW header";
		return r;
	}

	if (!ps->valid)
		return 1;

	return read_areas(store, add, context, error);
}

static int pstore_allocate(struct dmrb_store *store, dmrb_chunk_t *new_chunk)
{
	struct dmrb_pstore *ps = store->context;
	dmrb_chunk_t end = ps->next_free + 1;

	/*
	 * The last data chunk of an area fills it, and stage then zeroes the
	 * next area: that chunk is only free if the next area fits too.
	 */
	if (is_metadata_chunk(ps, end))
		end++;
	if (end << store->chunk_shift > cow_sectors(store))
		return -ENOSPC;

	*new_chunk = ps->next_free++;
	skip_area_chunk(ps);
	return 0;
}

#define DMRB_AREA_WRITE (REQ_OP_WRITE | REQ_PREFLUSH | REQ_FUA | REQ_SYNC)

static int write_area(struct dmrb_store *store)
{
	struct dmrb_pstore *ps = store->context;

	return pstore_io(store, ps->area, area_chunk(ps, ps->current_area),
			 DMRB_AREA_WRITE);
}

/*
 * The data of every chunk in the batch is on the COW already; the
 * PREFLUSH on the area write makes it durable before the entries that
 * point at it.  An area that fills up is written here; the last,
 * partial one is left for write_metadata.
 */
static int pstore_stage(struct dmrb_store *store, struct list_head *batch)
{
	struct dmrb_pstore *ps = store->context;
	struct dmrb_disk_exception *de = ps->area;
	struct dmrb_commit *c;
	bool dirty = false;
	int r;

	if (!ps->valid)
		return -EIO;

	list_for_each_entry(c, batch, list) {
		de[ps->area_used].old_chunk = cpu_to_le64(c->old_chunk);
		de[ps->area_used].new_chunk = cpu_to_le64(c->new_chunk);
		ps->area_used++;
		dirty = true;

		if (ps->area_used < ps->entries_per_area)
			continue;

		/* The next area must read as empty before this one is full. */
		r = pstore_io(store, ps->zero_area,
			      area_chunk(ps, ps->current_area + 1), REQ_OP_WRITE);
		if (!r)
			r = write_area(store);
		if (r)
			goto fail;
		ps->current_area++;
		ps->area_used = 0;
		memset(ps->area, 0, (size_t)store->chunk_sectors << SECTOR_SHIFT);
		dirty = false;
	}

	return dirty ? 1 : 0;

fail:
	ps->valid = false;
	return r;
}

static void pstore_write_metadata(struct dmrb_store *store, bool data_flush,
				  void (*done)(unsigned long error, void *context),
				  void *context)
{
	struct dmrb_pstore *ps = store->context;
	int r;

	if (data_flush)
		r = pstore_submit(store, ps->area, 0, 0,
				  REQ_OP_WRITE | REQ_PREFLUSH | REQ_SYNC, done, context);
	else
		r = pstore_submit(store, ps->area, area_chunk(ps, ps->current_area),
				  store->chunk_sectors, REQ_OP_WRITE | REQ_FUA | REQ_SYNC,
				  done, context);
	if (r)
		done(1, context);
}

/*
 * A merge takes exceptions back from the end of the list, one area at a
 * time: the removed entries are zeroed, so the list still ends at the
 * first zero entry and either implementation can go on from here.
 */
static int pstore_prepare_merge(struct dmrb_store *store,
				struct dmrb_merge_entry *entries, unsigned int max)
{
	struct dmrb_pstore *ps = store->context;
	struct dmrb_disk_exception *de = ps->area;
	unsigned int i, n;
	int r;

	if (!ps->valid)
		return -EIO;
	if (!ps->area_used) {
		if (!ps->current_area)
			return 0;
		r = pstore_io(store, ps->area, area_chunk(ps, ps->current_area - 1),
			      REQ_OP_READ);
		if (r)
			return r;
		ps->current_area--;
		ps->area_used = ps->entries_per_area;
	}

	n = min(max, ps->area_used);
	for (i = 0; i < n; i++) {
		entries[i].old_chunk = le64_to_cpu(de[ps->area_used - 1 - i].old_chunk);
		entries[i].new_chunk = le64_to_cpu(de[ps->area_used - 1 - i].new_chunk);
	}
	return n;
}

static int pstore_commit_merge(struct dmrb_store *store, unsigned int n)
{
	struct dmrb_pstore *ps = store->context;
	int r;

	if (WARN_ON(n > ps->area_used))
		return -EINVAL;
	memset((struct dmrb_disk_exception *)ps->area + ps->area_used - n, 0,
	       n * sizeof(struct dmrb_disk_exception));
	r = write_area(store);
	if (r) {
		ps->valid = false;
		return r;
	}
	ps->area_used -= n;
	/* As if the remaining exceptions had been allocated in order. */
	ps->next_free = area_chunk(ps, ps->current_area) + ps->area_used + 1;
	return 0;
}

static int pstore_invalidate(struct dmrb_store *store)
{
	struct dmrb_pstore *ps = store->context;

	ps->valid = false;
	return write_header(store);
}

static void pstore_usage(struct dmrb_store *store, sector_t *total,
			 sector_t *allocated, sector_t *metadata)
{
	struct dmrb_pstore *ps = store->context;

	*total = cow_sectors(store);
	*allocated = ps->next_free << store->chunk_shift;
	/* The header plus every area up to the current one. */
	*metadata = (ps->current_area + 1 + DMRB_HEADER_CHUNKS) << store->chunk_shift;
}

/* Metadata areas among the chunks below end. */
static u64 areas_below(struct dmrb_pstore *ps, dmrb_chunk_t end)
{
	u64 n = end - DMRB_HEADER_CHUNKS + ps->entries_per_area;

	if (end <= DMRB_HEADER_CHUNKS)
		return 0;
	do_div(n, ps->entries_per_area + 1);
	return n;
}

/*
 * The device's size is read each time, as allocate does: a COW whose
 * device grew (a dm device reloaded bigger and resumed) has room again
 * without a reload of the snapshot.
 */
static u64 pstore_free_chunks(struct dmrb_store *store)
{
	struct dmrb_pstore *ps = store->context;
	dmrb_chunk_t end = cow_sectors(store) >> store->chunk_shift;
	u64 n;

	if (ps->next_free >= end)
		return 0;
	n = end - ps->next_free -
	    (areas_below(ps, end) - areas_below(ps, ps->next_free));
	/* As in allocate: no room for the next area, no last data chunk. */
	if (n && is_metadata_chunk(ps, end))
		n--;
	return n;
}

const struct dmrb_store_ops dmrb_persistent_store_ops = {
	.type = 'P',
	.create = pstore_create,
	.destroy = pstore_destroy,
	.read_metadata = pstore_read_metadata,
	.allocate = pstore_allocate,
	.stage = pstore_stage,
	.write_metadata = pstore_write_metadata,
	.prepare_merge = pstore_prepare_merge,
	.commit_merge = pstore_commit_merge,
	.invalidate = pstore_invalidate,
	.usage = pstore_usage,
	.free_chunks = pstore_free_chunks,
};

/* Transient store: chunks handed out from the start of the COW. */
struct dmrb_tstore {
	dmrb_chunk_t next_free;
};

static int tstore_create(struct dmrb_store *store)
{
	store->context = kzalloc(sizeof(struct dmrb_tstore), GFP_KERNEL);
	return store->context ? 0 : -ENOMEM;
}

static void tstore_destroy(struct dmrb_store *store)
{
	kfree(store->context);
	store->context = NULL;
}

static int tstore_read_metadata(struct dmrb_store *store, dmrb_add_exception_fn add,
				void *context, char **error)
{
	return 0;
}

static int tstore_allocate(struct dmrb_store *store, dmrb_chunk_t *new_chunk)
{
	struct dmrb_tstore *ts = store->context;

	if ((ts->next_free + 1) << store->chunk_shift > cow_sectors(store))
		return -ENOSPC;
	*new_chunk = ts->next_free++;
	return 0;
}

static int tstore_stage(struct dmrb_store *store, struct list_head *batch)
{
	return 0;
}

static int tstore_invalidate(struct dmrb_store *store)
{
	return 0;
}

static void tstore_usage(struct dmrb_store *store, sector_t *total,
			 sector_t *allocated, sector_t *metadata)
{
	struct dmrb_tstore *ts = store->context;

	*total = cow_sectors(store);
	*allocated = ts->next_free << store->chunk_shift;
	*metadata = 0;
}

static u64 tstore_free_chunks(struct dmrb_store *store)
{
	struct dmrb_tstore *ts = store->context;
	dmrb_chunk_t end = cow_sectors(store) >> store->chunk_shift;

	return ts->next_free < end ? end - ts->next_free : 0;
}

const struct dmrb_store_ops dmrb_transient_store_ops = {
	.type = 'N',
	.create = tstore_create,
	.destroy = tstore_destroy,
	.read_metadata = tstore_read_metadata,
	.allocate = tstore_allocate,
	.stage = tstore_stage,
	.invalidate = tstore_invalidate,
	.usage = tstore_usage,
	.free_chunks = tstore_free_chunks,
};
