/* kwalk: the trace reader's two hot loops in C, called through ctypes (which lets
 * go of the GIL for the whole call, so decompressing threads and the page walk run
 * at once).  Built by `make helpers` into analysis/trace/_kwalk.so.  The numpy walker and
 * the python-zstandard path are the references it is tested against
 * (tests/test_kwalk.py) and the fallback when the library is not built.
 *
 * kz_chunks: a batch of trace-cmd's v7 zstd chunks (csize u32, usize u32, frame).
 * kz_one: one zstd frame (a v7 metadata section).
 *
 * kwalk: the ring-buffer page walk of analysis/trace/kbuffer.py, record by record.
 *
 * kcount: both in one call for a count by type id (`krig trace stats`), in threads of its
 * own, a chunk at a time (at the end of this file).
 *
 * Semantics (libtraceevent's kbuffer, as `trace-cmd report` reads pages): a page is
 * a 64-bit time stamp, a commit word (4 or 8 bytes: data size, bit 31 missed events,
 * bit 30 the missed count stored after the data), then records with a 32-bit header
 * (type_len 5 bits, time delta 27 bits): type_len 1..28 a data event of 4*type_len
 * bytes, 0 a length word follows, 29 padding or a discarded event (skipped, its delta
 * counts), 30 time extend, 31 absolute time stamp (keeps the top 5 bits).
 *
 * Events come out in file order: type id (common_type), byte offset of the data in
 * buf, time stamp.  Returns the number of events, or -1 with err[] set:
 *   err[0] = 1 page claims more data than a page holds (err[1] page, err[2] size)
 *            2 event with a negative length (err[1] page)
 *            3 an event runs past the end of the page data (err[1] page)
 *            4 more events than the caller's arrays hold (err[1] page)
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <zstd.h>

/* analysis/trace/native.py loads the library only if this matches its own KWALK_ABI: a stale
 * build with other arguments would be called wrongly.  Change both with any signature. */
int kwalk_abi(void)
{
	return 3;
}

#define COMMIT_MASK ((1u << 27) - 1)
#define MISSED_EVENTS (1ull << 31)
#define MISSED_STORED (1ull << 30)
#define TS_MSB (0xF8ull << 56)

static inline uint32_t rd32(const uint8_t *p, int big)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return big ? __builtin_bswap32(v) : v;
}

static inline uint64_t rd64(const uint8_t *p, int big)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return big ? __builtin_bswap64(v) : v;
}

/* The walk of kwalk() and kcount(): with counts, each event adds one to counts[its type id]
 * and nothing is stored (no cap); else its type id, offset and time stamp go to the arrays.
 * loss[] is added to, not cleared.  Inlined into both, so each gets its own loop. */
