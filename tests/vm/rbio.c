/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * rbio: the guest-side I/O tool of the kernel tests and benchmarks.
 *
 *   rbio fill TARGET SEED                 fill TARGET with seeded data
 *   rbio write TARGET [MODEL] [options]   seeded random writes, mirrored to MODEL
 *   rbio cmp A B                          byte compare, exit 1 at first difference
 *   rbio sum TARGET                       64-bit checksum of the whole target
 *   rbio readlat TARGET [options]         random reads, prints latency percentiles
 *   rbio written TARGET SEED RUN [--then RUN]...
 *                                         every unit of TARGET holds its fill
 *                                         data (fill SEED) or the data of one
 *                                         write of one of the write RUNs, in
 *                                         the order they ran
 *   rbio cowmap COW                       validates a persistent COW and prints
 *                                         its canonical form
 *   rbio snapread ORIGIN SNAP FILL [options]
 *                                         origin writes racing snapshot reads
 *                                         of the same blocks, which must see
 *                                         the fill data (see cmd_snapread)
 *
 * write/readlat options (a RUN is the same options as the write that ran):
 *   --seed S --count N --bs BYTES --threads T (1..64) --direct
 *   --span BYTES   limit offsets to the first BYTES
 *   --latency      print latency percentiles
 *   --crowd        all threads walk one sequence of blocks, thread t writing
 *                  only slice t (BYTES/T bytes) of every block: the threads
 *                  race on the same chunks at the same time.  N ops per thread.
 *   --say-after K TEXT   print TEXT once K operations (of thread 0) are done
 *
 * Without --crowd, threads write disjoint blocks (block % threads == thread).
 * Either way no byte is written by two threads, so the final content is the
 * same whatever order the threads run in, and a MODEL file written alongside
 * is an exact model of the device.  The data of operation i at block b is a
 * function of (seed, i, b) only, which is what "written" checks against
 * after a power cut; its unit is the smallest write of any run (a slice with
 * --crowd, a block otherwise).  A RUN given --done ran to its end: a unit it
 * wrote holds its last write there or a write of a later run, never older
 * data.  It prints how many units hold each source.
 *
 * cowmap prints the header fields, the number of exceptions and areas, then
 * "old_chunk checksum" lines sorted by old_chunk: two COWs with the same
 * exceptions in another order print the same.  It fails (exit 1) on a bad
 * header, a non-zero byte in the header chunk or after an area's last entry,
 * an exception out of allocation order, a duplicate old_chunk, or an area
 * beyond the device.
 *
 * Numbers are decimal or 0x hex; anything else is an error.  Exit status:
 * 0 success, 1 a difference or a check failed, 2 bad usage or I/O error.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define GOLDEN UINT64_C(0x9e3779b97f4a7c15)

struct options {
        uint64_t seed;
        uint64_t count;
        uint64_t bs;
        uint64_t span;
        unsigned threads;
        bool direct;
        bool latency;
        bool crowd;
        bool done;
        uint64_t say_after;
        const char *say;
};

struct worker {
        const struct options *o;
        const char *target;
        const char *model;
        unsigned index;
        uint64_t blocks;
        pthread_barrier_t *barrier;
        double *latencies;
        uint64_t done;
        int error;
};

static uint64_t mix64(uint64_t z) {
        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        return z ^ (z >> 31);
}

static uint64_t splitmix64(uint64_t *state) {
        return mix64(*state += GOLDEN);
}

/* Word k of fill_pattern(seed): the pattern can be checked anywhere. */
static uint64_t pattern_word(uint64_t seed, uint64_t k) {
        return mix64(seed + (k + 1) * GOLDEN);
}

static void fill_pattern(void *buf, uint64_t len, uint64_t seed) {
        uint64_t *p = buf, state = seed;

        for (uint64_t i = 0; i < len / 8; i++)
                p[i] = splitmix64(&state);
}

/* Seeds of the data: fill works in MiB pieces, writes per (op, block). */
static uint64_t fill_seed(uint64_t seed, uint64_t off) {
        return seed ^ (off * UINT64_C(0x100000001b3));
}

static uint64_t op_seed(uint64_t seed, uint64_t i, uint64_t block) {
        return seed ^ (i << 20) ^ block;
}

