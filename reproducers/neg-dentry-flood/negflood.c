/*
 * negflood: make negative dentries as fast as the machine can, and stop when
 * the machine's own numbers say the answer is known.
 *
 *   negflood -d DIR -m lookup|tmpfile|samename -t SECONDS [-p PREFIX] [-k NAMES]
 *       one generator for SECONDS; prints "ops=N seconds=S rate=R"
 *
 *   negflood -d DIR -g LOOKUP,TMPFILE,SAMENAME -t MAX_SECONDS [-k NAMES]
 *            [-l LIMIT_PCT] [-x SETTLE_X] [-a AVAIL_PCT] [-n MIN_SECONDS]
 *            [-w WINDOW] [-b PLATEAU_PCT] [-r RATE_SECONDS] [-s SAFETY] [-i INTERVAL]
 *       the flood: forks that many generators of each mode and watches
 *       /proc/sys/fs/dentry-state every INTERVAL seconds (default 0.25) until
 *         ram_limit  the negatives made since the start (nr_negative above its
 *                    start value x the dentry object size) reach LIMIT_PCT %
 *                    of MemTotal (default 5) and the bound is the limit
 *                    itself (SETTLE_X 1, the default): stop at the limit;
 *         bound      after the limit, the flood goes on to tell a bounded
 *                    dcache from an unbounded one: the negatives reached the
 *                    bound, SETTLE_X x the limit but at most AVAIL_PCT %
 *                    (default 50) of MemAvailable at the start, still
 *                    growing: unbounded;
 *         plateau    after MIN_SECONDS, nr_negative grew by less than
 *                    PLATEAU_PCT % (default 2) of its current value (above the
 *                    start; at least 1% of the limit's count) over the last
 *                    quarter of the run so far (at least WINDOW seconds,
 *                    default 5): a bounded dcache;
 *         time_cap   the run reached its cap: SAFETY (default 4) x the time an
 *                    unbounded dcache needs to reach the limit at the rate the
 *                    lookup and tmpfile generators (each op one new name) ran in
 *                    the first RATE_SECONDS (default 5), at least MIN_SECONDS,
 *                    at most MAX_SECONDS; once the limit is crossed, the time
 *                    of the crossing plus SAFETY x the time from the limit to
 *                    the bound at that rate (at least twice the time of the
 *                    crossing, so a plateau just above the limit is seen).
 *       Prints key=value lines (generators, per-mode ops, stop_reason, ...).
 *
 *   lookup    stat() names that never exist (each name once)
 *   tmpfile   create and unlink a temporary file of a fresh name
 *   samename  stat() a fixed set of NAMES names shared by every process,
 *             so each negative dentry is referenced again and again (the
 *             way reviewers defeated the proposed per-bucket cap)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXGEN 65536
#define HIST 65536          /* history of (t, nr_negative), halved when full */

static const char *MODES[] = {"lookup", "tmpfile", "samename"};

