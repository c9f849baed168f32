/* Source spec -> shard list. A local directory lists its regular files
 * (sorted, not hidden, not index.txt); a URL ending in '/' is a directory
 * whose index.txt names the shards, one per line. */
#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data_internal.h"

enum { MAX_INDEX_BYTES = 4 << 20, MAX_SHARDS = 1 << 20 };

void dl_data_free_shards(char **shards, size_t count) {
    if (!shards) return;
    for (size_t i = 0; i < count; i++) free(shards[i]);
    free(shards);
}

typedef struct {
    char **items;
    size_t count, cap;
} name_list;

static int list_add(name_list *l, char *owned) {
    if (!owned) return -1;
    if (l->count >= MAX_SHARDS) {
        free(owned);
        return dl_fail("more than %d shards", MAX_SHARDS);
    }
    if (l->count == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **grown = dl_realloc(l->items, cap * sizeof *grown);
        if (!grown) {
            free(owned);
            return -1;
        }
        l->items = grown;
        l->cap = cap;
    }
    l->items[l->count++] = owned;
    return 0;
}

static char *join(const char *a, const char *sep, const char *b) {
    size_t n = strlen(a) + strlen(sep) + strlen(b) + 1;
    char *s = dl_malloc(n);
    if (s) snprintf(s, n, "%s%s%s", a, sep, b);
    return s;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A shard name from an index: relative, no "..", no odd characters. */
static bool safe_shard_name(const char *name) {
    if (!*name || name[0] == '/' || name[0] == '.') return false;
    if (strstr(name, "..") || strstr(name, "//")) return false;
    for (const char *p = name; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-' || c == '/' || c == '+' || c == '=' || c == '~'))
            return false;
    }
    return true;
}

static int list_http_dir(const char *url, const dl_data_io *io, name_list *l) {
    char *index_url = join(url, "", "index.txt");
    if (!index_url) return -1;
    char *text;
    size_t size;
    int rc = dl_bytesrc_slurp(index_url, io, MAX_INDEX_BYTES, &text, &size);
    free(index_url);
    if (rc) return dl_fail_context("reading the shard index of %s", url);
    char *save = NULL;
    for (char *line = strtok_r(text, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
        while (*line == ' ' || *line == '\t') line++;
        size_t n = strlen(line);
        while (n && (line[n - 1] == ' ' || line[n - 1] == '\t')) line[--n] = 0;
        if (!n || line[0] == '#') continue;
        if (!safe_shard_name(line)) {
            DL_WARN("data", "%sindex.txt: ignoring shard name '%.80s' (unsafe characters)", url,
                    line);
            continue;
        }
        if (list_add(l, join(url, "", line))) {
            free(text);
            return -1;
        }
    }
    free(text);
    if (!l->count) return dl_fail("%sindex.txt lists no shards", url);
    return 0;
}

static int list_local_dir(const char *dir, name_list *l) {
    DIR *d = opendir(dir);
    if (!d) return dl_fail("cannot open directory %s: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "index.txt")) continue;
        char *path = join(dir, "/", e->d_name);
        struct stat st;
        if (!path) {
            closedir(d);
            return -1;
        }
        if (stat(path, &st) || !S_ISREG(st.st_mode)) {
            free(path);
            continue;
        }
        if (list_add(l, path)) {
            closedir(d);
            return -1;
        }
    }
    closedir(d);
    if (!l->count) return dl_fail("directory %s holds no shard files", dir);
    qsort(l->items, l->count, sizeof *l->items, cmp_names);
    return 0;
}

int dl_data_list_shards(const char *spec, const dl_data_io *io, char ***shards, size_t *count) {
    *shards = NULL;
    *count = 0;
    if (!spec || !*spec) return dl_fail("no data source given");
    name_list l = {0};
    int rc;
    if (dl_data_is_url(spec)) {
        if (spec[strlen(spec) - 1] == '/')
            rc = list_http_dir(spec, io, &l);
        else
            rc = list_add(&l, dl_strdup(spec));
    } else {
        struct stat st;
        if (stat(spec, &st))
            rc = dl_fail("data source %s: %s", spec, strerror(errno));
        else if (S_ISDIR(st.st_mode))
            rc = list_local_dir(spec, &l);
        else
            rc = list_add(&l, dl_strdup(spec));
    }
    if (rc) {
        dl_data_free_shards(l.items, l.count);
        return -1;
    }
    *shards = l.items;
    *count = l.count;
    return 0;
}
