/* Are a run's outputs writable? Checked at start: a checkpoint folder on a
 * full or read-only disk, or a log that swallows writes (/dev/full), would
 * otherwise surface only at the first save, after hours of training. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dedloc/train.h"
#include "dedloc/util.h"

/* Big enough that a disk with no room left refuses it. */
#define PROBE_BYTES 4096

static int write_all(int fd, const char *data, size_t n) {
    while (n) {
        ssize_t w = write(fd, data, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        data += w;
        n -= (size_t)w;
    }
    return 0;
}

static int check_checkpoint_dir(const char *dir) {
    if (dl_mkdirs(dir))
        return dl_fail_context("--checkpoint-dir %s cannot be used; choose a folder you can write", dir);
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.dedloc-write-probe.%ld", dir, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return dl_fail("--checkpoint-dir %s is not writable (%s); choose a folder you can write", dir,
                       strerror(errno));
    char block[PROBE_BYTES];
    memset(block, 0, sizeof block);
    int err = write_all(fd, block, sizeof block) || fsync(fd) ? errno : 0;
    if (close(fd) && !err) err = errno;
    unlink(probe);
    if (err)
        return dl_fail("--checkpoint-dir %s: a test write failed (%s); free some space or choose another folder",
                       dir, strerror(err));
    return 0;
}

static int check_log(const char *path) {
    struct stat before;
    bool existed = stat(path, &before) == 0;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) return dl_fail("cannot open the log %s for appending: %s", path, strerror(errno));
    struct stat st;
    int err = 0;
    if (fstat(fd, &st) != 0) {
        err = errno;
    } else if (S_ISREG(st.st_mode)) {
        /* One byte written and taken back: the file is as it was. */
        if (write_all(fd, "\n", 1) || fsync(fd)) err = errno;
        if (ftruncate(fd, st.st_size) != 0 && !err) err = errno;
    } else if (write(fd, "", 0) < 0) {
        err = errno; /* a device: /dev/full refuses even an empty write */
    }
    close(fd);
    if (err) {
        if (!existed) unlink(path);
        return dl_fail("the log %s cannot be written (%s); choose another --log", path, strerror(err));
    }
    return 0;
}

int dl_trainer_check_outputs(const char *checkpoint_dir, const char *log_path) {
    if (checkpoint_dir && check_checkpoint_dir(checkpoint_dir)) return -1;
    if (log_path && check_log(log_path)) return -1;
    return 0;
}