struct shared {
	volatile int stop;
	volatile unsigned long ops[MAXGEN];
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* name = prefix + decimal n, without snprintf in the hot loop */
static int fmt(char *dst, const char *prefix, size_t plen, unsigned long n)
{
	char tmp[24];
	int i = 0;
	memcpy(dst, prefix, plen);
	do { tmp[i++] = '0' + n % 10; n /= 10; } while (n);
	for (int j = 0; j < i; j++) dst[plen + j] = tmp[i - 1 - j];
	dst[plen + i] = 0;
	return plen + i;
}

/* Run one generator until `end` (monotonic) or until *stop; returns its ops. */
static unsigned long generate(int m, const char *prefix, unsigned long names, double end,
			      volatile int *stop, volatile unsigned long *count)
{
	size_t plen = strlen(prefix);
	char name[256];
	struct stat st;
	unsigned long ops = 0, n = 0;
	for (;;) {
		for (int i = 0; i < 1024; i++, ops++) {
			switch (m) {
			case 0:
				fmt(name, prefix, plen, n++);
				stat(name, &st);
				break;
			case 1: {
				fmt(name, prefix, plen, n++);
				int fd = open(name, O_CREAT | O_EXCL | O_WRONLY, 0600);
				if (fd >= 0) { close(fd); unlink(name); }
				break;
			}
			case 2:
				fmt(name, "shared-", 7, n++ % names);
				stat(name, &st);
				break;
			}
		}
		if (count) *count = ops;
		if ((stop && *stop) || now() >= end) break;
	}
	return ops;
}

static int mode_of(const char *s)
{
	for (int i = 0; i < 3; i++)
		if (s && !strcmp(s, MODES[i])) return i;
	return -1;
}

/* nr_negative: the 5th field of /proc/sys/fs/dentry-state (-1: unreadable) */
static long nr_negative(void)
{
	long f[6] = {0};
	FILE *fp = fopen("/proc/sys/fs/dentry-state", "r");
	if (!fp) return -1;
	int n = fscanf(fp, "%ld %ld %ld %ld %ld %ld", &f[0], &f[1], &f[2], &f[3], &f[4], &f[5]);
	fclose(fp);
	return n >= 5 ? f[4] : -1;
}

/* a line of /proc/meminfo in bytes ("MemTotal: %ld kB"; -1: unreadable) */
static long meminfo_bytes(const char *format)
{
	char line[256];
	long kb = -1;
	FILE *fp = fopen("/proc/meminfo", "r");
	if (!fp) return -1;
	while (fgets(line, sizeof line, fp))
		if (sscanf(line, format, &kb) == 1) break;
	fclose(fp);
	return kb > 0 ? kb * 1024 : -1;
}

/* the dentry object size from /proc/slabinfo (-1: unreadable) */
static long dentry_objsize(void)
{
	char line[512];
	long active, num, size = -1;
	FILE *fp = fopen("/proc/slabinfo", "r");
	if (!fp) return -1;
	while (fgets(line, sizeof line, fp))
		if (sscanf(line, "dentry %ld %ld %ld", &active, &num, &size) == 3) break;
	fclose(fp);
	return size;
}

struct flood {
	int counts[3];
	double max_s, min_s, window, plateau_pct, limit_pct, settle_x, avail_pct, rate_s, safety, interval;
	unsigned long names;
};

/* Operations that make new names so far: lookup and tmpfile generators, not samename. */
static double new_names(const struct shared *sh, const int *mode, int total)
{
	unsigned long ops = 0;
	for (int g = 0; g < total; g++)
		if (mode[g] != 2) ops += sh->ops[g];
	return ops;
}

static int flood(const struct flood *f)
{
	long ram = meminfo_bytes("MemTotal: %ld kB"), avail = meminfo_bytes("MemAvailable: %ld kB");
	long objsize = dentry_objsize(), base = nr_negative();
	if (ram <= 0 || avail <= 0 || objsize <= 0 || base < 0) {
		fprintf(stderr, "negflood: cannot read %s\n", ram <= 0 ? "MemTotal from /proc/meminfo" :
			avail <= 0 ? "MemAvailable from /proc/meminfo" :
			objsize <= 0 ? "the dentry line of /proc/slabinfo" : "/proc/sys/fs/dentry-state");
		return 1;
	}
	int total = f->counts[0] + f->counts[1] + f->counts[2];
	if (total < 1 || total > MAXGEN) {
		fprintf(stderr, "negflood: %d generators (1..%d)\n", total, MAXGEN);
		return 2;
	}
	struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) { perror("mmap"); return 1; }
	int mode[MAXGEN];
	pid_t pids[MAXGEN];
	double t0 = now();
	for (int m = 0, g = 0; m < 3; m++) {
		for (int i = 0; i < f->counts[m]; i++, g++) {
			mode[g] = m;
			pids[g] = fork();
			if (pids[g] < 0) { perror("fork"); sh->stop = 1; return 1; }
			if (pids[g] == 0) {
				char prefix[64];
				prctl(PR_SET_PDEATHSIG, SIGKILL);
				snprintf(prefix, sizeof prefix, "%s-%d-", MODES[m], i);
				/* the deadline is a backstop; the watcher below stops us */
				generate(m, prefix, f->names, t0 + f->max_s + 60, &sh->stop, &sh->ops[g]);
				_exit(0);
			}
		}
	}