static double now(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Strict: digits only (0x hex allowed), no sign, no blanks, no overflow. */
static int parse_num(const char *s, const char *what, uint64_t *v) {
        char *end;

        errno = 0;
        if (*s < '0' || *s > '9')
                goto bad;
        *v = strtoull(s, &end, 0);
        if (errno || *end)
                goto bad;
        return 0;
bad:
        fprintf(stderr, "rbio: bad number '%s' for %s\n", s, what);
        return -1;
}

static int open_target(const char *path, int flags, uint64_t *size) {
        struct stat st;
        int fd;

        fd = open(path, flags);
        if (fd < 0) {
                fprintf(stderr, "rbio: cannot open %s: %m\n", path);
                return -1;
        }
        if (fstat(fd, &st) < 0 ||
            (S_ISBLK(st.st_mode) ? ioctl(fd, BLKGETSIZE64, size) < 0 : (*size = st.st_size, 0))) {
                fprintf(stderr, "rbio: cannot get the size of %s: %m\n", path);
                close(fd);
                return -1;
        }
        if (!*size) {
                fprintf(stderr, "rbio: %s is empty\n", path);
                close(fd);
                return -1;
        }
        return fd;
}

static void *alloc_buf(uint64_t len) {
        void *p;

        if (posix_memalign(&p, 4096, len)) {
                fprintf(stderr, "rbio: out of memory\n");
                return NULL;
        }
        return p;
}

static int pwrite_all(int fd, const void *buf, uint64_t len, uint64_t off) {
        while (len) {
                ssize_t n = pwrite(fd, buf, len, off);

                if (n < 0)
                        return -errno;
                if (n == 0)
                        return -EIO;
                buf = (const char *) buf + n;
                len -= n;
                off += n;
        }
        return 0;
}

/* Reads exactly len bytes, or fails saying why. */
static int pread_exact(int fd, void *buf, uint64_t len, uint64_t off, const char *what) {
        uint64_t got = 0;

        while (got < len) {
                ssize_t n = pread(fd, (char *) buf + got, len - got, off + got);

                if (n < 0) {
                        fprintf(stderr, "rbio: read of %s at %" PRIu64 " failed: %m\n", what, off + got);
                        return -1;
                }
                if (n == 0) {
                        fprintf(stderr, "rbio: %s ends at %" PRIu64 ", before its size\n", what, off + got);
                        return -1;
                }
                got += n;
        }
        return 0;
}

static int close_checked(int fd, const char *what) {
        if (close(fd) < 0) {
                fprintf(stderr, "rbio: close of %s failed: %m\n", what);
                return -1;
        }
        return 0;
}

/* stdout carries results: a lost line must not look like success. */
static int flush_stdout(int rc) {
        if (fflush(stdout) || ferror(stdout)) {
                fprintf(stderr, "rbio: cannot write the output\n");
                return 2;
        }
        return rc;
}

static int cmd_fill(const char *target, uint64_t seed) {
        const uint64_t chunk = 1 << 20;
        uint64_t size, off;
        void *buf;
        int fd;

        fd = open_target(target, O_WRONLY, &size);
        if (fd < 0)
                return 2;
        buf = alloc_buf(chunk);
        if (!buf)
                return 2;
        for (off = 0; off < size; off += chunk) {
                uint64_t len = size - off < chunk ? size - off : chunk;

                fill_pattern(buf, len, fill_seed(seed, off));
                if (pwrite_all(fd, buf, len, off) < 0) {
                        fprintf(stderr, "rbio: write to %s failed: %m\n", target);
                        return 2;
                }
        }
        if (fsync(fd) < 0) {
                fprintf(stderr, "rbio: fsync of %s failed: %m\n", target);
                return 2;
        }
        free(buf);
        return close_checked(fd, target) < 0 ? 2 : 0;
}

/*
 * Block of operation i, a function of the options only.  Without --crowd
 * thread i % threads does it, within its residue class; with --crowd every
 * thread does every operation, on its own slice.
 */
static uint64_t op_block(const struct options *o, uint64_t blocks, uint64_t i) {
        uint64_t t = i % o->threads, state;

        if (o->crowd) {
                state = o->seed * 7919 + i;
                return splitmix64(&state) % blocks;
        }
        state = o->seed * 7919 + t * UINT64_C(1000003) + i;
        return (splitmix64(&state) % (blocks / o->threads)) * o->threads + t;
}

static uint64_t unit_bytes(const struct options *o) {
        return o->crowd ? o->bs / o->threads : o->bs;
}

static void *write_worker(void *arg) {
        struct worker *w = arg;
        const struct options *o = w->o;
        uint64_t size, first, step, slice = unit_bytes(o), at;
        int fd = -1, mfd = -1;
        void *buf = NULL;

        /* A failed setup still goes through the loop: the others wait at the barrier. */
        fd = open_target(w->target, O_WRONLY | (o->direct ? O_DIRECT : 0), &size);
        if (fd < 0)
                w->error = 1;
        if (w->model) {
                mfd = open(w->model, O_WRONLY);
                if (mfd < 0) {
                        fprintf(stderr, "rbio: cannot open %s: %m\n", w->model);
                        w->error = 1;
                }
        }
        buf = alloc_buf(o->bs);
        if (!buf)
                w->error = 1;
        first = o->crowd ? 0 : w->index;
        step = o->crowd ? 1 : o->threads;
        at = o->crowd ? w->index * slice : 0;
        for (uint64_t i = first; i < o->count; i += step) {
                uint64_t block = op_block(o, w->blocks, i), off = block * o->bs + at;
                double t0;

                /* In step, so that the threads meet on each fresh chunk. */
                if (w->barrier)
                        pthread_barrier_wait(w->barrier);
                if (w->error)
                        continue;       /* still at every barrier */
                t0 = now();
                fill_pattern(buf, o->bs, op_seed(o->seed, i, block));
                if (pwrite_all(fd, (char *) buf + at, slice, off) < 0) {
                        fprintf(stderr, "rbio: write at %" PRIu64 " failed: %m\n", off);
                        w->error = 1;
                        continue;
                }
                if (w->latencies)
                        w->latencies[w->done] = now() - t0;
                w->done++;
                if (mfd >= 0 && pwrite_all(mfd, (char *) buf + at, slice, off) < 0) {
                        fprintf(stderr, "rbio: write to %s failed: %m\n", w->model);
                        w->error = 1;
                }
                if (o->say && w->index == 0 && w->done == o->say_after) {
                        printf("%s\n", o->say);
                        fflush(stdout);
                }
        }
        if (w->error)
                goto fail;
        if (close_checked(fd, w->target) < 0 || (mfd >= 0 && close_checked(mfd, w->model) < 0))
                w->error = 1;
        free(buf);
        return NULL;
fail:
        w->error = 1;
        if (fd >= 0)
                close(fd);
        if (mfd >= 0)
                close(mfd);
        free(buf);
        return NULL;
}

static void *read_worker(void *arg) {
        struct worker *w = arg;
        const struct options *o = w->o;
        uint64_t size;
        void *buf;
        int fd;

        fd = open_target(w->target, O_RDONLY | (o->direct ? O_DIRECT : 0), &size);
        if (fd < 0)
                goto fail;
        buf = alloc_buf(o->bs);
        if (!buf)
                goto fail;
        for (uint64_t i = w->index; i < o->count; i += o->threads) {
                uint64_t block = op_block(o, w->blocks, i);
                double t0 = now();

                if (pread_exact(fd, buf, o->bs, block * o->bs, w->target) < 0)
                        goto fail;
                w->latencies[w->done++] = now() - t0;
        }
        close(fd);
        free(buf);
        return NULL;
fail:
        w->error = 1;
        return NULL;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;

        return x < y ? -1 : x > y;
}

static void print_latencies(struct worker *w, unsigned n, const char *what) {
        uint64_t total = 0, k = 0;
        double *all, sum = 0;

        for (unsigned t = 0; t < n; t++)
                total += w[t].done;
        if (!total)
                return;
        all = calloc(total, sizeof(double));
        if (!all) {
                fprintf(stderr, "rbio: out of memory\n");
                return;
        }
        for (unsigned t = 0; t < n; t++)
                for (uint64_t i = 0; i < w[t].done; i++) {
                        all[k++] = w[t].latencies[i];
                        sum += w[t].latencies[i];
                }
        qsort(all, total, sizeof(double), cmp_double);
        printf("%s_lat_ms mean=%.3f p50=%.3f p99=%.3f max=%.3f n=%" PRIu64 "\n", what,
               sum / total * 1e3, all[total / 2] * 1e3, all[total * 99 / 100] * 1e3,
               all[total - 1] * 1e3, total);
        free(all);
}

/* Blocks of a run over a target of size bytes, or 0 (said why) if too few. */
static uint64_t run_blocks(const char *target, uint64_t size, const struct options *o) {
        uint64_t blocks;

        if (o->span && o->span < size)
                size = o->span;
        blocks = size / o->bs;
        if (blocks < (o->crowd ? 1 : o->threads)) {
                fprintf(stderr, "rbio: %s: %" PRIu64 " bytes hold too few %" PRIu64
                        "-byte blocks for %u thread(s)\n", target, size, o->bs, o->threads);
                return 0;
        }
        return blocks;
}

static int flush_target(const char *target) {
        int fd = open(target, O_WRONLY);

        if (fd < 0) {
                fprintf(stderr, "rbio: cannot open %s: %m\n", target);
                return -1;
        }
        if (fsync(fd) < 0) {
                fprintf(stderr, "rbio: fsync of %s failed: %m\n", target);
                close(fd);
                return -1;
        }
        return close_checked(fd, target);
}

static int run_workers(const char *target, const char *model, const struct options *o,
                       void *(*fn)(void *), bool latencies, const char *what) {
        struct worker w[64] = {};
        pthread_t tid[64];
        pthread_barrier_t barrier;
        uint64_t size, blocks, done = 0;
        unsigned started;
        double t0, t1;
        int fd, bad = 0;

        fd = open_target(target, O_RDONLY, &size);
        if (fd < 0)
                return 2;
        close(fd);
        blocks = run_blocks(target, size, o);
        if (!blocks)
                return 2;
        if (o->crowd && pthread_barrier_init(&barrier, NULL, o->threads)) {
                fprintf(stderr, "rbio: cannot make a barrier\n");
                return 2;
        }

        t0 = now();
        for (started = 0; started < o->threads; started++) {
                unsigned t = started;

                w[t] = (struct worker) {
                        .o = o, .target = target, .model = model, .index = t,
                        .blocks = blocks, .barrier = o->crowd ? &barrier : NULL,
                };
                if (latencies) {
                        w[t].latencies = calloc(o->crowd ? o->count : o->count / o->threads + 1,
                                                sizeof(double));
                        if (!w[t].latencies) {
                                fprintf(stderr, "rbio: out of memory\n");
                                break;
                        }
                }
                if (pthread_create(&tid[t], NULL, fn, &w[t])) {
                        fprintf(stderr, "rbio: cannot start thread %u\n", t);
                        break;
                }
        }
        if (started < o->threads) {
                /* Threads waiting at the barrier for the missing ones never return. */
                if (o->crowd)
                        _exit(2);
                bad = 1;
        }
        for (unsigned t = 0; t < started; t++) {
                pthread_join(tid[t], NULL);
                bad |= w[t].error;
                done += w[t].done;
        }
        /*
         * One flush once every write is done, not one per thread as it ends:
         * dm-log-writes logs a completed write at the first flush mapped after
         * it, so a thread's flush racing the target's own FUA commit could log
         * a COW copy after the commit that points at it, a crash point no
         * disk can show.
         */
        if (fn == write_worker && !bad && flush_target(target) < 0)
                bad = 1;
        t1 = now();
        printf("%s_elapsed_s=%.3f ops=%" PRIu64 " bs=%" PRIu64 "\n", what, t1 - t0, done, o->bs);
        if (latencies)
                print_latencies(w, started, what);
        return flush_stdout(bad ? 2 : 0);
}

static int cmd_cmp(const char *a, const char *b) {
        const uint64_t chunk = 1 << 20;
        uint64_t sa, sb, off;
        char *ba, *bb;
        int fa, fb;

        fa = open_target(a, O_RDONLY, &sa);
        fb = open_target(b, O_RDONLY, &sb);
        if (fa < 0 || fb < 0)
                return 2;
        if (sa != sb) {
                printf("rbio: %s has %" PRIu64 " bytes, %s has %" PRIu64 "\n", a, sa, b, sb);
                return flush_stdout(1);
        }
        ba = alloc_buf(chunk);
        bb = alloc_buf(chunk);
        if (!ba || !bb)
                return 2;
        for (off = 0; off < sa; off += chunk) {
                uint64_t len = sa - off < chunk ? sa - off : chunk;

                if (pread_exact(fa, ba, len, off, a) < 0 || pread_exact(fb, bb, len, off, b) < 0)
                        return 2;
                if (memcmp(ba, bb, len)) {
                        uint64_t i = 0;

                        while (ba[i] == bb[i])
                                i++;
                        printf("rbio: %s and %s differ at byte %" PRIu64 "\n", a, b, off + i);
                        return flush_stdout(1);
                }
        }
        return 0;
}

static uint64_t sum_update(uint64_t h, const uint64_t *buf, uint64_t len) {
        for (uint64_t i = 0; i < len / 8; i++)
                h = mix64((h ^ buf[i]) + GOLDEN);
        return h;
}

static int cmd_sum(const char *target) {
        const uint64_t chunk = 1 << 20;
        uint64_t size, off, h = UINT64_C(0xcbf29ce484222325);
        uint64_t *buf;
        int fd;

        fd = open_target(target, O_RDONLY, &size);
        if (fd < 0)
                return 2;
        buf = alloc_buf(chunk);
        if (!buf)
                return 2;
        for (off = 0; off < size; off += chunk) {
                uint64_t len = size - off < chunk ? size - off : chunk;

                if (pread_exact(fd, buf, len, off, target) < 0)
                        return 2;
                h = sum_update(h, buf, len);
        }
        printf("%016" PRIx64 "\n", h);
        return flush_stdout(0);
}

/* Options from argv[first] on; argv[*stop] is a "--then" or argc. */
static int parse_options(int argc, char **argv, int first, struct options *o,
                         const char **model, int *stop) {
        uint64_t threads = 1;

        *o = (struct options) { .seed = 1, .count = 1000, .bs = 4096 };
        if (stop)
                *stop = argc;
        for (int i = first; i < argc; i++) {
                const char *a = argv[i];
                int bad = 0;

                if (stop && !strcmp(a, "--then")) {
                        *stop = i;
                        break;
                }
                if (!strcmp(a, "--direct"))
                        o->direct = true;
                else if (!strcmp(a, "--latency"))
                        o->latency = true;
                else if (!strcmp(a, "--crowd"))
                        o->crowd = true;
                else if (stop && !strcmp(a, "--done"))
                        o->done = true;
                else if (i + 1 < argc && !strcmp(a, "--seed"))
                        bad = parse_num(argv[++i], a, &o->seed);
                else if (i + 1 < argc && !strcmp(a, "--count"))
                        bad = parse_num(argv[++i], a, &o->count);
                else if (i + 1 < argc && !strcmp(a, "--bs"))
                        bad = parse_num(argv[++i], a, &o->bs);
                else if (i + 1 < argc && !strcmp(a, "--span"))
                        bad = parse_num(argv[++i], a, &o->span);
                else if (i + 1 < argc && !strcmp(a, "--threads"))
                        bad = parse_num(argv[++i], a, &threads);
                else if (i + 2 < argc && !strcmp(a, "--say-after")) {
                        bad = parse_num(argv[++i], a, &o->say_after);
                        o->say = argv[++i];
                } else if (a[0] != '-' && model && !*model)
                        *model = a;
                else {
                        fprintf(stderr, "rbio: unknown argument '%s'\n", a);
                        return -1;
                }
                if (bad)
                        return -1;
        }
        if (stop && *stop == first) {
                fprintf(stderr, "rbio: an empty run\n");
                return -1;
        }
        if (!threads || threads > 64) {
                fprintf(stderr, "rbio: --threads must be 1 to 64\n");
                return -1;
        }
        o->threads = threads;
        if (!o->count || o->count > UINT32_MAX) {
                fprintf(stderr, "rbio: --count must be 1 to %" PRIu32 "\n", UINT32_MAX);
                return -1;
        }
        if (!o->bs || o->bs % 512 || o->bs > (UINT64_C(1) << 30)) {
                fprintf(stderr, "rbio: --bs must be a multiple of 512, at most 1 GiB\n");
                return -1;
        }
        if (o->crowd && o->bs % (512 * o->threads)) {
                fprintf(stderr, "rbio: --crowd needs --bs a multiple of 512 * threads\n");
                return -1;
        }
        if (o->say && (!o->say_after || o->say_after > o->count)) {
                fprintf(stderr, "rbio: --say-after must be 1 to --count\n");
                return -1;
        }
        return 0;
}

/* Operations of one run indexed by block: ops[start[b] .. start[b + 1]). */
struct run {
        struct options o;
        uint64_t blocks;
        uint64_t *start;
        uint32_t *ops;
        uint64_t units;         /* units found holding this run's data */
};

static int index_run(struct run *r, const char *target, uint64_t size) {
        uint64_t *fill;

        r->blocks = run_blocks(target, size, &r->o);
        if (!r->blocks)
                return -1;
        r->start = calloc(r->blocks + 1, sizeof(*r->start));
        fill = calloc(r->blocks, sizeof(*fill));
        r->ops = calloc(r->o.count, sizeof(*r->ops));
        if (!r->start || !fill || !r->ops) {
                fprintf(stderr, "rbio: out of memory\n");
                return -1;
        }
        for (uint64_t i = 0; i < r->o.count; i++)
                r->start[op_block(&r->o, r->blocks, i) + 1]++;
        for (uint64_t b = 0; b < r->blocks; b++)
                r->start[b + 1] += r->start[b];
        for (uint64_t i = 0; i < r->o.count; i++) {
                uint64_t b = op_block(&r->o, r->blocks, i);

                r->ops[r->start[b] + fill[b]++] = i;
        }
        free(fill);
        return 0;
}

/* Does buf (words w0.. of a unit) hold words w0.. of fill_pattern(seed)? */
static bool is_pattern(const uint64_t *buf, uint64_t words, uint64_t seed, uint64_t w0) {
        for (uint64_t k = 0; k < words; k++)
                if (buf[k] != pattern_word(seed, w0 + k))
                        return false;
        return true;
}

/* Does the unit at byte pos hold the data of fill SEED there? */
static bool is_fill(const uint64_t *p, uint64_t unit, uint64_t seed, uint64_t pos) {
        const uint64_t mib = 1 << 20;
        uint64_t base = pos & ~(mib - 1), head = base + mib - pos;

        /* fill seeds each MiB: a unit may cross into the next one. */
        if (head >= unit)
                return is_pattern(p, unit / 8, fill_seed(seed, base), (pos - base) / 8);
        return is_pattern(p, head / 8, fill_seed(seed, base), (pos - base) / 8) &&
               is_pattern(p + head / 8, (unit - head) / 8, fill_seed(seed, base + mib), 0);
}

static int cmd_written(int argc, char **argv) {
        const char *target = argv[2];
        uint64_t size, fill, bs, unit, units_fill = 0, bad = 0;
        struct run runs[16];
        unsigned nruns = 0;
        uint64_t *buf;
        int fd, at = 4;

        if (parse_num(argv[3], "the fill seed", &fill) < 0)
                return 2;
        fd = open_target(target, O_RDONLY, &size);
        if (fd < 0)
                return 2;
        while (at < argc) {
                struct run *r = &runs[nruns];

                if (nruns == 16) {
                        fprintf(stderr, "rbio: at most 16 runs\n");
                        return 2;
                }
                *r = (struct run) {};
                if (parse_options(argc, argv, at, &r->o, NULL, &at) < 0 || index_run(r, target, size) < 0)
                        return 2;
                nruns++;
                at++;           /* past "--then" */
        }
        if (!nruns) {
                fprintf(stderr, "rbio: written needs at least one run\n");
                return 2;
        }
        bs = runs[0].o.bs;
        unit = unit_bytes(&runs[0].o);
        for (unsigned r = 1; r < nruns; r++) {
                if (runs[r].o.bs != bs) {
                        fprintf(stderr, "rbio: written needs one --bs for all runs\n");
                        return 2;
                }
                if (unit_bytes(&runs[r].o) < unit)
                        unit = unit_bytes(&runs[r].o);
        }
        if (unit > (1 << 20)) {
                fprintf(stderr, "rbio: written handles writes of at most 1 MiB\n");
                return 2;
        }
        buf = alloc_buf(bs);
        if (!buf)
                return 2;
        for (uint64_t off = 0; off + bs <= size; off += bs) {
                uint64_t block = off / bs;

                int last_done = -1;
                unsigned first;

                if (pread_exact(fd, buf, bs, off, target) < 0)
                        return 2;
                for (unsigned r = 0; r < nruns; r++)
                        if (runs[r].o.done && block < runs[r].blocks &&
                            runs[r].start[block] < runs[r].start[block + 1])
                                last_done = r;
                first = last_done < 0 ? 0 : last_done;
                for (uint64_t u = 0; u < bs; u += unit) {
                        const uint64_t *p = buf + u / 8;
                        bool found = false;

                        if (last_done < 0 && is_fill(p, unit, fill, off + u)) {
                                units_fill++;
                                continue;
                        }
                        for (unsigned r = first; r < nruns && !found; r++) {
                                const struct run *run = &runs[r];
                                uint64_t j = 0;

                                if (block >= run->blocks)
                                        continue;
                                /* Ops are listed by index: the last one is the final write. */
                                j = (int) r == last_done ? run->start[block + 1] - 1 : run->start[block];
                                for (; j < run->start[block + 1]; j++) {
                                        uint64_t seed = op_seed(run->o.seed, run->ops[j], block);

                                        if (is_pattern(p, unit / 8, seed, u / 8)) {
                                                found = true;
                                                runs[r].units++;
                                                break;
                                        }
                                }
                        }
                        if (!found && !bad++)
                                printf("rbio: %s: bytes %" PRIu64 "..%" PRIu64
                                       " hold no data they may hold\n",
                                       target, off + u, off + u + unit - 1);
                }
        }
        printf("written: unit=%" PRIu64 " fill=%" PRIu64, unit, units_fill);
        for (unsigned r = 0; r < nruns; r++)
                printf(" run%u=%" PRIu64, r + 1, runs[r].units);
        printf(" bad=%" PRIu64 "\n", bad);
        return flush_stdout(bad ? 1 : 0);
}

/* cowmap */
#define SNAP_MAGIC 0x70416e53

struct cow_exception {
        uint64_t old_chunk;
        uint64_t sum;
};

static uint64_t le64(const unsigned char *p) {
        uint64_t v = 0;

        for (int i = 7; i >= 0; i--)
                v = v << 8 | p[i];
        return v;
}

static uint32_t le32(const unsigned char *p) {
        return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t) p[3] << 24;
}

