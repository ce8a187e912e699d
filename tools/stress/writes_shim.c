/* The write recorder of `python -m tools.stress powerloss`, loaded with LD_PRELOAD.
 *
 * Every write, flush and size change a process makes to a file whose path starts with
 * $SIMSTORE_POWERLOSS_DIR is appended, after the call returned, as one record to the log
 * $SIMSTORE_POWERLOSS_LOG (O_APPEND: records of several processes and threads never
 * interleave). A record is a 32-byte header (kind, pid, file, flags, offset, length, all
 * little-endian) and `length` bytes: the bytes written, or the path of an OPEN. The
 * traced process appends MARK records itself (tools/stress/crash_states.py reads all).
 * Writes through a shared map cannot be seen here: msync is logged as MSYNC so that the
 * reader can refuse such a trace. Compiled at run time by tools/stress/crash_states.py.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { K_WRITE = 1, K_SYNC = 2, K_OPEN = 4, K_TRUNC = 5, K_MSYNC = 7 };
enum { F_DSYNC = 1 };  /* the write was made through an O_DSYNC / O_SYNC descriptor */
#define MAX_FD 4096
#define MAX_FILES 256

struct head { uint32_t kind, pid, file, flags; uint64_t offset, length; };

static int log_fd = -1;
static char prefix[4096];
static size_t prefix_len;
static int fd_file[MAX_FD];   /* fd -> file number + 1 (0: not traced) */
static int fd_dsync[MAX_FD];
static char *files[MAX_FILES];
static int nfiles;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void setup(void) __attribute__((constructor));
static void setup(void) {
    const char *dir = getenv("SIMSTORE_POWERLOSS_DIR"), *log = getenv("SIMSTORE_POWERLOSS_LOG");
    if (!dir || !log || strlen(dir) >= sizeof prefix) return;
    strcpy(prefix, dir);
    prefix_len = strlen(prefix);
    log_fd = (int)syscall(SYS_openat, AT_FDCWD, log,
                          O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
}

/* Append one record (header and up to two pieces of payload) in one write(2). */
static void emit(uint32_t kind, int file, uint32_t flags, uint64_t offset,
                 const void *a, size_t na, const struct iovec *iov, int niov, size_t nb) {
    struct head h = {kind, (uint32_t)getpid(), (uint32_t)file, flags, offset, na + nb};
    size_t total = sizeof h + na + nb, at = 0;
    char *buf = malloc(total);
    if (!buf) abort();  /* a trace with a hole would prove nothing */
    memcpy(buf, &h, sizeof h);
    at = sizeof h;
    if (na) { memcpy(buf + at, a, na); at += na; }
    for (int i = 0; i < niov && nb; i++) {
        size_t take = iov[i].iov_len < nb ? iov[i].iov_len : nb;
        memcpy(buf + at, iov[i].iov_base, take);
        at += take;
        nb -= take;
    }
    for (size_t done = 0; done < total;) {
        ssize_t w = syscall(SYS_write, log_fd, buf + done, total - done);
        if (w <= 0) abort();
        done += (size_t)w;
    }
    free(buf);
}

static int traced(int fd) { return log_fd >= 0 && fd >= 0 && fd < MAX_FD && fd_file[fd]; }

static void opened(int fd, const char *path, int flags) {
    if (log_fd < 0 || fd < 0 || fd >= MAX_FD || !path) return;
    fd_file[fd] = 0;
    if (strncmp(path, prefix, prefix_len) != 0) return;
    pthread_mutex_lock(&lock);
    int n = 0;
    while (n < nfiles && strcmp(files[n], path) != 0) n++;
    if (n == nfiles && nfiles < MAX_FILES) {
        files[nfiles++] = strdup(path);
        emit(K_OPEN, n, 0, 0, path, strlen(path), NULL, 0, 0);
    }
    if (n < nfiles) {
        fd_file[fd] = n + 1;
        fd_dsync[fd] = (flags & (O_DSYNC | O_SYNC)) != 0;
    }
    pthread_mutex_unlock(&lock);
}

static void wrote(int fd, off_t offset, const struct iovec *iov, int niov, ssize_t n) {
    if (n > 0 && traced(fd))
        emit(K_WRITE, fd_file[fd] - 1, fd_dsync[fd] ? F_DSYNC : 0, (uint64_t)offset, NULL, 0,
             iov, niov, (size_t)n);
}

static void marked(int fd, uint32_t kind, uint64_t value) {
    if (traced(fd)) emit(kind, fd_file[fd] - 1, 0, value, NULL, 0, NULL, 0, 0);
}

#define REAL(ret, name, ...) \
    static ret (*real_##name)(__VA_ARGS__); \
    if (!real_##name) real_##name = (ret (*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name)

static int mode_of(int flags, va_list ap) {
    return (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, int) : 0;
}

#define OPEN_AT(name)                                                            \
    int name(int dirfd, const char *path, int flags, ...) {                      \
        va_list ap; va_start(ap, flags); int mode = mode_of(flags, ap); va_end(ap); \
        REAL(int, name, int, const char *, int, ...);                            \
        int fd = real_##name(dirfd, path, flags, mode);                          \
        if (path && path[0] == '/') opened(fd, path, flags);                     \
        return fd;                                                               \
    }
#define OPEN(name)                                                               \
    int name(const char *path, int flags, ...) {                                 \
        va_list ap; va_start(ap, flags); int mode = mode_of(flags, ap); va_end(ap); \
        REAL(int, name, const char *, int, ...);                                 \
        int fd = real_##name(path, flags, mode);                                 \
        if (path && path[0] == '/') opened(fd, path, flags);                     \
        return fd;                                                               \
    }
OPEN(open)
OPEN(open64)
OPEN_AT(openat)
OPEN_AT(openat64)

int close(int fd) {
    REAL(int, close, int);
    if (fd >= 0 && fd < MAX_FD) fd_file[fd] = 0;
    return real_close(fd);
}

static off_t here(int fd) { return traced(fd) ? lseek(fd, 0, SEEK_CUR) : 0; }

ssize_t write(int fd, const void *buf, size_t n) {
    REAL(ssize_t, write, int, const void *, size_t);
    off_t at = here(fd);
    ssize_t r = real_write(fd, buf, n);
    struct iovec v = {(void *)buf, n};
    wrote(fd, at, &v, 1, r);
    return r;
}

ssize_t writev(int fd, const struct iovec *iov, int niov) {
    REAL(ssize_t, writev, int, const struct iovec *, int);
    off_t at = here(fd);
    ssize_t r = real_writev(fd, iov, niov);
    wrote(fd, at, iov, niov, r);
    return r;
}

#define PWRITE(name)                                                             \
    ssize_t name(int fd, const void *buf, size_t n, off_t at) {                  \
        REAL(ssize_t, name, int, const void *, size_t, off_t);                   \
        ssize_t r = real_##name(fd, buf, n, at);                                 \
        struct iovec v = {(void *)buf, n};                                       \
        wrote(fd, at, &v, 1, r);                                                 \
        return r;                                                                \
    }
PWRITE(pwrite)
PWRITE(pwrite64)

#define PWRITEV(name)                                                            \
    ssize_t name(int fd, const struct iovec *iov, int niov, off_t at) {          \
        REAL(ssize_t, name, int, const struct iovec *, int, off_t);              \
        ssize_t r = real_##name(fd, iov, niov, at);                              \
        wrote(fd, at, iov, niov, r);                                             \
        return r;                                                                \
    }
PWRITEV(pwritev)
PWRITEV(pwritev64)

#define PWRITEV2(name)                                                           \
    ssize_t name(int fd, const struct iovec *iov, int niov, off_t at, int fl) {  \
        REAL(ssize_t, name, int, const struct iovec *, int, off_t, int);         \
        off_t pos = at == -1 ? here(fd) : at;                                    \
        ssize_t r = real_##name(fd, iov, niov, at, fl);                          \
        wrote(fd, pos, iov, niov, r);                                            \
        return r;                                                                \
    }
PWRITEV2(pwritev2)
PWRITEV2(pwritev64v2)

#define SYNC(name)                                                               \
    int name(int fd) {                                                           \
        REAL(int, name, int);                                                    \
        int r = real_##name(fd);                                                 \
        if (r == 0) marked(fd, K_SYNC, 0);                                       \
        return r;                                                                \
    }
SYNC(fsync)
SYNC(fdatasync)

#define TRUNCATE(name)                                                           \
    int name(int fd, off_t size) {                                               \
        REAL(int, name, int, off_t);                                             \
        int r = real_##name(fd, size);                                           \
        if (r == 0) marked(fd, K_TRUNC, (uint64_t)size);                         \
        return r;                                                                \
    }
TRUNCATE(ftruncate)
TRUNCATE(ftruncate64)

int msync(void *addr, size_t n, int flags) {
    REAL(int, msync, void *, size_t, int);
    if (log_fd >= 0) emit(K_MSYNC, 0, (uint32_t)flags, (uint64_t)n, NULL, 0, NULL, 0, 0);
    return real_msync(addr, n, flags);
}
