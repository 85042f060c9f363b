/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * rbio: the guest-side I/O tool of the kernel tests and benchmarks.
 *
 *   rbio fill TARGET SEED                 fill TARGET with seeded data
 *   rbio write TARGET [MODEL] [options]   seeded random writes, mirrored to MODEL
 *   rbio cmp A B                          byte compare, exit 1 at first difference
 *   rbio sum TARGET                       64-bit checksum of the whole target
 *   rbio readlat TARGET [options]         random reads, prints latency percentiles
 *
 * write/readlat options: --seed S --count N --bs BYTES --threads T --direct
 * --span BYTES (limit offsets to the first BYTES), --latency (print percentiles).
 *
 * Threads write disjoint blocks (block % threads == thread), so the final
 * content is the same whatever order the threads run in, and a MODEL file
 * written alongside is an exact model of the device.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct options {
        uint64_t seed;
        uint64_t count;
        uint64_t bs;
        uint64_t span;
        unsigned threads;
        bool direct;
        bool latency;
};

struct worker {
        const struct options *o;
        const char *target;
        const char *model;
        unsigned index;
        uint64_t blocks;
        double *latencies;
        uint64_t done;
        int error;
};

static uint64_t splitmix64(uint64_t *state) {
        uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        return z ^ (z >> 31);
}

static void fill_pattern(void *buf, uint64_t len, uint64_t seed) {
        uint64_t *p = buf, state = seed;

        for (uint64_t i = 0; i < len / 8; i++)
                p[i] = splitmix64(&state);
}

