/* File helpers on bad paths: each failure returns -1 with a message that
 * names the path and the reason, and an atomic write that fails leaves no
 * temporary file behind. Also where the cache folder goes when only
 * XDG_CACHE_HOME is set. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dedloc/util.h"
#include "dl_test.h"

static bool error_has(const char *part) { return strstr(dl_error(), part) != NULL; }

/* Entries of a folder other than . and .., or -1 if it cannot be read. */
static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void remove_tree(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static void test_read_file(const char *dir) {
    char *data = (char *)1;
    size_t size = 99;
    /* a folder opens with fopen on Linux, but is not a file */
    CHECK(dl_read_file(dir, 100, &data, &size) == -1);
    CHECK_MSG(error_has("is not a regular file") && error_has(dir), "%s", dl_error());
    CHECK(data == NULL && size == 0);

    char path[512];
    snprintf(path, sizeof path, "%s/empty", dir);
    CHECK_OK(dl_write_file_atomic(path, "", 0));
    CHECK_OK(dl_read_file(path, 0, &data, &size));
    CHECK(data && data[0] == 0 && size == 0);
    free(data);
}

static void test_write_atomic(const char *dir) {
    /* the target is an existing folder: the rename fails, the temporary goes */
    char target[512];
    snprintf(target, sizeof target, "%s/taken", dir);
    CHECK_OK(dl_mkdirs(target));
    char inner[600];
    snprintf(inner, sizeof inner, "%s/keep", target);
    CHECK_OK(dl_write_file_atomic(inner, "x", 1)); /* so the folder is not empty */
    int before = count_entries(dir);
    CHECK(dl_write_file_atomic(target, "hello", 5) == -1);
    CHECK_MSG(error_has("cannot rename") && error_has(target), "%s", dl_error());
    CHECK_MSG(count_entries(dir) == before, "%d entries, %d before", count_entries(dir), before);

    /* a folder that does not exist */
    char missing[512];
    snprintf(missing, sizeof missing, "%s/no-such-folder/file", dir);
    CHECK(dl_write_file_atomic(missing, "hello", 5) == -1);
    CHECK_MSG(error_has("cannot create") && error_has("No such file or directory"), "%s",
              dl_error());
    CHECK(!dl_file_exists(missing));

    /* an existing file is replaced whole */
    char path[512];
    snprintf(path, sizeof path, "%s/replaced", dir);
    CHECK_OK(dl_write_file_atomic(path, "a longer first version", 22));
    CHECK_OK(dl_write_file_atomic(path, "short", 5));
    char *data = NULL;
    size_t size = 0;
    CHECK_OK(dl_read_file(path, 100, &data, &size));
    CHECK(data && size == 5 && !memcmp(data, "short", 5));
    free(data);
}

static void test_mkdirs(const char *dir) {
    CHECK(dl_mkdirs("") == -1);
    CHECK_MSG(error_has("bad folder path"), "%s", dl_error());

    char *long_path = malloc(5000);
    CHECK(long_path != NULL);
    if (long_path) {
        memset(long_path, 'a', 4999);
        long_path[4999] = 0;
        CHECK(dl_mkdirs(long_path) == -1);
        CHECK_MSG(error_has("bad folder path"), "%.60s", dl_error());
        free(long_path);
    }

    /* a file where a folder should be: at the end, and in the middle */
    char file[512], below[600];
    snprintf(file, sizeof file, "%s/plain-file", dir);
    CHECK_OK(dl_write_file_atomic(file, "x", 1));
    CHECK(dl_mkdirs(file) == -1);
    CHECK_MSG(error_has("exists and is not a folder") && error_has(file), "%s", dl_error());
    snprintf(below, sizeof below, "%s/sub", file);
    CHECK(dl_mkdirs(below) == -1);
    CHECK_MSG(error_has("cannot create folder") && error_has("Not a directory"), "%s",
              dl_error());

    /* nested folders at once, and again (already there is fine) */
    char nested[512];
    snprintf(nested, sizeof nested, "%s/a/b/c/", dir);
    CHECK_OK(dl_mkdirs(nested));
    CHECK_OK(dl_mkdirs(nested));
    struct stat st;
    CHECK(stat(nested, &st) == 0 && S_ISDIR(st.st_mode));
}

/* dl_cache_dir() decides once per process; this program asks only here. */
static void test_cache_dir_xdg(const char *dir) {
    char xdg[512], expected[600];
    snprintf(xdg, sizeof xdg, "%s/xdg", dir);
    snprintf(expected, sizeof expected, "%s/dedloc", xdg);
    setenv("DEDLOC_CACHE_DIR", "", 1); /* empty counts as unset */
    setenv("XDG_CACHE_HOME", xdg, 1);
    const char *got = dl_cache_dir();
    CHECK_MSG(!strcmp(got, expected), "%s, expected %s", got, expected);
    struct stat st;
    CHECK_MSG(stat(expected, &st) == 0 && S_ISDIR(st.st_mode), "%s not created", expected);
}

int main(void) {
    char dir[] = "/tmp/dedloc-test-files-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_read_file(dir);
    test_write_atomic(dir);
    test_mkdirs(dir);
    test_cache_dir_xdg(dir);
    remove_tree(dir);
    return dl_test_finish("test_util_files");
}
