/* The obvious alternative to negflood: snprintf a fresh name, stat() it, repeat.
 *   stat-loop DIR SECONDS   -> prints "ops=N seconds=S rate=R" */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	char name[64];
	struct stat st;
	unsigned long n = 0;
	if (argc != 3 || chdir(argv[1])) { fprintf(stderr, "usage: stat-loop DIR SECONDS\n"); return 2; }
	double t0 = now(), end = t0 + atof(argv[2]);
	while (now() < end)
		for (int i = 0; i < 1024; i++) {
			snprintf(name, sizeof name, "bare-%lu", n++);
			stat(name, &st);
		}
	printf("ops=%lu seconds=%.3f rate=%.0f\n", n, now() - t0, n / (now() - t0));
	return 0;
}
