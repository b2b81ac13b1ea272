/*
 * krig-progress: count a workload's own progress lines as they happen.
 *
 *   rm -rfv DIR | krig-progress -i SECONDS -o OUT.tsv [-p PREFIX]
 *
 * Counts the lines on stdin that start with PREFIX (default "removed '",
 * what GNU rm -v prints per file; "removed directory '" does not match) and
 * writes one row "time mono count" per interval and one at end of input:
 * time is the wall clock (the clock of phases.tsv and samples.tsv), mono is
 * CLOCK_MONOTONIC (the trace's clock). The count is the workload's own, so a
 * rate from it is how fast the workload progressed, not how fast the
 * filesystem caught up in the background.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static double mono_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void row(FILE *f, unsigned long count)
{
	struct timeval now;
	struct timespec mono;
	gettimeofday(&now, NULL);
	clock_gettime(CLOCK_MONOTONIC, &mono);
	fprintf(f, "%ld.%06ld\t%ld.%09ld\t%lu\n", (long)now.tv_sec, (long)now.tv_usec,
		(long)mono.tv_sec, mono.tv_nsec, count);
	fflush(f);
}

int main(int argc, char **argv)
{
	double interval = 0.5;
	const char *out = NULL, *prefix = "removed '";
	int c;
	while ((c = getopt(argc, argv, "i:o:p:")) != -1) {
		switch (c) {
		case 'i': interval = atof(optarg); break;
		case 'o': out = optarg; break;
		case 'p': prefix = optarg; break;
		default: goto usage;
		}
	}
	size_t plen = strlen(prefix);
	if (!out || interval <= 0 || plen == 0) {
usage:
		fprintf(stderr, "usage: krig-progress -i SECONDS -o OUT.tsv [-p PREFIX]\n");
		return 2;
	}
	FILE *f = fopen(out, "w");
	if (!f) { perror(out); return 1; }
	fprintf(f, "time\tmono\tcount\n");
	unsigned long count = 0;
	size_t matched = 0;     /* prefix characters matched on the current line */
	int decided = 0;        /* the current line is already counted or ruled out */
	char buf[65536];
	double next = mono_now();
	row(f, 0);
	next += interval;
	for (;;) {
		double wait = next - mono_now();
		struct pollfd pfd = {.fd = 0, .events = POLLIN};
		int r = poll(&pfd, 1, wait > 0 ? (int)(wait * 1000) + 1 : 0);
		if (r > 0) {
			ssize_t n = read(0, buf, sizeof buf);
			if (n <= 0) break;
			for (ssize_t i = 0; i < n; i++) {
				if (buf[i] == '\n') { matched = 0; decided = 0; continue; }
				if (decided) continue;
				if (buf[i] == prefix[matched]) {
					if (++matched == plen) { count++; decided = 1; }
				} else {
					decided = 1;
				}
			}
		}
		if (mono_now() >= next) {
			row(f, count);
			while (next <= mono_now()) next += interval;
		}
	}
	row(f, count);
	fclose(f);
	return 0;
}