	double limit_bytes = f->limit_pct / 100.0 * ram, limit_n = limit_bytes / objsize;
	/* how far the flood goes after the limit: never past a share of what was available */
	double bound_bytes = f->settle_x * limit_bytes;
	if (bound_bytes > f->avail_pct / 100.0 * avail) bound_bytes = f->avail_pct / 100.0 * avail;
	if (bound_bytes < limit_bytes) bound_bytes = limit_bytes;
	double cap = f->max_s, rate = -1, rate_s = f->rate_s, t = 0, crossed = -1;
	long neg = 0, peak = 0;
	const char *reason = NULL;
	static double ht[HIST];
	static long hv[HIST];
	int hn = 0, stride = 1, tick = 0;
	while (!reason) {
		struct timespec ts = {(time_t)f->interval, (long)((f->interval - (time_t)f->interval) * 1e9)};
		nanosleep(&ts, NULL);
		t = now() - t0;
		long v = nr_negative();
		neg = v < 0 ? neg : v - base;
		if (neg > peak) peak = neg;
		if (tick++ % stride == 0) {
			if (hn == HIST) {               /* keep every other point, record half as often */
				for (int i = 0; i < HIST / 2; i++) { ht[i] = ht[2 * i]; hv[i] = hv[2 * i]; }
				hn = HIST / 2;
				stride *= 2;
			}
			ht[hn] = t; hv[hn] = neg; hn++;
		}
		int over = neg * (double)objsize >= limit_bytes;
		if (rate < 0 && (t >= f->rate_s || over)) {
			/* the rate of new names; a flood over the limit sooner: over the seconds it had */
			rate = new_names(sh, mode, total) / t;
			rate_s = t < f->rate_s ? t : f->rate_s;
			double unbounded_s = rate > 0 ? limit_bytes / (rate * objsize) : f->max_s;
			double c = f->safety * unbounded_s;
			cap = c < f->min_s ? f->min_s : c;
			if (cap > f->max_s) cap = f->max_s;
		}
		if (over && crossed < 0) {
			crossed = t;
			/* the time from the limit to the bound at the measured rate, x safety */
			double to_bound = rate > 0 ? (bound_bytes - limit_bytes) / (rate * objsize) : f->max_s;
			double c = crossed + f->safety * to_bound;
			if (c < 2 * crossed) c = 2 * crossed;
			if (c < f->min_s) c = f->min_s;
			cap = c > f->max_s ? f->max_s : c;
		}
		if (over && bound_bytes <= limit_bytes)
			reason = "ram_limit";
		else if (neg * (double)objsize >= bound_bytes)
			reason = "bound";
		else if (t >= f->min_s) {
			double w = t / 4 > f->window ? t / 4 : f->window;
			long then = hv[0];
			for (int i = hn - 1; i >= 0; i--)
				if (ht[i] <= t - w) { then = hv[i]; break; }
			/* a floor of 1% of the limit, so a handful of stray dentries is no growth */
			double ref = neg > 0.01 * limit_n ? neg : 0.01 * limit_n;
			if (ht[0] <= t - w && neg - then <= f->plateau_pct / 100.0 * ref)
				reason = "plateau";
		}
		if (!reason && t >= cap)
			reason = "time_cap";
	}
	sh->stop = 1;
	if (rate < 0 && t > 0) {        /* stopped before rate_s: the rate so far */
		rate = new_names(sh, mode, total) / t;
		rate_s = t;
	}
	for (int g = 0; g < total; g++)
		waitpid(pids[g], NULL, 0);
	double elapsed = now() - t0;
	unsigned long per[3] = {0};
	for (int g = 0; g < total; g++)
		per[mode[g]] += sh->ops[g];
	printf("generators=%d\n", total);
	for (int m = 0; m < 3; m++)
		printf("%s_procs=%d\n%s_ops=%lu\n", MODES[m], f->counts[m], MODES[m], per[m]);
	printf("ops=%lu seconds=%.3f rate=%.0f\n", per[0] + per[1] + per[2], elapsed,
	       (per[0] + per[1] + per[2]) / elapsed);
	printf("stop_reason=%s\nstop_seconds=%.3f\n", reason, t);
	printf("rate_seconds=%.3f\nnew_names_per_s=%.0f\n", rate_s, rate);
	printf("time_cap_s=%.3f\nmin_seconds=%.3f\nmax_seconds=%.3f\nsafety=%g\n", cap, f->min_s, f->max_s, f->safety);
	printf("limit_pct_ram=%g\nlimit_bytes=%.0f\nmem_total_bytes=%ld\ndentry_objsize=%ld\n",
	       f->limit_pct, limit_bytes, ram, objsize);
	printf("nr_negative_start=%ld\nnegatives_at_stop=%ld\npeak_negatives=%ld\n", base, neg, peak);
	printf("limit_crossed=%d\nlimit_seconds=%.3f\n", crossed >= 0, crossed);
	printf("settle_x=%g\nsettle_avail_pct=%g\nmem_available_bytes=%ld\nbound_bytes=%.0f\nbound_pct_ram=%.4f\n",
	       f->settle_x, f->avail_pct, avail, bound_bytes, 100.0 * bound_bytes / ram);
	return 0;
}

