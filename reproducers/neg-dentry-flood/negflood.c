/*
 * negflood: make negative dentries as fast as one process can.
 *
 *   negflood -d DIR -m lookup|tmpfile|samename -t SECONDS [-p PREFIX] [-k NAMES]
 *
 *   lookup    stat() names that never exist (each name once)
 *   tmpfile   create and unlink a temporary file of a fresh name
 *   samename  stat() a fixed set of NAMES names shared by every process,
 *             so each negative dentry is referenced again and again (the
 *             way reviewers defeated the proposed per-bucket cap)
 *
 * Prints "ops=N seconds=S rate=R" when the time is up.
 */
#define _GNU_SOURCE
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

int main(int argc, char **argv)
{
	const char *dir = NULL, *mode = NULL, *prefix = "neg-";
	double seconds = -1;
	unsigned long names = 100000;
	int c;
	while ((c = getopt(argc, argv, "d:m:t:p:k:")) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'm': mode = optarg; break;
		case 't': seconds = atof(optarg); break;
		case 'p': prefix = optarg; break;
		case 'k': names = strtoul(optarg, NULL, 10); break;
		default: goto usage;
		}
	}
	int m = !mode ? -1 : !strcmp(mode, "lookup") ? 0 : !strcmp(mode, "tmpfile") ? 1 : !strcmp(mode, "samename") ? 2 : -1;
	if (!dir || m < 0 || seconds <= 0 || names == 0 || strlen(prefix) > 200) {
usage:
		fprintf(stderr, "usage: negflood -d DIR -m lookup|tmpfile|samename -t SECONDS [-p PREFIX] [-k NAMES]\n");
		return 2;
	}
	if (chdir(dir)) { perror(dir); return 1; }
	size_t plen = strlen(prefix);
	char name[256];
	struct stat st;
	unsigned long ops = 0, n = 0;
	double t0 = now(), end = t0 + seconds;
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
		if (now() >= end) break;
	}
	double t = now() - t0;
	printf("ops=%lu seconds=%.3f rate=%.0f\n", ops, t, ops / t);
	return 0;
}