static inline __attribute__((always_inline)) long
walk_pages(const uint8_t *buf, long buflen, long npages, long page_size, long data_start,
	   int commit_size, int big, long cap, uint32_t *tid, int64_t *pos_out, uint64_t *ts_out,
	   int64_t *counts, int64_t *loss, int64_t *err)
{
	long n = 0;
	if (npages * page_size > buflen) {
		err[0] = 3, err[1] = 0;
		return -1;
	}
	for (long pg = 0; pg < npages; pg++) {
		const uint8_t *page = buf + pg * page_size;
		uint64_t ts = rd64(page, big);
		uint64_t commit = commit_size == 8 ? rd64(page + 8, big) : rd32(page + 8, big);
		int64_t size = commit & COMMIT_MASK;
		if (size > page_size - data_start) {
			err[0] = 1, err[1] = pg, err[2] = size;
			return -1;
		}
		if (commit & MISSED_EVENTS) {
			loss[0]++;
			int64_t at = data_start + size;
			if ((commit & MISSED_STORED) && at + commit_size <= page_size)
				loss[1] += commit_size == 8 ? (int64_t)rd64(page + at, big)
							    : (int64_t)rd32(page + at, big);
			else
				loss[2]++; /* lost events before this page, how many not stored */
		}
		int64_t p = pg * page_size + data_start, end = p + size;
		while (p < end) {
			if (p + 8 > buflen) { /* a header and its first word are read at once */
				err[0] = 3, err[1] = pg;
				return -1;
			}
			uint32_t w = rd32(buf + p, big), a0 = rd32(buf + p + 4, big);
			uint32_t tl = big ? w >> 27 : w & 31, delta = big ? w & COMMIT_MASK : w >> 5;
			int64_t dpos, next;
			ts += delta;
			switch (tl) {
			case 29: /* padding or a discarded event */
				p += 4 + (int64_t)a0;
				continue;
			case 30: /* time extend */
				ts += (uint64_t)a0 << 27;
				p += 8;
				continue;
			case 31: /* absolute time stamp */
				ts = ((uint64_t)a0 << 27 | delta) | ((ts - delta) & TS_MSB);
				p += 8;
				continue;
			case 0: { /* a length word follows the header; data at +8 */
				int64_t ln = (int64_t)a0 - 4;
				if (ln < 0) {
					err[0] = 2, err[1] = pg;
					return -1;
				}
				dpos = p + 8;
				next = dpos + ((ln + 3) & ~(int64_t)3);
				if (dpos + 4 > buflen) {
					err[0] = 3, err[1] = pg;
					return -1;
				}
				a0 = rd32(buf + dpos, big);
				break;
			}
			default:
				dpos = p + 4;
				next = dpos + 4 * (int64_t)tl;
			}
			if (next > end) {
				err[0] = 3, err[1] = pg;
				return -1;
			}
			if (counts) {
				counts[big ? a0 >> 16 : a0 & 0xFFFF]++;
			} else {
				if (n >= cap) {
					err[0] = 4, err[1] = pg;
					return -1;
				}
				tid[n] = big ? a0 >> 16 : a0 & 0xFFFF;
				if (pos_out)
					pos_out[n] = dpos;
				if (ts_out)
					ts_out[n] = ts;
			}
			n++;
			p = next;
		}
	}
	return n;
}

long kwalk(const uint8_t *buf, long buflen, long npages, long page_size, long data_start,
	   int commit_size, int big, long cap, uint32_t *tid, int64_t *pos_out, uint64_t *ts_out,
	   int64_t *loss, int64_t *err)
{
	loss[0] = loss[1] = loss[2] = 0;
	return walk_pages(buf, buflen, npages, page_size, data_start, commit_size, big, cap, tid,
			  pos_out, ts_out, NULL, loss, err);
}

void *kz_new(void)
{
	return ZSTD_createDCtx();
}

void kz_free(void *dctx)
{
	ZSTD_freeDCtx(dctx);
}

/* One zstd frame of n bytes (exactly one: anything else is left to python-zstandard, which
 * names the fault) into dst: the bytes it gave, or -1. */
long kz_one(uint8_t *dst, long cap, const uint8_t *src, long n)
{
	size_t size = ZSTD_findFrameCompressedSize(src, n);
	if (ZSTD_isError(size) || (long)size != n)
		return -1;
	size_t got = ZSTD_decompress(dst, cap, src, n);
	return ZSTD_isError(got) ? -1 : (long)got;
}

/* Decompress the n chunks laid out one after the other in src (each a csize and a
 * usize word, then a zstd frame of csize bytes) into dst, back to back.  Returns the
 * bytes written, or -1 with err[0] the chunk's index in src, err[1] its offset in src,
 * err[2] the bytes it gave (-1: a zstd error, named in msg), err[3] its usize. */
long kz_chunks(void *dctx, const uint8_t *src, long srclen, long n, int big, uint8_t *dst,
	       long dstcap, int64_t *err, char *msg, long msglen)
{
	long off = 0, fill = 0;
	for (long i = 0; i < n; i++) {
		err[0] = i, err[1] = off, err[2] = -1, err[3] = 0;
		if (off + 8 > srclen) {
			snprintf(msg, msglen, "chunk header past the end of the batch");
			return -1;
		}
		uint32_t csize = rd32(src + off, big), usize = rd32(src + off + 4, big);
		err[3] = usize;
		if (off + 8 + (long)csize > srclen || fill + (long)usize > dstcap) {
			snprintf(msg, msglen, "chunk past the end of the batch");
			return -1;
		}
		size_t got = ZSTD_decompressDCtx(dctx, dst + fill, usize, src + off + 8, csize);
		if (ZSTD_isError(got)) {
			snprintf(msg, msglen, "%s", ZSTD_getErrorName(got));
			return -1;
		}
		if (got != usize) {
			err[2] = got;
			return -1;
		}
		fill += usize;
		off += 8 + csize;
	}
	return fill;
}

