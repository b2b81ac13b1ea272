/* kwalk: the trace reader's two hot loops in C, called through ctypes (which lets
 * go of the GIL for the whole call, so decompressing threads and the page walk run
 * at once).  Built by `make helpers` into analysis/trace/_kwalk.so.  The numpy walker and
 * the python-zstandard path are the references it is tested against
 * (tests/analysis/trace/test_kwalk.py) and the fallback when the library is not built.
 *
 * kz_chunks: a batch of trace-cmd's v7 zstd chunks (csize u32, usize u32, frame).
 * kz_one: one zstd frame (a v7 metadata section).
 *
 * kwalk: the ring-buffer page walk of analysis/trace/kbuffer.py, record by record.
 *
 * kcount (kcount.c): both in one call for a count by type id (`krig trace stats`), and of one
 * event's scalar field by value (`--group-by`), in threads of its own, a chunk at a time.
 * The walk itself is walk_pages() in kwalk.h, inlined into both.
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
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "kwalk.h"

/* analysis/trace/native.py loads the library only if this matches its own KWALK_ABI: a stale
 * build with other arguments would be called wrongly.  Change both with any signature. */
int kwalk_abi(void)
{
	return 4;
}

long kwalk(const uint8_t *buf, long buflen, long npages, long page_size, long data_start,
	   int commit_size, int big, long cap, uint32_t *tid, int64_t *pos_out, uint64_t *ts_out,
	   int64_t *loss, int64_t *err)
{
	loss[0] = loss[1] = loss[2] = 0;
	return walk_pages(buf, buflen, npages, page_size, data_start, commit_size, big, cap, tid,
			  pos_out, ts_out, NULL, NULL, loss, err);
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

/* The group table's memory (kwalk.h: kg_put grows it through kg_grow). */
int kg_init(struct kgroup *g, long slots)
{
	g->keys = malloc(slots * sizeof(uint64_t));
	g->cnt = calloc(slots, sizeof(int64_t));
	g->mask = slots - 1, g->shift = 64 - __builtin_ctzl(slots), g->used = 0, g->last = -1;
	return g->keys && g->cnt ? 0 : -1;
}

int kg_grow(struct kgroup *g)
{
	struct kgroup old = *g;
	if (kg_init(g, 2 * (old.mask + 1))) {
		free(g->keys), free(g->cnt);
		*g = old;
		return -1;
	}
	for (uint64_t i = 0; i <= old.mask; i++)
		if (old.cnt[i])
			kg_put(g, old.keys[i], old.cnt[i]); /* fits: half the slots are free */
	g->last = -1;
	free(old.keys), free(old.cnt);
	return 0;
}
