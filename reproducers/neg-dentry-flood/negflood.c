/*
 * negflood: make negative dentries as fast as the machine can, and stop when
 * the machine's own numbers say the answer is known.
 *
 *   negflood -d DIR -m lookup|tmpfile|samename -t SECONDS [-p PREFIX] [-k NAMES]
 *       one generator for SECONDS; prints "ops=N seconds=S rate=R"
 *
 *   negflood -d DIR -g LOOKUP,TMPFILE,SAMENAME -t MAX_SECONDS [-k NAMES] [-o LOG]
 *            [-l LIMIT_PCT] [-x SETTLE_X] [-a AVAIL_PCT] [-n MIN_SECONDS]
 *            [-w WINDOW_PCT] [-b RETENTION_PCT] [-r RATE_SECONDS] [-s SAFETY] [-i INTERVAL]
 *            [-H BUDGET_FILE]
 *       the flood: forks that many generators of each mode and watches
 *       /proc/sys/fs/dentry-state and the generators' count of new names
 *       (lookup and tmpfile operations, each one new name) every INTERVAL
 *       seconds (default 0.25). Everything but the outer time limit is
 *       counted in new names made, not in seconds, so a slower host makes a
 *       longer flood, not a different answer. Retention is the negatives
 *       gained per new name over the last quarter of the names made so far
 *       (at least WINDOW_PCT %, default 10, of the RAM limit's count of
 *       dentries): ~1 on an unbounded dcache, ~0 on a bounded one that has
 *       settled. The flood stops at the first of:
 *         ram_limit  the negatives made since the start (nr_negative above its
 *                    start value x the dentry object size) reach LIMIT_PCT %
 *                    of MemTotal (default 5) and the bound is the limit
 *                    itself (SETTLE_X 1, the default): stop at the limit;
 *         bound      past the limit, the negatives reached the bound, SETTLE_X
 *                    x the limit but at most AVAIL_PCT % (default 50) of
 *                    MemAvailable at the start;
 *         plateau    after MIN_SECONDS, retention at most RETENTION_PCT %
 *                    (default 5): a bounded dcache;
 *         name_cap   SAFETY (default 4) x the names an unbounded dcache needs
 *                    to reach the limit (one negative each); once the limit
 *                    is crossed, the names at the crossing plus SAFETY x the
 *                    names from the limit to the bound (at least twice the
 *                    names at the crossing), and not before MIN_SECONDS;
 *         time_limit MAX_SECONDS passed (generators that stall);
 *         host_budget with -H FILE (a file the host rewrites with the bytes of
 *                    guest memory it can still back: a sparse guest's
 *                    budget), the negatives reached the budget read at the
 *                    start, or the budget read at a sample fell to 0: the
 *                    host is short, whatever the kernel does. It comes
 *                    first: a flood never takes the host's memory.
 *       Prints key=value lines (generators, per-mode ops, stop_reason, the
 *       retention, ...). -o LOG writes the flood as it goes, one row per
 *       sample (sparser after 500 s): "time t names nr_negative" (wall clock,
 *       seconds since the start, new names so far, dentry-state's field),
 *       after a "# negflood ..." line of the machine's numbers.
 *
 *   negflood -R LOG [-t MAX_SECONDS] [-o LOG2] [the stop options above]
 *       the same stop rule on a recorded LOG instead of a live flood (its rows
 *       as the samples): what a flood with those numbers would have done.
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
	double max_s, min_s, window_pct, retention_pct, limit_pct, settle_x, avail_pct, rate_s, safety, interval;
	unsigned long names;
	const char *log, *replay, *budget_file;
};

/* The host budget in bytes from FILE: one decimal number, read without following a link
 * (-1: no such file, or not a number) */
static long read_budget(const char *path)
{
	char buf[64];
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0) return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0) return -1;
	buf[n] = 0;
	char *end;
	long v = strtol(buf, &end, 10);
	return end != buf && (*end == 0 || *end == '\n') && v >= 0 ? v : -1;
}

/* The machine's numbers the rule needs, read live or from a recorded log's first line. */
struct machine {
	long ram, avail, objsize, base;
};

/* Operations that make new names so far: lookup and tmpfile generators, not samename. */
static double new_names(const struct shared *sh, const int *mode, int total)
{
	unsigned long ops = 0;
	for (int g = 0; g < total; g++)
		if (mode[g] != 2) ops += sh->ops[g];
	return ops;
}

/* The samples: a live flood (sleep, then read the kernel and the generators' counts)
 * or a recorded log (its next row). 0 at the end of a log. */
struct source {
	FILE *replay;
	double t0, interval;
	const struct shared *sh;
	const int *mode;
	int total;
};

