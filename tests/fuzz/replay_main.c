/* Runs a fuzz harness once over each file named, or each file in each folder
 * named (sorted), as the ordinary test build's regression check. A missing
 * folder is skipped; an input that crashes the harness fails the test. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    size_t k;
    while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (!buf) return -1;
    /* an exact-size copy, so reads past the end are caught */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) return -1;
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    int inputs = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st)) continue;
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i])) return 1;
            inputs++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) return 1;
        char **names = NULL;
        size_t count = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            names = realloc(names, (count + 1) * sizeof *names);
            names[count++] = strdup(e->d_name);
        }
        closedir(d);
        if (count) qsort(names, count, sizeof *names, by_name);
        for (size_t k = 0; k < count; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[k]);
            if (run_file(path)) return 1;
            inputs++;
            free(names[k]);
        }
        free(names);
    }
    printf("replayed %d inputs\n", inputs);
    return 0;
}
