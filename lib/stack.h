/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Shared by the library's files: the dm stack of a volume and its snapshots (stack.c). */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "pool.h"

/* What the volume's dm device is now. */
struct stack {
        char *table;
        enum backend backend;   /* of its origin or merge table; invalid when plain */
        bool merging;
        char *real_name;
        char *real_table;       /* the volume's own table, wherever it is now */
        char real_devt[32];
        uint64_t sectors;
};

/* A device to resume or remove while the volume above it is suspended, udev waited for later. */
struct deferred {
        const char *name;
        uint32_t *cookie;
};

void stack_done(struct stack *st);
int stack_read(const char *volume, struct stack *st);
int zero_cow_header(struct pool *p, const struct snapshot *s);
int device_create(const char *name, const char *uuid, const char *table, bool resume);
int cow_device_create(struct pool *p, const struct snapshot *s, bool *created);
int snapshot_table(const struct pool *p, const struct stack *st, enum backend b, const struct snapshot *s, bool merge,
                   char **ret);
void remove_named(int (*namer)(const struct snapshot *, char **), const struct snapshot *s);
int resume_deferred_step(void *userdata);
int remove_snapshot_device(const char *volume, bool suspend, const char *snap_name);
int disarm(const char *volume, const struct stack *st);
void remove_stale_stack(struct pool *p, const char *volume, const struct stack *st);
/* discovery.c: the device of the filesystem mounted at /. */
int root_devnum(dev_t *ret);
/* backend.c: modprobe, quietly; whether it worked shows in what the caller looks for next. */
void load_module(const char *module);
/* autoextend.c */
void make_room_before_suspend(struct pool *p, const char *volume, const char *except);
void make_room_for_merge(struct pool *p, const char *merging);
void make_room_for_writes(struct pool *p, const char *volume, const char *except, uint64_t sectors);
/* refresh.c */
unsigned invalidate_volume_snapshots(struct pool *p, const char *volume);