static int cmp_exception(const void *a, const void *b) {
        const struct cow_exception *x = a, *y = b;

        return x->old_chunk < y->old_chunk ? -1 : x->old_chunk > y->old_chunk;
}

static bool all_zero(const unsigned char *p, uint64_t len) {
        for (uint64_t i = 0; i < len; i++)
                if (p[i])
                        return false;
        return true;
}

#define COW_BAD(...) do { fprintf(stderr, "rbio: %s: ", cow); fprintf(stderr, __VA_ARGS__); \
                          fprintf(stderr, "\n"); return 1; } while (0)

static int cmd_cowmap(const char *cow) {
        uint64_t size, cb, epa, chunks, n = 0, cap = 0, area;
        uint32_t magic, valid, version, cs;
        struct cow_exception *ex = NULL;
        unsigned char *meta, *data;
        int fd;

        fd = open_target(cow, O_RDONLY, &size);
        if (fd < 0)
                return 2;
        meta = alloc_buf(4096);
        if (!meta || pread_exact(fd, meta, 16, 0, cow) < 0)
                return 2;
        magic = le32(meta);
        valid = le32(meta + 4);
        version = le32(meta + 8);
        cs = le32(meta + 12);
        if (magic != SNAP_MAGIC)
                COW_BAD("magic 0x%08" PRIx32 ", not SnAp", magic);
        if (version != 1)
                COW_BAD("version %" PRIu32, version);
        if (!cs || cs & (cs - 1) || cs > (UINT32_C(1) << 21))
                COW_BAD("chunk size %" PRIu32 " sectors", cs);
        cb = (uint64_t) cs * 512;
        epa = cb / 16;
        chunks = size / cb;
        free(meta);
        meta = alloc_buf(cb);
        data = alloc_buf(cb);
        if (!meta || !data)
                return 2;
        if (chunks < 2)
                COW_BAD("%" PRIu64 " bytes hold no metadata area", size);
        if (pread_exact(fd, meta, cb, 0, cow) < 0)
                return 2;
        if (!all_zero(meta + 16, cb - 16))
                COW_BAD("the header chunk has data after the header");
        for (area = 0;; area++) {
                uint64_t where = 1 + area * (epa + 1), k;

                if (where >= chunks)
                        COW_BAD("area %" PRIu64 " (chunk %" PRIu64 ") is beyond the device, the one before is full",
                                area, where);
                if (pread_exact(fd, meta, cb, where * cb, cow) < 0)
                        return 2;
                for (k = 0; k < epa; k++) {
                        uint64_t old = le64(meta + 16 * k), new = le64(meta + 16 * k + 8);

                        if (!new)
                                break;
                        /* Commits in allocation order: entry k is the k-th chunk after the area. */
                        if (new != where + 1 + k)
                                COW_BAD("area %" PRIu64 " entry %" PRIu64 " points to chunk %" PRIu64
                                        ", allocation order gives %" PRIu64, area, k, new, where + 1 + k);
                        if (new >= chunks)
                                COW_BAD("area %" PRIu64 " entry %" PRIu64 " points beyond the device", area, k);
                        if (n == cap) {
                                cap = cap ? cap * 2 : 1024;
                                ex = realloc(ex, cap * sizeof(*ex));
                                if (!ex) {
                                        fprintf(stderr, "rbio: out of memory\n");
                                        return 2;
                                }
                        }
                        if (pread_exact(fd, data, cb, new * cb, cow) < 0)
                                return 2;
                        ex[n].old_chunk = old;
                        ex[n].sum = sum_update(UINT64_C(0xcbf29ce484222325), (uint64_t *) data, cb);
                        n++;
                }
                if (k < epa) {
                        if (!all_zero(meta + 16 * k, cb - 16 * k))
                                COW_BAD("area %" PRIu64 " has data after its last entry (%" PRIu64 ")", area, k);
                        break;
                }
        }
        qsort(ex, n, sizeof(*ex), cmp_exception);
        for (uint64_t i = 1; i < n; i++)
                if (ex[i].old_chunk == ex[i - 1].old_chunk)
                        COW_BAD("two exceptions for chunk %" PRIu64, ex[i].old_chunk);
        printf("header magic=SnAp valid=%" PRIu32 " version=%" PRIu32 " chunk=%" PRIu32 "\n",
               valid, version, cs);
        printf("exceptions=%" PRIu64 " areas=%" PRIu64 "\n", n, area + 1);
        for (uint64_t i = 0; i < n; i++)
                printf("%" PRIu64 " %016" PRIx64 "\n", ex[i].old_chunk, ex[i].sum);
        free(ex);
        close(fd);
        return flush_stdout(0);
}