static int next_sample(struct source *src, double *t, double *names, long *v)
{
	if (src->replay) {
		char line[256];
		double wall;
		while (fgets(line, sizeof line, src->replay))
			if (sscanf(line, "%lf %lf %lf %ld", &wall, t, names, v) == 4)
				return 1;
		return 0;
	}
	struct timespec ts = {(time_t)src->interval, (long)((src->interval - (time_t)src->interval) * 1e9)};
	nanosleep(&ts, NULL);
	*t = now() - src->t0;
	*names = new_names(src->sh, src->mode, src->total);   /* the names before the count it sees */
	*v = nr_negative();
	return 1;
}

static int read_machine(FILE *fp, struct machine *m)
{
	char line[512];
	return fgets(line, sizeof line, fp) &&
	       sscanf(line, "# negflood mem_total_bytes=%ld mem_available_bytes=%ld dentry_objsize=%ld nr_negative_start=%ld",
		      &m->ram, &m->avail, &m->objsize, &m->base) == 4 ? 0 : -1;
}

static void log_row(FILE *lg, double t, double names, long v)
{
	struct timespec wall;
	clock_gettime(CLOCK_REALTIME, &wall);
	fprintf(lg, "%ld.%06ld\t%.3f\t%.0f\t%ld\n", (long)wall.tv_sec, wall.tv_nsec / 1000, t, names, v);
	fflush(lg);
}

/* the live flood's generators, forked; 0 or -1 */
static int start_generators(const struct flood *f, struct shared *sh, int *mode, pid_t *pids, double t0)
{
	for (int m = 0, g = 0; m < 3; m++) {
		for (int i = 0; i < f->counts[m]; i++, g++) {
			mode[g] = m;
			pids[g] = fork();
			if (pids[g] < 0) { perror("fork"); sh->stop = 1; return -1; }
			if (pids[g] == 0) {
				char prefix[64];
				prctl(PR_SET_PDEATHSIG, SIGKILL);
				snprintf(prefix, sizeof prefix, "%s-%d-", MODES[m], i);
				/* the deadline is a backstop; the watcher stops us */
				generate(m, prefix, f->names, t0 + f->max_s + 60, &sh->stop, &sh->ops[g]);
				_exit(0);
			}
		}
	}
	return 0;
}

