/*
 * inotify-lat: time inotify_add_watch() on a directory.
 *
 *   inotify-lat DIR
 *
 * The first watch on a directory makes fsnotify walk every child dentry
 * (__fsnotify_update_child_dentry_flags), negative ones included: with
 * millions of negative children this took seconds and caused soft lockups
 * until 172e422ffea2 (v6.11, backported to 6.1.y). Prints microseconds.
 */
#include <stdio.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct timespec a, b;
	if (argc != 2) { fprintf(stderr, "usage: inotify-lat DIR\n"); return 2; }
	int fd = inotify_init1(0);
	if (fd < 0) { perror("inotify_init1"); return 1; }
	clock_gettime(CLOCK_MONOTONIC, &a);
	int wd = inotify_add_watch(fd, argv[1], IN_CREATE | IN_OPEN);
	clock_gettime(CLOCK_MONOTONIC, &b);
	if (wd < 0) { perror(argv[1]); return 1; }
	printf("%.0f\n", (b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3);
	close(fd);
	return 0;
}