/* kcount: `krig trace stats`' count in one call, with no array per event: every cpu's
 * pages read from the file, decompressed a chunk at a time (zstd) or read 64 pages at a
 * time (uncompressed), walked while they are in the cache, the events counted by type id.
 * nthreads threads (the caller's one of them) take the next chunk from a shared cursor,
 * so memory is a chunk per thread whatever the length of the trace.
 *
 * cpus: ncpu pairs (file offset, size) of the cpus' data.  Writes each cpu's loss counts
 * (flagged pages, stored lost count, flagged pages without a count) to loss[3 * cpu ..]
 * and the (type id, count) pairs of the ids seen to out (2 * 65536 int64), in id order;
 * returns how many pairs, or -1 on anything unexpected (a short read, a corrupt chunk or
 * page, no memory): the caller then reads the file the slow way, which names the fault. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#define NIDS 65536
#define RAW_PAGES 64

struct kc {
	int fd, big, commit_size, compressed;
	long fsize, page_size, data_start, ncpu;
	const int64_t *cpus;
	pthread_mutex_t mu;
	long cpu, left; /* the cpu being handed out, its chunks (or pages) not yet handed */
	int64_t at;	/* where its next chunk (or page) is */
	int failed;
};

struct kc_worker {
	struct kc *k;
	int64_t *counts, *loss; /* NIDS, ncpu * 3 */
	int failed;
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

static void *kc_work(void *arg)
{
	struct kc_worker *w = arg;
	struct kc *k = w->k;
	uint8_t *src = NULL, *pages = NULL;
	long srccap = 0, pagecap = 0;
	ZSTD_DCtx *dctx = k->compressed ? ZSTD_createDCtx() : NULL;
	int64_t err[3];
	if (k->compressed && !dctx)
		w->failed = 1;
	while (!w->failed) {
		long usize = 0, csize = 0;
		pthread_mutex_lock(&k->mu);
		long cpu = k->failed ? -2 : next_piece(k, &src, &srccap, &usize, &csize);
		if (cpu == -2)
			k->failed = 1;
		pthread_mutex_unlock(&k->mu);
		if (cpu == -1)
			break;
		if (cpu == -2) {
			w->failed = 1;
			break;
		}
		uint8_t *buf = src;
		if (k->compressed) {
			if (reserve(&pages, &pagecap, usize + 16)) {
				w->failed = 1;
				break;
			}
			size_t got = ZSTD_decompressDCtx(dctx, pages, usize, src, csize);
			if (ZSTD_isError(got) || (long)got != usize) {
				w->failed = 1;
				break;
			}
			buf = pages;
		}
		memset(buf + usize, 0, 16); /* the walk reads a word past a header */
		if (walk_pages(buf, usize + 16, usize / k->page_size, k->page_size, k->data_start,
			       k->commit_size, k->big, 0, NULL, NULL, NULL, w->counts,
			       w->loss + 3 * cpu, err) < 0)
			w->failed = 1;
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

long kcount(int fd, long fsize, long ncpu, const int64_t *cpus, int compressed, long page_size,
	    long data_start, int commit_size, int big, int nthreads, int64_t *out, int64_t *loss)
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
	long n = -1;
	for (int i = 0; i < nthreads; i++) {
		w[i].k = &k;
		w[i].counts = calloc(NIDS, sizeof(int64_t));
		w[i].loss = calloc(3 * (ncpu ? ncpu : 1), sizeof(int64_t));
		if (!w[i].counts || !w[i].loss)
			k.failed = 1;
	}
	pthread_mutex_init(&k.mu, NULL);
	for (int i = 1; i < nthreads && !k.failed; i++)
		started[i] = pthread_create(&th[i], NULL, kc_work, &w[i]) == 0;
	if (!k.failed)
		kc_work(&w[0]);
	for (int i = 1; i < nthreads; i++)
		if (started[i])
			pthread_join(th[i], NULL);
	if (!k.failed) {
		memset(loss, 0, 3 * ncpu * sizeof(int64_t));
		n = 0;
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
	}
	for (int i = 0; i < nthreads; i++) {
		free(w[i].counts);
		free(w[i].loss);
	}
	pthread_mutex_destroy(&k.mu);
	return n;
}
