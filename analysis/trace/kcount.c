/* kcount: `krig trace stats`' count in one call, with no array per event: every cpu's
 * pages read from the file, decompressed a chunk at a time (zstd) or read 64 pages at a
 * time (uncompressed), walked while they are in the cache, the events counted by type id
 * and, for `--group-by`, one event's scalar field counted by value.
 * nthreads threads (the caller's one of them) take the next chunk from a shared cursor,
 * so memory is a chunk per thread (and a table of the field's distinct values) whatever the
 * length of the trace.
 *
 * cpus: ncpu pairs (file offset, size) of the cpus' data.  Writes each cpu's loss counts
 * (flagged pages, stored lost count, flagged pages without a count) to loss[3 * cpu ..]
 * and the (type id, count) pairs of the ids seen to out (2 * 65536 int64), in id order.
 * group: NULL, or (type id, field offset, size 1/2/4/8, signed) of the field to count by
 * value: then *gout is a malloc'd array of *gn (value, count) pairs, largest count first,
 * ties by value (signed or not as the field), freed with kfree().
 * Returns how many (type id, count) pairs, or -KW_FIELD_PAST_RECORD (a record of the event
 * is too short for the field), -KW_NO_MEMORY, or -1 on anything else unexpected (a short
 * read, a corrupt chunk or page): the caller then reads the file the slow way, which
 * names the fault. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
#include <zstd.h>

#include "kwalk.h"

#define NIDS 65536
#define RAW_PAGES 64
#define KG_SLOTS0 4096

struct kc {
	int fd, big, commit_size, compressed;
	long fsize, page_size, data_start, ncpu;
	const int64_t *cpus;
	pthread_mutex_t mu;
	long cpu, left; /* the cpu being handed out, its chunks (or pages) not yet handed */
	int64_t at;	/* where its next chunk (or page) is */
	int failed;
	struct kgroup *gspec; /* the field to count by value, or NULL */
};

struct kc_worker {
	struct kc *k;
	int64_t *counts, *loss; /* NIDS, ncpu * 3 */
	struct kgroup *g;	/* this thread's table, or NULL */
	int failed;		/* 0, or the walk's err[0] (-1: a read or zstd fault) */
};

static int read_all(int fd, void *dst, long n, int64_t off)
{
	while (n > 0) {
		ssize_t got = pread(fd, dst, n, off);
		if (got <= 0)
			return -1;
		dst = (uint8_t *)dst + got, n -= got, off += got;
	}
	return 0;
}

/* grow *buf to at least n bytes */
static int reserve(uint8_t **buf, long *cap, long n)
{
	if (n <= *cap)
		return 0;
	uint8_t *b = realloc(*buf, n);
	if (!b)
		return -1;
	*buf = b, *cap = n;
	return 0;
}

/* Under k->mu: the next piece of work, its compressed (or raw) bytes read into *src.  Returns
 * its cpu's index, -1 when all is handed out, -2 on an error; *usize its bytes of pages. */
static long next_piece(struct kc *k, uint8_t **src, long *srccap, long *usize, long *csize)
{
	while (k->left == 0) {
		if (++k->cpu >= k->ncpu)
			return -1;
		int64_t off = k->cpus[2 * k->cpu], size = k->cpus[2 * k->cpu + 1];
		if (!k->compressed) {
			k->at = off, k->left = size / k->page_size;
			continue;
		}
		uint8_t h[4]; /* a chunk count even when size is 0, as tracepages.py reads it */
		if (off + 4 > k->fsize || read_all(k->fd, h, 4, off))
			return -2;
		k->at = off + 4, k->left = rd32(h, k->big);
	}
	if (!k->compressed) {
		long n = k->left < RAW_PAGES ? k->left : RAW_PAGES;
		*usize = *csize = n * k->page_size;
		if (k->at + *usize > k->fsize || reserve(src, srccap, *usize + 16) ||
		    read_all(k->fd, *src, *usize, k->at))
			return -2;
		k->at += *usize, k->left -= n;
		return k->cpu;
	}
	uint8_t h[8];
	if (k->at + 8 > k->fsize || read_all(k->fd, h, 8, k->at))
		return -2;
	*csize = rd32(h, k->big), *usize = rd32(h + 4, k->big);
	if (*usize % k->page_size || k->at + 8 + *csize > k->fsize ||
	    reserve(src, srccap, *csize) || read_all(k->fd, *src, *csize, k->at + 8))
		return -2;
	k->at += 8 + *csize, k->left--;
	return k->cpu;
}

