/* Files: bounded whole-file reads, atomic writes (temporary file, fsync,
 * rename), folders, and the cache folder (DEDLOC_CACHE_DIR). */
#include "dedloc/util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int dl_read_file(const char *path, size_t max_size, char **data, size_t *size) {
    *data = NULL;
    if (size) *size = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return dl_fail("cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return dl_fail("cannot stat %s: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
        fclose(f);
        return dl_fail("%s is not a regular file", path);
    }
    if ((uint64_t)st.st_size > (uint64_t)max_size) {
        fclose(f);
        return dl_fail("%s is %lld bytes, more than the %zu allowed", path, (long long)st.st_size,
                       max_size);
    }
    size_t n = (size_t)st.st_size;
    char *buf = dl_malloc(n + 1);
    if (!buf) {
        fclose(f);
        return -1;
    }
    if (n && fread(buf, 1, n, f) != n) {
        free(buf);
        fclose(f);
        return dl_fail("short read from %s", path);
    }
    fclose(f);
    buf[n] = 0;
    *data = buf;
    if (size) *size = n;
    return 0;
}

int dl_write_file_atomic(const char *path, const void *data, size_t size) {
    size_t len = strlen(path);
    char *tmp = dl_malloc(len + 32);
    if (!tmp) return -1;
    snprintf(tmp, len + 32, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        int rc = dl_fail("cannot create %s: %s", tmp, strerror(errno));
        free(tmp);
        return rc;
    }
    const char *p = data;
    size_t left = size;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            int rc = dl_fail("cannot write %s: %s (is the disk full?)", tmp, strerror(errno));
            close(fd);
            unlink(tmp);
            free(tmp);
            return rc;
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        int rc = dl_fail("cannot flush %s: %s", tmp, strerror(errno));
        unlink(tmp);
        free(tmp);
        return rc;
    }
    if (rename(tmp, path) != 0) {
        int rc = dl_fail("cannot rename %s to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return rc;
    }
    /* fsync the folder so the rename itself survives a power cut */
    char *dir_copy = dl_strdup(path);
    if (dir_copy) {
        int dfd = open(dirname(dir_copy), O_RDONLY | O_DIRECTORY);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
        free(dir_copy);
    }
    free(tmp);
    return 0;
}

int dl_mkdirs(const char *path) {
    char buf[4096];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof buf) return dl_fail("bad folder path '%s'", path);
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] == '/' || buf[i] == 0) {
            char saved = buf[i];
            buf[i] = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return dl_fail("cannot create folder %s: %s", buf, strerror(errno));
            buf[i] = saved;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return dl_fail("%s exists and is not a folder", path);
    return 0;
}

bool dl_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    if ((type == FTW_DP ? rmdir(path) : unlink(path)) != 0 && errno != ENOENT)
        return dl_fail("cannot remove %s: %s", path, strerror(errno));
    return 0;
}

int dl_remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : dl_fail("cannot stat %s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return unlink(path) == 0 ? 0 : dl_fail("cannot remove %s: %s", path, strerror(errno));
    return nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

int dl_replace_dir(const char *tmp, const char *path) {
    char aside[4200] = "";
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) return dl_fail("%s exists and is not a folder", path);
        snprintf(aside, sizeof aside, "%s.old.%ld", path, (long)getpid());
        if (rename(path, aside) != 0)
            return dl_fail("cannot move the old %s aside: %s", path, strerror(errno));
    }
    if (rename(tmp, path) != 0) {
        int rc = dl_fail("cannot rename %s to %s: %s", tmp, path, strerror(errno));
        if (aside[0] && rename(aside, path) != 0)
            DL_WARN("util", "the previous %s is now %s", path, aside);
        return rc;
    }
    if (aside[0] && dl_remove_tree(aside) != 0) DL_WARN("util", "%s", dl_error());
    return 0;
}

const char *dl_cache_dir(void) {
    static char dir[4096];
    if (dir[0]) return dir;
    const char *explicit_dir = getenv("DEDLOC_CACHE_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (explicit_dir && explicit_dir[0])
        snprintf(dir, sizeof dir, "%s", explicit_dir);
    else if (xdg && xdg[0])
        snprintf(dir, sizeof dir, "%s/dedloc", xdg);
    else if (home && home[0])
        snprintf(dir, sizeof dir, "%s/.cache/dedloc", home);
    else
        snprintf(dir, sizeof dir, "/tmp/dedloc-cache");
    if (dl_mkdirs(dir) != 0) DL_WARN("util", "%s", dl_error());
    return dir;
}