/*
 * snapread ORIGIN SNAP FILL [options]: one thread writes blocks 0, 1, ...
 * of ORIGIN (--count of them, wrapping, --seed data, O_DIRECT) while
 * --threads readers keep reading the block being written through SNAP, a
 * snapshot taken when ORIGIN held fill FILL.  Every snapshot read must
 * return the fill data: a read that sees the new data went to the origin
 * after the write it should have preceded.  Exit 1 on such a read.
 */
struct snapread {
        const char *snap;
        uint64_t fill, bs;
        atomic_uint_fast64_t pos;       /* the block being written */
        atomic_bool stop;
        atomic_uint_fast64_t reads, stale;
        int error;
};

static void *snapread_reader(void *arg) {
        struct snapread *r = arg;
        uint64_t size, *buf;
        int fd;

        fd = open_target(r->snap, O_RDONLY | O_DIRECT, &size);
        buf = alloc_buf(r->bs);
        if (fd < 0 || !buf) {
                r->error = 1;
                return NULL;
        }
        while (!atomic_load(&r->stop)) {
                uint64_t block = atomic_load(&r->pos), off = block * r->bs;
                uint64_t piece = off & ~(uint64_t) ((1 << 20) - 1);

                if (pread_exact(fd, buf, r->bs, off, r->snap) < 0) {
                        r->error = 1;
                        break;
                }
                atomic_fetch_add(&r->reads, 1);
                if (!is_pattern(buf, r->bs / 8, fill_seed(r->fill, piece), (off - piece) / 8) &&
                    atomic_fetch_add(&r->stale, 1) == 0)
                        fprintf(stderr, "rbio: %s block %" PRIu64 " is not the snapshot's data\n",
                                r->snap, block);
        }
        close(fd);
        free(buf);
        return NULL;
}