static int flood(const struct flood *f)
{
	struct machine mc;
	FILE *replay = NULL;
	if (f->replay) {
		replay = fopen(f->replay, "r");
		if (!replay) { perror(f->replay); return 1; }
		if (read_machine(replay, &mc)) {
			fprintf(stderr, "negflood: %s: no \"# negflood mem_total_bytes=...\" first line\n", f->replay);
			return 1;
		}
	} else {
		mc.ram = meminfo_bytes("MemTotal: %ld kB");
		mc.avail = meminfo_bytes("MemAvailable: %ld kB");
		mc.objsize = dentry_objsize();
		mc.base = nr_negative();
	}
	if (mc.ram <= 0 || mc.avail <= 0 || mc.objsize <= 0 || mc.base < 0) {
		fprintf(stderr, "negflood: cannot read %s\n", mc.ram <= 0 ? "MemTotal from /proc/meminfo" :
			mc.avail <= 0 ? "MemAvailable from /proc/meminfo" :
			mc.objsize <= 0 ? "the dentry line of /proc/slabinfo" : "/proc/sys/fs/dentry-state");
		return 1;
	}
	int total = f->counts[0] + f->counts[1] + f->counts[2];
	if (!replay && (total < 1 || total > MAXGEN)) {
		fprintf(stderr, "negflood: %d generators (1..%d)\n", total, MAXGEN);
		return 2;
	}
	FILE *lg = NULL;
	if (f->log) {
		lg = fopen(f->log, "w");
		if (!lg) { perror(f->log); return 1; }
		fprintf(lg, "# negflood mem_total_bytes=%ld mem_available_bytes=%ld dentry_objsize=%ld nr_negative_start=%ld\n"
			"time\tt\tnames\tnr_negative\n", mc.ram, mc.avail, mc.objsize, mc.base);
	}
	struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) { perror("mmap"); return 1; }
	static int mode[MAXGEN];
	static pid_t pids[MAXGEN];
	double t0 = now();
	if (!replay && start_generators(f, sh, mode, pids, t0))
		return 1;
	struct source src = {replay, t0, f->interval, sh, mode, total};

	double limit_bytes = f->limit_pct / 100.0 * mc.ram, limit_n = limit_bytes / mc.objsize;
	/* how far the flood goes after the limit: never past a share of what was available */
	double bound_bytes = f->settle_x * limit_bytes;
	if (bound_bytes > f->avail_pct / 100.0 * mc.avail) bound_bytes = f->avail_pct / 100.0 * mc.avail;
	if (bound_bytes < limit_bytes) bound_bytes = limit_bytes;
	/* and never past what the host can still back (a sparse guest), even below the limit */
	long budget0 = f->budget_file ? read_budget(f->budget_file) : -1, budget = budget0;
	int host_bound = budget0 >= 0 && budget0 < bound_bytes;
	if (host_bound) bound_bytes = budget0;
	double bound_n = bound_bytes / mc.objsize, window = f->window_pct / 100.0 * limit_n;
	/* an unbounded dcache keeps one negative per new name: it reaches the limit after limit_n */
	double name_cap = f->safety * limit_n, crossed_names = -1;
	double rate = -1, rate_s = f->rate_s, t = 0, names = 0, crossed = -1, retention = -1, ret_names = 0;
	double logged = -1;
	long neg = 0, peak = 0, v;
	const char *reason = NULL;
	static double hx[HIST];                 /* history of (names, negatives), halved when full */
	static long hv[HIST];
	int hn = 0, stride = 1, tick = 0;
	while (!reason) {
		if (!next_sample(&src, &t, &names, &v)) {
			reason = "end_of_log";
			break;
		}
		neg = v < 0 ? neg : v - mc.base;
		if (neg > peak) peak = neg;
		if (lg && (t - logged >= t / 2000 || !hn)) {   /* every sample for 500 s, then ~1400 per doubling */
			log_row(lg, t, names, v);
			logged = t;
		}
		if (tick++ % stride == 0) {
			if (hn == HIST) {               /* keep every other point, record half as often */
				for (int i = 0; i < HIST / 2; i++) { hx[i] = hx[2 * i]; hv[i] = hv[2 * i]; }
				hn = HIST / 2;
				stride *= 2;
			}
			hx[hn] = names; hv[hn] = neg; hn++;
		}
		int over = neg * (double)mc.objsize >= limit_bytes;
		if (rate < 0 && t > 0 && (t >= f->rate_s || over)) {
			/* the rate of new names (reported, not used to stop); a flood over the limit
			 * sooner: over the seconds it had */
			rate = names / t;
			rate_s = t < f->rate_s ? t : f->rate_s;
		}
		if (over && crossed < 0) {
			crossed = t;
			crossed_names = names;
			/* the names from the limit to the bound, x safety */
			name_cap = names + f->safety * (bound_n - limit_n);
			if (name_cap < 2 * names) name_cap = 2 * names;
		}
		/* retention over the last quarter of the names so far, at least the window */
		double w = names / 4 > window ? names / 4 : window;
		retention = -1;
		if (w > 0 && hn && hx[0] <= names - w) {
			int i = hn - 1;
			while (i > 0 && hx[i] > names - w) i--;
			ret_names = names - hx[i];
			retention = (neg - hv[i]) / ret_names;
		}
		if (f->budget_file && !replay)
			budget = read_budget(f->budget_file);
		if ((host_bound && neg * (double)mc.objsize >= bound_bytes) || budget == 0)
			reason = "host_budget";
		else if (over && bound_bytes <= limit_bytes)
			reason = "ram_limit";
		else if (neg * (double)mc.objsize >= bound_bytes)
			reason = "bound";
		else if (t >= f->min_s && retention >= 0 && retention <= f->retention_pct / 100.0)
			reason = "plateau";
		else if (t >= f->min_s && names >= name_cap)
			reason = "name_cap";
		else if (t >= f->max_s)
			reason = "time_limit";
	}
	sh->stop = 1;
	if (lg) {
		if (logged != t) log_row(lg, t, names, v);
		fclose(lg);
	}
	if (rate < 0 && t > 0) {        /* stopped before rate_s: the rate so far */
		rate = names / t;
		rate_s = t;
	}
	unsigned long per[3] = {0};
	double elapsed = t;
	if (!replay) {
		for (int g = 0; g < total; g++)
			waitpid(pids[g], NULL, 0);
		elapsed = now() - t0;
		for (int g = 0; g < total; g++)
			per[mode[g]] += sh->ops[g];
	}
	printf("generators=%d\n", total);
	for (int m = 0; m < 3; m++)
		printf("%s_procs=%d\n%s_ops=%lu\n", MODES[m], f->counts[m], MODES[m], per[m]);
	printf("ops=%lu seconds=%.3f rate=%.0f\n", per[0] + per[1] + per[2], elapsed,
	       elapsed > 0 ? (per[0] + per[1] + per[2]) / elapsed : 0);
	printf("stop_reason=%s\nstop_seconds=%.3f\n", reason, t);
	printf("rate_seconds=%.3f\nnew_names_per_s=%.0f\n", rate_s, rate);
	printf("new_names=%.0f\nname_cap=%.0f\nlimit_names=%.0f\n", names, name_cap, crossed_names);
	printf("retention=%.6f\nretention_names=%.0f\nplateau_retention_pct=%g\nwindow_pct=%g\n",
	       retention, retention >= 0 ? ret_names : 0, f->retention_pct, f->window_pct);
	printf("min_seconds=%.3f\nmax_seconds=%.3f\nsafety=%g\n", f->min_s, f->max_s, f->safety);
	printf("limit_pct_ram=%g\nlimit_bytes=%.0f\nmem_total_bytes=%ld\ndentry_objsize=%ld\n",
	       f->limit_pct, limit_bytes, mc.ram, mc.objsize);
	printf("nr_negative_start=%ld\nnegatives_at_stop=%ld\npeak_negatives=%ld\n", mc.base, neg, peak);
	printf("limit_crossed=%d\nlimit_seconds=%.3f\n", crossed >= 0, crossed);
	printf("settle_x=%g\nsettle_avail_pct=%g\nmem_available_bytes=%ld\nbound_bytes=%.0f\nbound_pct_ram=%.4f\n",
	       f->settle_x, f->avail_pct, mc.avail, bound_bytes, 100.0 * bound_bytes / mc.ram);
	printf("host_budget_bytes=%ld\nhost_budget_end_bytes=%ld\nhost_bound=%d\n", budget0, budget, host_bound);
	return 0;
}

