/*
 * krig_unix.c: preloaded into ipmi_sim (LD_PRELOAD), it puts the BMC's two
 * side channels on Unix sockets in the simulated server's private directory,
 * gives it the LAN socket krig bound, and refuses RMCP+ sessions without a
 * password or without protection.
 * ipmi_sim 2.0.33 only knows TCP for them: its VM serial interface (`serial
 * 15 ADDR PORT`, the KCS wire QEMU's ipmi-bmc-extern connects to) listens on
 * a TCP port, and its SOL device `tcp:ADDR:PORT` connects to one. A TCP port
 * on 127.0.0.1 is open to every local user; a socket in a directory of mode
 * 0700 is not.
 *
 *   KRIG_BMC_LISTEN="PORT:PATH"   bind() to 127.0.0.1:PORT binds a Unix socket at PATH (mode 0600)
 *   KRIG_BMC_CONNECT="PORT:PATH"  connect() to 127.0.0.1:PORT connects to the Unix socket at PATH
 *   KRIG_BMC_LAN="PORT:FD"        bind() of a UDP socket to 127.0.0.1:PORT takes FD instead: a UDP
 *                                 socket krig bound to that port and handed down, so no other
 *                                 local user can take the port between its choice and the bind
 *
 * ipmi_sim 2.0.33 accepts RMCP+ cipher suite 0 (authentication RAKP-none: any
 * password opens an admin session) and the suites without integrity or
 * confidentiality, whatever lan.conf says (lan.conf limits IPMI 1.5 only).
 * Every datagram recvfrom() returns that is an RMCP+ Open Session Request
 * asking for algorithm 0 ("none") for authentication, integrity or
 * confidentiality, or leaving the choice to the BMC, gets algorithm 63
 * instead, which ipmi_sim answers with "invalid algorithm": a session needs
 * the user's password (RAKP-HMAC), integrity and confidentiality (cipher
 * suite 3).
 *
 * lan.conf names privileged ports (below 1024) for both: without this library,
 * an unprivileged ipmi_sim fails to bind its port and connects to nothing an
 * unprivileged user could listen on. setsockopt(IPPROTO_TCP, ...) on such a
 * socket (TCP_NODELAY) succeeds without effect. Every other call is passed on.
 * A socket file at PATH that nobody answers on (left by a BMC that was killed)
 * is removed before the bind; one that answers is kept, and the bind fails.
 *
 * ipmi_sim writes to the KCS wire without MSG_NOSIGNAL: a peer that closed it
 * first (the server's QEMU killed at power off, or gone by any other way) would
 * end the BMC with SIGPIPE, silently, its log empty. In ipmi_sim SIGPIPE is
 * ignored: the write fails with EPIPE and ipmi_sim takes the wire as closed, as
 * a BMC outlives its host's power.
 *
 * Build: gcc -shared -fPIC -o krig_unix.so krig_unix.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* Only in ipmi_sim (the server's QEMU it starts inherits the preload too). That QEMU inherits
 * SIGPIPE ignored, as QEMU sets it for itself anyway. */
__attribute__((constructor)) static void
no_sigpipe(void)
{
    if (strcmp(program_invocation_short_name, "ipmi_sim") == 0)
        signal(SIGPIPE, SIG_IGN);
}

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

/* fd (a UDP socket ipmi_sim is binding to KRIG_BMC_LAN's port) becomes krig's bound socket. */
static int
take_lan(int fd, const struct sockaddr *addr, socklen_t len)
{
    const char *val = getenv("KRIG_BMC_LAN"), *colon = val ? strchr(val, ':') : NULL;
    const struct sockaddr_in *in = (const struct sockaddr_in *) addr;
    int lan, type = 0, fl, fdfl;
    socklen_t tl = sizeof(type);

    if (!colon || !addr || len < sizeof(*in) || addr->sa_family != AF_INET
        || ntohs(in->sin_port) != atoi(val)
        || getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_DGRAM)
        return 1;
    lan = atoi(colon + 1);
    fl = fcntl(fd, F_GETFL);
    fdfl = fcntl(fd, F_GETFD);
    if (lan <= 2 || dup2(lan, fd) < 0)
        return -1;
    close(lan);
    unsetenv("KRIG_BMC_LAN");
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl);
    fcntl(fd, F_SETFD, fdfl >= 0 ? fdfl : FD_CLOEXEC);
    return 0;
}

int
bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    addr_call real = (addr_call) dlsym(RTLD_NEXT, "bind");
    const char *path = unix_path(addr, len, "KRIG_BMC_LISTEN");
    struct sockaddr_un sun;
    mode_t old;
    int rv;

    if (!path) {
        rv = take_lan(fd, addr, len);
        return rv <= 0 ? rv : real(fd, addr, len);
    }
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

/* An RMCP+ Open Session Request (RMCP header, session header of auth type 6 and payload type 0x10,
 * then the payload): each of its three algorithm records that says "none" (0) or leaves the
 * choice to the BMC (a record of length 0) asks for algorithm 63, which no BMC has. */
static void
refuse_weak(unsigned char *p, ssize_t n)
{
    int rec;

    if (n < 48 || p[0] != 0x06 || p[3] != 0x07 || p[4] != 0x06 || (p[5] & 0x3f) != 0x10)
        return;
    for (rec = 24; rec <= 40; rec += 8) {           /* payload at 16: records at payload + 8, 16, 24 */
        if (p[rec + 3] == 0 || (p[rec + 4] & 0x3f) == 0) {
            p[rec + 3] = 8;
            p[rec + 4] = 0x3f;
        }
    }
}

ssize_t
recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *src, socklen_t *alen)
{
    typedef ssize_t (*recvfrom_call)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
    recvfrom_call real = (recvfrom_call) dlsym(RTLD_NEXT, "recvfrom");
    ssize_t n = real(fd, buf, len, flags, src, alen);

    if (n > 0 && !(flags & MSG_PEEK))
        refuse_weak(buf, n);
    return n;
}