static int cmd_snapread(int argc, char **argv) {
        struct snapread r = { .snap = argv[3] };
        struct options o;
        pthread_t tid[64];
        uint64_t size, blocks, i;
        unsigned started = 0;
        void *buf;
        int fd, bad = 0;

        if (parse_num(argv[4], "the fill seed", &r.fill) < 0 ||
            parse_options(argc, argv, 5, &o, NULL, NULL) < 0)
                return 2;
        if ((1 << 20) % o.bs) {
                fprintf(stderr, "rbio: snapread needs --bs a divisor of 1 MiB\n");
                return 2;
        }
        r.bs = o.bs;
        fd = open_target(argv[2], O_WRONLY | O_DIRECT, &size);
        if (fd < 0)
                return 2;
        buf = alloc_buf(o.bs);
        blocks = size / o.bs;
        if (!buf || !blocks)
                return 2;
        for (; started < o.threads; started++)
                if (pthread_create(&tid[started], NULL, snapread_reader, &r)) {
                        fprintf(stderr, "rbio: cannot start thread %u\n", started);
                        bad = 2;
                        break;
                }
        for (i = 0; i < o.count && !bad && !r.error && !atomic_load(&r.stale); i++) {
                uint64_t block = i % blocks;

                atomic_store(&r.pos, block);
                fill_pattern(buf, o.bs, op_seed(o.seed, i, block));
                if (pwrite_all(fd, buf, o.bs, block * o.bs) < 0) {
                        fprintf(stderr, "rbio: write to %s failed: %m\n", argv[2]);
                        bad = 2;
                }
        }
        atomic_store(&r.stop, true);
        for (unsigned t = 0; t < started; t++)
                pthread_join(tid[t], NULL);
        if (r.error)
                bad = 2;
        printf("snapread: writes=%" PRIu64 " reads=%" PRIu64 " stale=%" PRIu64 "\n",
               i, (uint64_t) atomic_load(&r.reads), (uint64_t) atomic_load(&r.stale));
        free(buf);
        close(fd);
        if (!bad && atomic_load(&r.stale))
                bad = 1;
        return flush_stdout(bad);
}

