/* kwalk.h: the ring-buffer page walk shared by kwalk.c (kwalk: every event into arrays) and
 * kcount.c (kcount: events counted by type id, and one event's field counted by value).
 * Its semantics are written at the top of kwalk.c. */
#ifndef KWALK_H
#define KWALK_H

#include <stdint.h>
#include <string.h>

#define COMMIT_MASK ((1u << 27) - 1)
#define MISSED_EVENTS (1ull << 31)
#define MISSED_STORED (1ull << 30)
#define TS_MSB (0xF8ull << 56)

/* err[0] of a walk that counts a field (the others are in kwalk.c's header) */
#define KW_FIELD_PAST_RECORD 5 /* a record of the event ends before the field does */
#define KW_NO_MEMORY 6

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

/* Counts of one event's scalar field by value (a thread's own): an open-addressing table of
 * values (sign-extended to 64 bits when the field is signed) and their counts (0: empty). */
struct kgroup {
	uint32_t id;		/* the event's type id */
	long off, size;		/* the field in the event's data: offset, 1, 2, 4 or 8 bytes */
	int sign;
	uint64_t *keys;
	int64_t *cnt;
	uint64_t mask;		/* slots - 1 (a power of two) */
	int shift;		/* 64 - log2(slots) */
	long used, last;	/* slots in use; the slot of the last value (-1: none) */
};

int kg_init(struct kgroup *g, long slots); /* kwalk.c: an empty table of slots (a power of two) */
int kg_grow(struct kgroup *g); /* kwalk.c: twice the slots; 0, or -1 without memory */

/* add c to the count of v; 0, or -1 without memory */
static inline int kg_put(struct kgroup *g, uint64_t v, int64_t c)
{
	if (g->last >= 0 && g->keys[g->last] == v) { /* a page's records come in runs */
		g->cnt[g->last] += c;
		return 0;
	}
	uint64_t h = (v * 0x9E3779B97F4A7C15ull) >> g->shift;
	while (g->cnt[h] && g->keys[h] != v)
		h = (h + 1) & g->mask;
	if (!g->cnt[h])
		g->keys[h] = v, g->used++;
	g->cnt[h] += c;
	g->last = (long)h;
	return 2 * (uint64_t)g->used > g->mask ? kg_grow(g) : 0;
}

/* the field's value in the data at d, as the file's byte order and its sign say */
static inline uint64_t kg_value(const struct kgroup *g, const uint8_t *d, int big)
{
	const uint8_t *p = d + g->off;
	switch (g->size) {
	case 1:
		return g->sign ? (uint64_t)(int64_t)(int8_t)p[0] : p[0];
	case 2: {
		uint16_t v;
		memcpy(&v, p, 2);
		v = big ? __builtin_bswap16(v) : v;
		return g->sign ? (uint64_t)(int64_t)(int16_t)v : v;
	}
	case 4: {
		uint32_t v = rd32(p, big);
		return g->sign ? (uint64_t)(int64_t)(int32_t)v : v;
	}
	default:
		return rd64(p, big);
	}
}

/* The walk of kwalk() and kcount(): with counts, each event adds one to counts[its type id]
 * (and, with g, the events of g's id to the count of their field's value) and nothing is
 * stored (no cap); else its type id, offset and time stamp go to the arrays.
 * loss[] is added to, not cleared.  Inlined into both, so each gets its own loop. */
static inline __attribute__((always_inline)) long
walk_pages(const uint8_t *buf, long buflen, long npages, long page_size, long data_start,
	   int commit_size, int big, long cap, uint32_t *tid, int64_t *pos_out, uint64_t *ts_out,
	   int64_t *counts, struct kgroup *g, int64_t *loss, int64_t *err)
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
			int64_t dpos, next, dlen;
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
				dlen = (int64_t)a0 - 4;
				if (dlen < 0) {
					err[0] = 2, err[1] = pg;
					return -1;
				}
				dpos = p + 8;
				next = dpos + ((dlen + 3) & ~(int64_t)3);
				if (dpos + 4 > buflen) {
					err[0] = 3, err[1] = pg;
					return -1;
				}
				a0 = rd32(buf + dpos, big);
				break;
			}
			default:
				dpos = p + 4;
				dlen = 4 * (int64_t)tl;
				next = dpos + dlen;
			}
			if (next > end) {
				err[0] = 3, err[1] = pg;
				return -1;
			}
			uint32_t id = big ? a0 >> 16 : a0 & 0xFFFF;
			if (counts) {
				counts[id]++;
				if (g && id == g->id) {
					if (g->off + g->size > dlen) {
						err[0] = KW_FIELD_PAST_RECORD, err[1] = pg;
						return -1;
					}
					if (kg_put(g, kg_value(g, buf + dpos, big), 1)) {
						err[0] = KW_NO_MEMORY, err[1] = pg;
						return -1;
					}
				}
			} else {
				if (n >= cap) {
					err[0] = 4, err[1] = pg;
					return -1;
				}
				tid[n] = id;
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

#endif
