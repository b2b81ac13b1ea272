/*
 * krig_unix.c: preloaded into ipmi_sim (LD_PRELOAD), it puts the BMC's two
 * side channels on Unix sockets in the simulated server's private directory.
 * ipmi_sim 2.0.33 only knows TCP for them: its VM serial interface (`serial
 * 15 ADDR PORT`, the KCS wire QEMU's ipmi-bmc-extern connects to) listens on
 * a TCP port, and its SOL device `tcp:ADDR:PORT` connects to one. A TCP port
 * on 127.0.0.1 is open to every local user; a socket in a directory of mode
 * 0700 is not.
 *
 *   KRIG_BMC_LISTEN="PORT:PATH"   bind() to 127.0.0.1:PORT binds a Unix socket at PATH (mode 0600)
 *   KRIG_BMC_CONNECT="PORT:PATH"  connect() to 127.0.0.1:PORT connects to the Unix socket at PATH
 *
 * lan.conf names privileged ports (below 1024) for both: without this library,
 * an unprivileged ipmi_sim fails to bind its port and connects to nothing an
 * unprivileged user could listen on. setsockopt(IPPROTO_TCP, ...) on such a
 * socket (TCP_NODELAY) succeeds without effect. Every other call is passed on.
 * A socket file at PATH that nobody answers on (left by a BMC that was killed)
 * is removed before the bind; one that answers is kept, and the bind fails.
 *
 * Build: gcc -shared -fPIC -o krig_unix.so krig_unix.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

typedef int (*addr_call)(int, const struct sockaddr *, socklen_t);
typedef int (*sockopt_call)(int, int, int, const void *, socklen_t);

/* PATH of the variable's "PORT:PATH" when addr is 127.0.0.1:PORT, else NULL. */
static const char *
unix_path(const struct sockaddr *addr, socklen_t len, const char *var)
{
    const char *val = getenv(var), *colon;
    const struct sockaddr_in *in = (const struct sockaddr_in *) addr;

    if (!val || !addr || len < sizeof(*in) || addr->sa_family != AF_INET)
        return NULL;
    colon = strchr(val, ':');
    if (!colon || in->sin_addr.s_addr != htonl(INADDR_LOOPBACK) || ntohs(in->sin_port) != atoi(val))
        return NULL;
    return colon + 1;
}

/* fd, a TCP socket, becomes a Unix stream socket (same number, same flags); sun is PATH's address. */
static int
to_unix(int fd, const char *path, struct sockaddr_un *sun)
{
    int u, fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD);

    if (strlen(path) >= sizeof(sun->sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    strcpy(sun->sun_path, path);
    u = socket(AF_UNIX, SOCK_STREAM, 0);
    if (u < 0)
        return -1;
    if (dup2(u, fd) < 0) {
        close(u);
        return -1;
    }
    close(u);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl);
    if (fdfl >= 0)
        fcntl(fd, F_SETFD, fdfl);
    return 0;
}

/* Remove a stale socket at sun's path: a socket file whose connect is refused (its listener is gone). */
static void
drop_stale(const struct sockaddr_un *sun)
{
    addr_call conn = (addr_call) dlsym(RTLD_NEXT, "connect");
    struct stat st;
    int probe;

    if (lstat(sun->sun_path, &st) != 0 || !S_ISSOCK(st.st_mode))
        return;
    probe = socket(AF_UNIX, SOCK_STREAM, 0);
    if (probe < 0)
        return;
    if (conn(probe, (const struct sockaddr *) sun, sizeof(*sun)) < 0 && errno == ECONNREFUSED)
        unlink(sun->sun_path);
    close(probe);
}

int
bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    addr_call real = (addr_call) dlsym(RTLD_NEXT, "bind");
    const char *path = unix_path(addr, len, "KRIG_BMC_LISTEN");
    struct sockaddr_un sun;
    mode_t old;
    int rv;

    if (!path)
        return real(fd, addr, len);
    if (to_unix(fd, path, &sun) < 0)
        return -1;
    drop_stale(&sun);
    old = umask(0177);
    rv = real(fd, (struct sockaddr *) &sun, sizeof(sun));
    umask(old);
    return rv;
}

int
connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    addr_call real = (addr_call) dlsym(RTLD_NEXT, "connect");
    const char *path = unix_path(addr, len, "KRIG_BMC_CONNECT");
    struct sockaddr_un sun;

    if (!path)
        return real(fd, addr, len);
    if (to_unix(fd, path, &sun) < 0)
        return -1;
    return real(fd, (struct sockaddr *) &sun, sizeof(sun));
}

int
setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
    sockopt_call real = (sockopt_call) dlsym(RTLD_NEXT, "setsockopt");
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);

    if (level == IPPROTO_TCP && getsockname(fd, (struct sockaddr *) &ss, &sl) == 0 && ss.ss_family == AF_UNIX)
        return 0;
    return real(fd, level, name, val, len);
}