int main(int argc, char **argv) {
        struct options o;
        const char *model = NULL;
        uint64_t seed;

        if (argc == 4 && !strcmp(argv[1], "fill"))
                return parse_num(argv[3], "the seed", &seed) < 0 ? 2 : cmd_fill(argv[2], seed);
        if (argc == 4 && !strcmp(argv[1], "cmp"))
                return cmd_cmp(argv[2], argv[3]);
        if (argc == 3 && !strcmp(argv[1], "sum"))
                return cmd_sum(argv[2]);
        if (argc == 3 && !strcmp(argv[1], "cowmap"))
                return cmd_cowmap(argv[2]);
        if (argc >= 5 && !strcmp(argv[1], "written"))
                return cmd_written(argc, argv);
        if (argc >= 3 && !strcmp(argv[1], "write")) {
                if (parse_options(argc, argv, 3, &o, &model, NULL) < 0)
                        return 2;
                return run_workers(argv[2], model, &o, write_worker, o.latency, "write");
        }
        if (argc >= 3 && !strcmp(argv[1], "readlat")) {
                if (parse_options(argc, argv, 3, &o, NULL, NULL) < 0)
                        return 2;
                if (o.crowd) {
                        fprintf(stderr, "rbio: readlat has no --crowd\n");
                        return 2;
                }
                return run_workers(argv[2], NULL, &o, read_worker, true, "read");
        }
        if (argc >= 5 && !strcmp(argv[1], "snapread"))
                return cmd_snapread(argc, argv);
        fprintf(stderr, "usage: rbio fill|write|cmp|sum|readlat|written|cowmap|snapread TARGET ...\n");
        return 2;
}
