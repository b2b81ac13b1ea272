/* kwalk: the trace reader's two hot loops in C, called through ctypes (which lets
 * go of the GIL for the whole call, so decompressing threads and the page walk run
 * at once).  Built by `make helpers` into analysis/trace/_kwalk.so.  The numpy walker and
 * the python-zstandard path are the references it is tested against
 * (tests/test_kwalk.py) and the fallback when the library is not built.
 *
 * kz_chunks: a batch of trace-cmd's v7 zstd chunks (csize u32, usize u32, frame).
 *
 * kwalk: the ring-buffer page walk of analysis/trace/kbuffer.py, record by record.
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
	return 2;
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

long kwalk(const uint8_t *buf, long buflen, long npages, long page_size, long data_start,
	   int commit_size, int big, long cap, uint32_t *tid, int64_t *pos_out, uint64_t *ts_out,
	   int64_t *loss, int64_t *err)
{
	long n = 0;
	loss[0] = loss[1] = loss[2] = 0;
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
			if (n >= cap) {
				err[0] = 4, err[1] = pg;
				return -1;
			}
			tid[n] = big ? a0 >> 16 : a0 & 0xFFFF;
			if (pos_out)
				pos_out[n] = dpos;
			if (ts_out)
				ts_out[n] = ts;
			n++;
			p = next;
		}
	}
	return n;
}

void *kz_new(void)
{
	return ZSTD_createDCtx();
}

void kz_free(void *dctx)
{
	ZSTD_freeDCtx(dctx);
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