static int by_count_signed(const void *a, const void *b)
{
	const int64_t *x = a, *y = b;
	return x[1] != y[1] ? (x[1] < y[1] ? 1 : -1) : (x[0] > y[0]) - (x[0] < y[0]);
}

static int by_count_unsigned(const void *a, const void *b)
{
	const int64_t *x = a, *y = b;
	uint64_t u = x[0], v = y[0];
	return x[1] != y[1] ? (x[1] < y[1] ? 1 : -1) : (u > v) - (u < v);
}

/* every thread's table added into the first one's, then its (value, count) pairs sorted into
 * *gout (malloc'd, *gn of them); 0, or -1 without memory */
static int kg_collect(struct kc_worker *w, int nthreads, int64_t **gout, long *gn)
{
	struct kgroup *g = w[0].g;
	for (int t = 1; t < nthreads; t++)
		for (uint64_t i = 0; i <= w[t].g->mask; i++)
			if (w[t].g->cnt[i] && kg_put(g, w[t].g->keys[i], w[t].g->cnt[i]))
				return -1;
	int64_t *out = malloc(2 * (g->used ? g->used : 1) * sizeof(int64_t));
	if (!out)
		return -1;
	long n = 0;
	for (uint64_t i = 0; i <= g->mask; i++)
		if (g->cnt[i])
			out[2 * n] = (int64_t)g->keys[i], out[2 * n + 1] = g->cnt[i], n++;
	qsort(out, n, 2 * sizeof(int64_t), g->sign ? by_count_signed : by_count_unsigned);
	*gout = out, *gn = n;
	return 0;
}

void kfree(void *p)
{
	free(p);
}

static void *kc_work(void *arg)
{
	struct kc_worker *w = arg;
	struct kc *k = w->k;
	uint8_t *src = NULL, *pages = NULL;
	long srccap = 0, pagecap = 0;
	ZSTD_DCtx *dctx = k->compressed ? ZSTD_createDCtx() : NULL;
	int64_t err[3];
	if (k->compressed && !dctx)
		w->failed = KW_NO_MEMORY;
	while (!w->failed) {
		long usize = 0, csize = 0;
		pthread_mutex_lock(&k->mu);
		long cpu = k->failed ? -1 : next_piece(k, &src, &srccap, &usize, &csize);
		pthread_mutex_unlock(&k->mu);
		if (cpu == -1) /* all handed out, or another thread failed */
			break;
		if (cpu == -2) {
			w->failed = -1;
			break;
		}
		uint8_t *buf = src;
		if (k->compressed) {
			if (reserve(&pages, &pagecap, usize + 16)) {
				w->failed = KW_NO_MEMORY;
				break;
			}
			size_t got = ZSTD_decompressDCtx(dctx, pages, usize, src, csize);
			if (ZSTD_isError(got) || (long)got != usize) {
				w->failed = -1;
				break;
			}
			buf = pages;
		}
		memset(buf + usize, 0, 16); /* the walk reads a word past a header */
		if (walk_pages(buf, usize + 16, usize / k->page_size, k->page_size, k->data_start,
			       k->commit_size, k->big, 0, NULL, NULL, NULL, w->counts, w->g,
			       w->loss + 3 * cpu, err) < 0)
			w->failed = err[0] == KW_FIELD_PAST_RECORD || err[0] == KW_NO_MEMORY ? err[0] : -1;
	}
	if (w->failed) {
		pthread_mutex_lock(&k->mu);
		k->failed = 1;
		pthread_mutex_unlock(&k->mu);
	}
	ZSTD_freeDCtx(dctx);
	free(src);
	free(pages);
	return NULL;
}