int main(int argc, char **argv)
{
	const char *dir = NULL, *mode = NULL, *gens = NULL, *prefix = "neg-";
	double seconds = -1;
	struct flood f = {.min_s = 0, .window = 5, .plateau_pct = 2, .limit_pct = 5, .settle_x = 1,
			  .avail_pct = 50, .rate_s = 5, .safety = 4, .interval = 0.25, .names = 100000};
	int c;
	while ((c = getopt(argc, argv, "d:m:g:t:p:k:l:x:a:n:w:b:r:s:i:")) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'm': mode = optarg; break;
		case 'g': gens = optarg; break;
		case 't': seconds = atof(optarg); break;
		case 'p': prefix = optarg; break;
		case 'k': f.names = strtoul(optarg, NULL, 10); break;
		case 'l': f.limit_pct = atof(optarg); break;
		case 'x': f.settle_x = atof(optarg); break;
		case 'a': f.avail_pct = atof(optarg); break;
		case 'n': f.min_s = atof(optarg); break;
		case 'w': f.window = atof(optarg); break;
		case 'b': f.plateau_pct = atof(optarg); break;
		case 'r': f.rate_s = atof(optarg); break;
		case 's': f.safety = atof(optarg); break;
		case 'i': f.interval = atof(optarg); break;
		default: goto usage;
		}
	}
	int m = mode_of(mode);
	int gn = gens ? sscanf(gens, "%d,%d,%d", &f.counts[0], &f.counts[1], &f.counts[2]) : 0;
	if (!dir || (m < 0) == (gn != 3) || seconds <= 0 || f.names == 0 || strlen(prefix) > 200 ||
	    f.counts[0] < 0 || f.counts[1] < 0 || f.counts[2] < 0 || f.limit_pct <= 0 || f.interval <= 0 ||
	    f.settle_x < 1 || f.avail_pct <= 0 || f.avail_pct > 100 ||
	    f.safety <= 0 || f.rate_s <= 0 || f.window <= 0 || f.plateau_pct < 0 || f.min_s < 0) {
usage:
		fprintf(stderr, "usage: negflood -d DIR -m lookup|tmpfile|samename -t SECONDS [-p PREFIX] [-k NAMES]\n"
			"       negflood -d DIR -g LOOKUP,TMPFILE,SAMENAME -t MAX_SECONDS [-k NAMES] [-l LIMIT_PCT]\n"
			"                [-x SETTLE_X] [-a AVAIL_PCT] [-n MIN_SECONDS] [-w WINDOW] [-b PLATEAU_PCT] [-r RATE_SECONDS] [-s SAFETY] [-i INTERVAL]\n");
		return 2;
	}
	if (chdir(dir)) { perror(dir); return 1; }
	if (gn == 3) {
		f.max_s = seconds;
		return flood(&f);
	}
	double t0 = now();
	unsigned long ops = generate(m, prefix, f.names, t0 + seconds, NULL, NULL);
	double t = now() - t0;
	printf("ops=%lu seconds=%.3f rate=%.0f\n", ops, t, ops / t);
	return 0;
}
