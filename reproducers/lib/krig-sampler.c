/*
 * krig-sampler: sample dcache, dentry slab, memory and XFS log counters.
 *
 *   krig-sampler -i SECONDS -o OUT.tsv [-m MOUNTPOINT]
 *
 * One TSV row per interval until SIGINT/SIGTERM, and one more when stopped.
 * Missing sources read -1.
 * Each row carries the wall clock (time, the clock of phases.tsv) and
 * CLOCK_MONOTONIC (mono, the clock of the trace: trace-cmd record -C mono),
 * read together, so analysis puts samples, phases and trace on one clock.
 * Written in C so sampling costs next to nothing on the machine under test.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

static void dentry_state(long v[6])
{
	FILE *f = fopen("/proc/sys/fs/dentry-state", "r");
	for (int i = 0; i < 6; i++) v[i] = -1;
	if (!f) return;
	if (fscanf(f, "%ld %ld %ld %ld %ld %ld", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) < 5) v[4] = -1;
	fclose(f);
}

/* active_objs num_objs objsize objperslab pagesperslab ... num_slabs */
static void dentry_slab(long v[4])
{
	char line[512];
	long a, n, sz, per, pps, as, ns;
	FILE *f = fopen("/proc/slabinfo", "r");
	for (int i = 0; i < 4; i++) v[i] = -1;
	if (!f) return;
	while (fgets(line, sizeof line, f)) {
		if (strncmp(line, "dentry ", 7)) continue;
		if (sscanf(line + 7, "%ld %ld %ld %ld %ld : tunables %*d %*d %*d : slabdata %ld %ld",
			   &a, &n, &sz, &per, &pps, &as, &ns) == 7) {
			v[0] = a; v[1] = n; v[2] = sz;
			v[3] = ns * pps * sysconf(_SC_PAGESIZE);
		}
		break;
	}
	fclose(f);
}

static const char *mem_keys[] = {"MemTotal:", "MemFree:", "MemAvailable:", "Slab:", "SReclaimable:", "SUnreclaim:"};
#define NMEM 6
static void meminfo(long v[NMEM])
{
	char line[256];
	FILE *f = fopen("/proc/meminfo", "r");
	for (int i = 0; i < NMEM; i++) v[i] = -1;
	if (!f) return;
	while (fgets(line, sizeof line, f))
		for (int i = 0; i < NMEM; i++)
			if (!strncmp(line, mem_keys[i], strlen(mem_keys[i])))
				v[i] = strtol(line + strlen(mem_keys[i]), NULL, 10);
	fclose(f);
}

/* log writes blocks noiclogs force force_sleep */
static void xfs_log(long v[5])
{
	char line[512];
	FILE *f = fopen("/proc/fs/xfs/stat", "r");
	for (int i = 0; i < 5; i++) v[i] = -1;
	if (!f) return;
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, "log ", 4)) {
			sscanf(line + 4, "%ld %ld %ld %ld %ld", &v[0], &v[1], &v[2], &v[3], &v[4]);
			break;
		}
	fclose(f);
}

/* One TSV row: the wall clock, every source, the scratch fs's inodes, CLOCK_MONOTONIC. */
static void sample(FILE *f, const char *mnt)
{
	long d[6], s[4], m[NMEM], x[5], files = -1, ffree = -1;
	struct timeval now;
	struct timespec mono;
	struct statvfs st;
	gettimeofday(&now, NULL);
	clock_gettime(CLOCK_MONOTONIC, &mono);
	dentry_state(d);
	dentry_slab(s);
	meminfo(m);
	xfs_log(x);
	if (mnt && statvfs(mnt, &st) == 0) { files = st.f_files; ffree = st.f_ffree; }
	fprintf(f, "%ld.%06ld", (long)now.tv_sec, (long)now.tv_usec);
	for (int i = 0; i < 6; i++) fprintf(f, "\t%ld", d[i]);
	for (int i = 0; i < 4; i++) fprintf(f, "\t%ld", s[i]);
	for (int i = 0; i < NMEM; i++) fprintf(f, "\t%ld", m[i]);
	for (int i = 0; i < 5; i++) fprintf(f, "\t%ld", x[i]);
	/* mono: CLOCK_MONOTONIC, the clock trace.dat is recorded with (-C mono) */
	fprintf(f, "\t%ld\t%ld\t%ld.%09ld\n", files, ffree, (long)mono.tv_sec, mono.tv_nsec);
	fflush(f);
}

int main(int argc, char **argv)
{
	double interval = 1.0;
	const char *out = NULL, *mnt = NULL;
	int c;
	while ((c = getopt(argc, argv, "i:o:m:")) != -1) {
		switch (c) {
		case 'i': interval = atof(optarg); break;
		case 'o': out = optarg; break;
		case 'm': mnt = optarg; break;
		default: goto usage;
		}
	}
	if (!out || interval <= 0) {
usage:
		fprintf(stderr, "usage: krig-sampler -i SECONDS -o OUT.tsv [-m MOUNTPOINT]\n");
		return 2;
	}
	FILE *f = fopen(out, "w");
	if (!f) { perror(out); return 1; }
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	fprintf(f, "time\tnr_dentry\tnr_unused\tage_limit\twant_pages\tnr_negative\tdentry_dummy"
		"\tdentry_active_objs\tdentry_num_objs\tdentry_objsize\tdentry_slab_bytes"
		"\tmem_total_kb\tmem_free_kb\tmem_available_kb\tslab_kb\tsreclaimable_kb\tsunreclaim_kb"
		"\txfs_log_writes\txfs_log_blocks\txfs_log_noiclogs\txfs_log_force\txfs_log_force_sleep"
		"\tscratch_files\tscratch_ffree\tmono\n");
	struct timespec next;
	clock_gettime(CLOCK_MONOTONIC, &next);
	while (!stop) {
		sample(f, mnt);
		long ns = (long)(interval * 1e9);
		next.tv_sec += ns / 1000000000L;
		next.tv_nsec += ns % 1000000000L;
		if (next.tv_nsec >= 1000000000L) { next.tv_sec++; next.tv_nsec -= 1000000000L; }
		while (!stop && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL))
			;
	}
	/* one last row when stopped: the state the run ended in (a run shorter than one
	 * interval still has its start and its end) */
	sample(f, mnt);
	fclose(f);
	return 0;
}