/* the threads' own counts, losses and tables; -1 without memory */
static int kc_setup(struct kc_worker *w, int nthreads, struct kc *k, const int64_t *group)
{
	int bad = 0;
	for (int i = 0; i < nthreads; i++) {
		w[i].k = k;
		w[i].counts = calloc(NIDS, sizeof(int64_t));
		w[i].loss = calloc(3 * (k->ncpu ? k->ncpu : 1), sizeof(int64_t));
		bad |= !w[i].counts || !w[i].loss;
		if (group) {
			w[i].g = calloc(1, sizeof(struct kgroup));
			if (!w[i].g)
				return -1;
			w[i].g->id = group[0], w[i].g->off = group[1], w[i].g->size = group[2];
			w[i].g->sign = group[3] != 0;
			bad |= kg_init(w[i].g, KG_SLOTS0);
		}
	}
	return bad ? -1 : 0;
}

static void kc_free(struct kc_worker *w, int nthreads)
{
	for (int i = 0; i < nthreads; i++) {
		free(w[i].counts);
		free(w[i].loss);
		if (w[i].g)
			free(w[i].g->keys), free(w[i].g->cnt);
		free(w[i].g);
	}
}

/* the sum of the threads' counts by id into out, their losses into loss: the number of ids */
static long kc_sum(struct kc_worker *w, int nthreads, long ncpu, int64_t *out, int64_t *loss)
{
	long n = 0;
	memset(loss, 0, 3 * ncpu * sizeof(int64_t));
	for (long id = 0; id < NIDS; id++) {
		int64_t c = 0;
		for (int i = 0; i < nthreads; i++)
			c += w[i].counts[id];
		if (c)
			out[2 * n] = id, out[2 * n + 1] = c, n++;
	}
	for (int i = 0; i < nthreads; i++)
		for (long j = 0; j < 3 * ncpu; j++)
			loss[j] += w[i].loss[j];
	return n;
}

long kcount(int fd, long fsize, long ncpu, const int64_t *cpus, int compressed, long page_size,
	    long data_start, int commit_size, int big, int nthreads, int64_t *out, int64_t *loss,
	    const int64_t *group, int64_t **gout, long *gn)
{
	struct kc k = {.fd = fd, .big = big, .commit_size = commit_size, .compressed = compressed,
		       .fsize = fsize, .page_size = page_size, .data_start = data_start,
		       .ncpu = ncpu, .cpus = cpus, .cpu = -1};
	if (nthreads < 1)
		nthreads = 1;
	if (nthreads > 16)
		nthreads = 16;
	struct kc_worker w[16] = {0};
	pthread_t th[16];
	int started[16] = {0};
	long n = -KW_NO_MEMORY;
	if (gout)
		*gout = NULL, *gn = 0;
	k.failed = kc_setup(w, nthreads, &k, group) != 0;
	pthread_mutex_init(&k.mu, NULL);
	for (int i = 1; i < nthreads && !k.failed; i++)
		started[i] = pthread_create(&th[i], NULL, kc_work, &w[i]) == 0;
	if (!k.failed)
		kc_work(&w[0]);
	for (int i = 1; i < nthreads; i++)
		if (started[i])
			pthread_join(th[i], NULL);
	if (!k.failed) {
		n = kc_sum(w, nthreads, ncpu, out, loss);
		if (group && kg_collect(w, nthreads, gout, gn))
			n = -KW_NO_MEMORY;
	} else {
		for (int i = 0; i < nthreads; i++) /* a fault the walk named, else -1 */
			if (w[i].failed && n != -KW_FIELD_PAST_RECORD)
				n = w[i].failed > 0 ? -w[i].failed : -1;
	}
	kc_free(w, nthreads);
	pthread_mutex_destroy(&k.mu);
	return n;
}
