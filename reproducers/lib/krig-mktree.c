/*
 * krig-mktree: create an fs_mark-style tree of empty files, fast.
 *
 *   krig-mktree -d DIR -n FILES [-D SUBDIRS] [-s SIZE]
 *
 * Creates DIR/00000 .. DIR/<SUBDIRS-1> and spreads FILES files of SIZE bytes
 * (default 0, like fs_mark -s 0) over them round-robin in blocks of
 * FILES/SUBDIRS, the way `fs_mark -D` fills its subdirectories. Prints the
 * files created and the rate on stdout. One process per writer: run several.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
	const char *dir = NULL;
	long files = -1, subdirs = 1, size = 0;
	int c;
	static char buf[65536];
	while ((c = getopt(argc, argv, "d:n:D:s:")) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'n': files = atol(optarg); break;
		case 'D': subdirs = atol(optarg); break;
		case 's': size = atol(optarg); break;
		default: goto usage;
		}
	}
	if (!dir || files < 0 || subdirs < 1 || size < 0 || size > (long)sizeof buf) {
usage:
		fprintf(stderr, "usage: krig-mktree -d DIR -n FILES [-D SUBDIRS] [-s SIZE<=65536]\n");
		return 2;
	}
	if (mkdir(dir, 0755) && errno != EEXIST) { perror(dir); return 1; }
	if (chdir(dir)) { perror(dir); return 1; }
	long per = (files + subdirs - 1) / subdirs;
	char name[64];
	double t0 = now();
	long made = 0;
	for (long d = 0; d < subdirs && made < files; d++) {
		snprintf(name, sizeof name, "%05ld", d);
		if (mkdir(name, 0755) && errno != EEXIST) { perror(name); return 1; }
		for (long i = 0; i < per && made < files; i++, made++) {
			snprintf(name, sizeof name, "%05ld/f%08ld", d, i);
			int fd = open(name, O_CREAT | O_WRONLY | O_EXCL, 0644);
			if (fd < 0) { perror(name); return 1; }
			if (size && write(fd, buf, size) != size) { perror(name); return 1; }
			close(fd);
		}
	}
	double t = now() - t0;
	printf("%s: %ld files in %ld dirs, %.2f s, %.0f files/s\n", dir, made, subdirs, t, t > 0 ? made / t : 0);
	return 0;
}
