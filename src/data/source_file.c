/* Local files as byte sources, and the helpers every source shares. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "data/data_internal.h"

void dl_data_block_sigpipe(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

void dl_sigpipe_guard_enter(dl_sigpipe_guard *g) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    g->active = pthread_sigmask(SIG_BLOCK, &set, &g->old) == 0;
}

void dl_sigpipe_guard_leave(dl_sigpipe_guard *g) {
    if (!g->active) return;
    if (!sigismember(&g->old, SIGPIPE)) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGPIPE);
        struct timespec zero = {0, 0};
        while (sigtimedwait(&set, NULL, &zero) > 0) {
        }
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

bool dl_data_io_stopped(const dl_data_io *io) {
    return io && io->stop && atomic_load(io->stop);
}

int dl_data_io_sleep(const dl_data_io *io, double seconds) {
    double end = dl_now() + seconds;
    for (;;) {
        if (dl_data_io_stopped(io)) return -1;
        double left = end - dl_now();
        if (left <= 0) return 0;
        if (left > 0.05) left = 0.05;
        struct timespec ts = {0, (long)(left * 1e9)};
        nanosleep(&ts, NULL);
    }
}

typedef struct file_src {
    dl_bytesrc base;
    int fd;
    char path[1024];
    const dl_data_io *io;
} file_src;

static long file_read(dl_bytesrc *s, void *buf, size_t cap) {
    file_src *f = (file_src *)s;
    for (;;) {
        ssize_t n = read(f->fd, buf, cap);
        if (n >= 0) {
            if (f->io && f->io->counters) f->io->counters->bytes += (uint64_t)n;
            return (long)n;
        }
        if (errno == EINTR) continue;
        return dl_fail("reading %s: %s", f->path, strerror(errno));
    }
}

static void file_close(dl_bytesrc *s) {
    file_src *f = (file_src *)s;
    close(f->fd);
    free(f);
}

int dl_bytesrc_open_file(const char *path, const dl_data_io *io, dl_bytesrc **out) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dl_fail("cannot open %s: %s", path, strerror(errno));
    file_src *f = dl_calloc(1, sizeof *f);
    if (!f) {
        close(fd);
        return -1;
    }
    f->base.read = file_read;
    f->base.close = file_close;
    f->fd = fd;
    f->io = io;
    snprintf(f->path, sizeof f->path, "%s", path);
    *out = &f->base;
    return 0;
}

static int file_seek(dl_bytesrc *s, uint64_t offset) {
    file_src *f = (file_src *)s;
    if (lseek(f->fd, (off_t)offset, SEEK_SET) == (off_t)-1)
        return dl_fail("seeking %s to byte %llu: %s", f->path, (unsigned long long)offset,
                       strerror(errno));
    return 0;
}

int dl_bytesrc_open_at(const char *spec, const dl_data_io *io, uint64_t offset, dl_bytesrc **out) {
    if (dl_data_is_url(spec)) return dl_bytesrc_open_http_at(spec, io, offset, out);
    if (dl_bytesrc_open_file(spec, io, out)) return -1;
    if (offset && file_seek(*out, offset)) {
        dl_bytesrc_close(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

bool dl_data_is_url(const char *spec) {
    return !strncmp(spec, "http://", 7) || !strncmp(spec, "https://", 8);
}

int dl_bytesrc_open(const char *spec, const dl_data_io *io, dl_bytesrc **out) {
    if (dl_data_is_url(spec)) return dl_bytesrc_open_http(spec, io, out);
    return dl_bytesrc_open_file(spec, io, out);
}

int dl_bytesrc_slurp(const char *spec, const dl_data_io *io, size_t max_bytes, char **data,
                     size_t *size) {
    *data = NULL;
    *size = 0;
    dl_bytesrc *src;
    if (dl_bytesrc_open(spec, io, &src)) return -1;
    size_t cap = 4096, len = 0;
    char *buf = dl_malloc(cap + 1);
    if (!buf) goto fail;
    for (;;) {
        if (len == cap) {
            if (cap >= max_bytes) {
                dl_fail("%s is larger than %zu bytes", spec, max_bytes);
                goto fail;
            }
            cap = cap * 2 > max_bytes ? max_bytes : cap * 2;
            char *grown = dl_realloc(buf, cap + 1);
            if (!grown) goto fail;
            buf = grown;
        }
        long n = src->read(src, buf + len, cap - len);
        if (n < 0) goto fail;
        if (n == 0) break;
        len += (size_t)n;
    }
    dl_bytesrc_close(src);
    buf[len] = 0;
    *data = buf;
    *size = len;
    return 0;
fail:
    free(buf);
    dl_bytesrc_close(src);
    return -1;
}