static double now(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int open_target(const char *path, int flags, uint64_t *size) {
        struct stat st;
        int fd;

        fd = open(path, flags);
        if (fd < 0) {
                fprintf(stderr, "rbio: cannot open %s: %m\n", path);
                return -1;
        }
        if (fstat(fd, &st) < 0)
                return -1;
        if (S_ISBLK(st.st_mode)) {
                if (ioctl(fd, BLKGETSIZE64, size) < 0)
                        return -1;
        } else
                *size = st.st_size;
        return fd;
}

static void *alloc_buf(uint64_t len) {
        void *p;

        if (posix_memalign(&p, 4096, len))
                return NULL;
        return p;
}

static int pwrite_all(int fd, const void *buf, uint64_t len, uint64_t off) {
        while (len) {
                ssize_t n = pwrite(fd, buf, len, off);

                if (n < 0)
                        return -errno;
                buf = (const char *) buf + n;
                len -= n;
                off += n;
        }
        return 0;
}

static int pread_all(int fd, void *buf, uint64_t len, uint64_t off) {
        uint64_t got = 0;

        while (got < len) {
                ssize_t n = pread(fd, (char *) buf + got, len - got, off + got);

                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                got += n;
        }
        return got;
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
        for (off = 0; off < size; off += chunk) {
                uint64_t len = size - off < chunk ? size - off : chunk;

                fill_pattern(buf, len, seed ^ (off * UINT64_C(0x100000001b3)));
                if (pwrite_all(fd, buf, len, off) < 0) {
                        fprintf(stderr, "rbio: write to %s failed: %m\n", target);
                        return 2;
                }
        }
        if (fsync(fd) < 0)
                return 2;
        close(fd);
        return 0;
}

/* Block number of operation i of a worker: only blocks of its residue class. */
static uint64_t pick_block(const struct worker *w, uint64_t i) {
        uint64_t state = w->o->seed * 7919 + w->index * UINT64_C(1000003) + i;
        uint64_t classes = w->blocks / w->o->threads;

        if (!classes)
                return w->index;
        return (splitmix64(&state) % classes) * w->o->threads + w->index;
}

static void *write_worker(void *arg) {
        struct worker *w = arg;
        const struct options *o = w->o;
        int fd, mfd = -1;
        uint64_t size;
        void *buf;

        fd = open_target(w->target, O_WRONLY | (o->direct ? O_DIRECT : 0), &size);
        if (fd < 0)
                goto fail;
        if (w->model) {
                mfd = open(w->model, O_WRONLY);
                if (mfd < 0)
                        goto fail;
        }
        buf = alloc_buf(o->bs);
        for (uint64_t i = w->index; i < o->count; i += o->threads) {
                uint64_t block = pick_block(w, i);
                double t0 = now();

                fill_pattern(buf, o->bs, o->seed ^ (i << 20) ^ block);
                if (pwrite_all(fd, buf, o->bs, block * o->bs) < 0) {
                        fprintf(stderr, "rbio: write at %" PRIu64 " failed: %m\n", block * o->bs);
                        goto fail;
                }
                if (w->latencies)
                        w->latencies[w->done] = now() - t0;
                w->done++;
                if (mfd >= 0 && pwrite_all(mfd, buf, o->bs, block * o->bs) < 0)
                        goto fail;
        }
        if (fsync(fd) < 0)
                goto fail;
        close(fd);
        if (mfd >= 0)
                close(mfd);
        return NULL;
fail:
        w->error = 1;
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
        for (uint64_t i = w->index; i < o->count; i += o->threads) {
                uint64_t block = pick_block(w, i);
                double t0 = now();

                if (pread_all(fd, buf, o->bs, block * o->bs) < 0)
                        goto fail;
                w->latencies[w->done++] = now() - t0;
        }
        close(fd);
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

static int run_workers(const char *target, const char *model, const struct options *o,
                       void *(*fn)(void *), bool latencies, const char *what) {
        struct worker w[64] = {};
        pthread_t tid[64];
        uint64_t size;
        double t0, t1;
        int fd, bad = 0;

        fd = open_target(target, O_RDONLY, &size);
        if (fd < 0)
                return 2;
        close(fd);
        if (o->span && o->span < size)
                size = o->span;

        t0 = now();
        for (unsigned t = 0; t < o->threads; t++) {
                w[t] = (struct worker) {
                        .o = o, .target = target, .model = model, .index = t,
                        .blocks = size / o->bs,
                        .latencies = latencies ? calloc(o->count / o->threads + 1, sizeof(double)) : NULL,
                };
                pthread_create(&tid[t], NULL, fn, &w[t]);
        }
        for (unsigned t = 0; t < o->threads; t++) {
                pthread_join(tid[t], NULL);
                bad |= w[t].error;
        }
        t1 = now();
        printf("%s_elapsed_s=%.3f ops=%" PRIu64 " bs=%" PRIu64 "\n", what, t1 - t0, o->count, o->bs);
        if (latencies)
                print_latencies(w, o->threads, what);
        return bad ? 2 : 0;
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
                return 1;
        }
        ba = alloc_buf(chunk);
        bb = alloc_buf(chunk);
        for (off = 0; off < sa; off += chunk) {
                int na = pread_all(fa, ba, chunk, off), nb = pread_all(fb, bb, chunk, off);

                if (na < 0 || nb < 0) {
                        printf("rbio: read error at %" PRIu64 "\n", off);
                        return 2;
                }
                if (na != nb || memcmp(ba, bb, na)) {
                        for (int i = 0; i < na; i++)
                                if (ba[i] != bb[i]) {
                                        printf("rbio: %s and %s differ at byte %" PRIu64 "\n",
                                               a, b, off + i);
                                        break;
                                }
                        return 1;
                }
        }
        return 0;
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
        for (off = 0; off < size; off += chunk) {
                int n = pread_all(fd, buf, chunk, off);

                if (n < 0) {
                        fprintf(stderr, "rbio: read error at %" PRIu64 "\n", off);
                        return 2;
                }
                for (int i = 0; i < n / 8; i++) {
                        uint64_t s = h ^ buf[i];
                        h = splitmix64(&s);
                }
        }
        printf("%016" PRIx64 "\n", h);
        return 0;
}

static int parse_options(int argc, char **argv, int first, struct options *o,
                         const char **model) {
        *o = (struct options) { .seed = 1, .count = 1000, .bs = 4096, .threads = 1 };
        for (int i = first; i < argc; i++) {
                if (!strcmp(argv[i], "--direct"))
                        o->direct = true;
                else if (!strcmp(argv[i], "--latency"))
                        o->latency = true;
                else if (i + 1 < argc && !strcmp(argv[i], "--seed"))
                        o->seed = strtoull(argv[++i], NULL, 0);
                else if (i + 1 < argc && !strcmp(argv[i], "--count"))
                        o->count = strtoull(argv[++i], NULL, 0);
                else if (i + 1 < argc && !strcmp(argv[i], "--bs"))
                        o->bs = strtoull(argv[++i], NULL, 0);
                else if (i + 1 < argc && !strcmp(argv[i], "--span"))
                        o->span = strtoull(argv[++i], NULL, 0);
                else if (i + 1 < argc && !strcmp(argv[i], "--threads"))
                        o->threads = strtoul(argv[++i], NULL, 0);
                else if (argv[i][0] != '-' && model && !*model)
                        *model = argv[i];
                else {
                        fprintf(stderr, "rbio: unknown argument '%s'\n", argv[i]);
                        return -1;
                }
        }
        if (!o->threads || o->threads > 64 || !o->bs || o->bs % 512) {
                fprintf(stderr, "rbio: bad --threads or --bs\n");
                return -1;
        }
        return 0;
}

int main(int argc, char **argv) {
        struct options o;
        const char *model = NULL;

        if (argc >= 4 && !strcmp(argv[1], "fill"))
                return cmd_fill(argv[2], strtoull(argv[3], NULL, 0));
        if (argc == 4 && !strcmp(argv[1], "cmp"))
                return cmd_cmp(argv[2], argv[3]);
        if (argc == 3 && !strcmp(argv[1], "sum"))
                return cmd_sum(argv[2]);
        if (argc >= 3 && !strcmp(argv[1], "write")) {
                if (parse_options(argc, argv, 3, &o, &model) < 0)
                        return 2;
                return run_workers(argv[2], model, &o, write_worker, o.latency, "write");
        }
        if (argc >= 3 && !strcmp(argv[1], "readlat")) {
                if (parse_options(argc, argv, 3, &o, NULL) < 0)
                        return 2;
                return run_workers(argv[2], NULL, &o, read_worker, true, "read");
        }
        fprintf(stderr, "usage: rbio fill|write|cmp|sum|readlat TARGET ...\n");
        return 2;
}