int main(int argc, char **argv)
{
	const char *dir = NULL, *mode = NULL, *gens = NULL, *prefix = "neg-";
	double seconds = -1;
	struct flood f = {.min_s = 0, .window_pct = 10, .retention_pct = 5, .limit_pct = 5, .settle_x = 1,
			  .avail_pct = 50, .rate_s = 5, .safety = 4, .interval = 0.25, .names = 100000};
	int c;
	while ((c = getopt(argc, argv, "d:m:g:t:p:k:l:x:a:n:w:b:r:s:i:o:R:H:")) != -1) {
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
		case 'w': f.window_pct = atof(optarg); break;
		case 'b': f.retention_pct = atof(optarg); break;
		case 'r': f.rate_s = atof(optarg); break;
		case 's': f.safety = atof(optarg); break;
		case 'i': f.interval = atof(optarg); break;
		case 'o': f.log = optarg; break;
		case 'R': f.replay = optarg; break;
		case 'H': f.budget_file = optarg; break;
		default: goto usage;
		}
	}
	int m = mode_of(mode);
	int gn = gens ? sscanf(gens, "%d,%d,%d", &f.counts[0], &f.counts[1], &f.counts[2]) : 0;
	if (f.replay && seconds <= 0)
		seconds = 1e12;                 /* a recorded log: no outer time limit unless given */
	if ((!dir && !f.replay) || (m >= 0) + (gn == 3) + !!f.replay != 1 || (gens && gn != 3) || seconds <= 0 ||
	    f.names == 0 || strlen(prefix) > 200 ||
	    f.counts[0] < 0 || f.counts[1] < 0 || f.counts[2] < 0 || f.limit_pct <= 0 || f.interval <= 0 ||
	    f.settle_x < 1 || f.avail_pct <= 0 || f.avail_pct > 100 ||
	    f.safety <= 0 || f.rate_s <= 0 || f.window_pct <= 0 || f.retention_pct < 0 || f.min_s < 0) {
usage:
		fprintf(stderr, "usage: negflood -d DIR -m lookup|tmpfile|samename -t SECONDS [-p PREFIX] [-k NAMES]\n"
			"       negflood -d DIR -g LOOKUP,TMPFILE,SAMENAME -t MAX_SECONDS [-k NAMES] [-o LOG] [-l LIMIT_PCT]\n"
			"                [-x SETTLE_X] [-a AVAIL_PCT] [-n MIN_SECONDS] [-w WINDOW_PCT] [-b RETENTION_PCT]\n"
			"                [-r RATE_SECONDS] [-s SAFETY] [-i INTERVAL] [-H BUDGET_FILE]\n"
			"       negflood -R LOG [-t MAX_SECONDS] [-o LOG2] [the stop options]\n");
		return 2;
	}
	if (dir && chdir(dir)) { perror(dir); return 1; }
	if (gn == 3 || f.replay) {
		f.max_s = seconds;
		return flood(&f);
	}
	double t0 = now();
	unsigned long ops = generate(m, prefix, f.names, t0 + seconds, NULL, NULL);
	double t = now() - t0;
	printf("ops=%lu seconds=%.3f rate=%.0f\n", ops, t, ops / t);
	return 0;
}
