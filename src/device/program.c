/* Programs: kernel sources come from the embedded table (or $DEDLOC_CL_DIR),
 * every program is prefixed with cl/common.cl, and built binaries are cached on
 * disk keyed by device, driver, source and options, so a warm start compiles
 * nothing. */
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "device/device_internal.h"

struct dl_cl_embedded { const char *name; const char *source; size_t size; };
extern const struct dl_cl_embedded dl_cl_embedded_table[];

enum { DL_CL_SOURCE_MAX = 4 << 20, DL_PROGRAM_BINARY_MAX = 256 << 20 };

const char *dl_cl_source(const char *file, size_t *size) {
    const char *dir = getenv("DEDLOC_CL_DIR");
    if (dir && dir[0]) {
        /* Development override: read the file fresh each time; kept for the
         * process lifetime in a small list so the pointer stays valid. */
        static struct loaded { char *name; char *data; size_t size; struct loaded *next; } *loaded;
        static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
        pthread_mutex_lock(&lock);
        for (struct loaded *l = loaded; l; l = l->next)
            if (!strcmp(l->name, file)) {
                if (size) *size = l->size;
                pthread_mutex_unlock(&lock);
                return l->data;
            }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        struct loaded *l = dl_calloc(1, sizeof *l);
        if (!l || dl_read_file(path, DL_CL_SOURCE_MAX, &l->data, &l->size)) {
            free(l);
            pthread_mutex_unlock(&lock);
            dl_fail_context("DEDLOC_CL_DIR is set but kernel file %s cannot be read", file);
            return NULL;
        }
        l->name = dl_strdup(file);
        l->next = loaded;
        loaded = l;
        if (size) *size = l->size;
        pthread_mutex_unlock(&lock);
        return l->data;
    }
    for (const struct dl_cl_embedded *e = dl_cl_embedded_table; e->name; e++)
        if (!strcmp(e->name, file)) {
            if (size) *size = e->size;
            return e->source;
        }
    dl_fail("kernel file %s is not part of this build", file);
    return NULL;
}

/* Prints the build log, pointing at file:line. The compiler reports lines of
 * the concatenated source; we map them back to common.cl or the file. */
static int report_build_failure(dl_device *dev, cl_program program, const char *file,
                                size_t common_lines, cl_int err) {
    size_t log_size = 0;
    clGetProgramBuildInfo(program, dev->info.device_id, CL_PROGRAM_BUILD_LOG, 0, NULL, &log_size);
    char *log = dl_malloc(log_size + 1);
    if (!log) return -1;
    log[0] = 0;
    clGetProgramBuildInfo(program, dev->info.device_id, CL_PROGRAM_BUILD_LOG, log_size, log, NULL);
    log[log_size] = 0;
    /* find the first ":<line>:" to name a location */
    long first_line = -1;
    for (char *p = log; *p; p++)
        if (*p == ':' && p[1] >= '0' && p[1] <= '9') {
            char *end;
            long v = strtol(p + 1, &end, 10);
            if (*end == ':') {
                first_line = v;
                break;
            }
        }
    DL_ERROR("device", "build log for %s on %s:\n%s", file, dev->info.name, log);
    free(log);
    if (first_line > 0 && (size_t)first_line > common_lines)
        return dl_fail("compiling %s:%ld failed (%s); the compiler's log is printed above", file,
                       first_line - (long)common_lines, dl_cl_error_name(err));
    if (first_line > 0)
        return dl_fail("compiling %s (in common.cl:%ld) failed (%s); the log is printed above",
                       file, first_line, dl_cl_error_name(err));
    return dl_fail("compiling %s failed (%s); the compiler's log is printed above", file,
                   dl_cl_error_name(err));
}

static uint64_t cache_key(const dl_device *dev, const char *source, size_t size,
                          const char *options) {
    uint64_t h = dl_hash64(source, size, 0x64656c6f63ull);
    h = dl_hash64(dev->info.name, strlen(dev->info.name), h);
    h = dl_hash64(dev->info.platform, strlen(dev->info.platform), h);
    h = dl_hash64(dev->info.driver, strlen(dev->info.driver), h);
    h = dl_hash64(dev->info.device_version, strlen(dev->info.device_version), h);
    return dl_hash64(options, strlen(options), h);
}

static cl_program load_cached(dl_device *dev, const char *path, const char *options) {
    char *bin;
    size_t size;
    if (!dl_file_exists(path) || dl_read_file(path, DL_PROGRAM_BINARY_MAX, &bin, &size)) {
        dl_clear_error();
        return NULL;
    }
    const unsigned char *bins[1] = {(const unsigned char *)bin};
    cl_int status, err;
    cl_program p = clCreateProgramWithBinary(dev->context, 1, &dev->info.device_id, &size, bins,
                                             &status, &err);
    free(bin);
    if (err != CL_SUCCESS || status != CL_SUCCESS) {
        if (p) clReleaseProgram(p);
        return NULL;
    }
    if (clBuildProgram(p, 1, &dev->info.device_id, options, NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(p);
        return NULL;
    }
    return p;
}

static void store_cached(dl_device *dev, cl_program p, const char *path) {
    size_t size = 0;
    if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS ||
        size == 0)
        return;
    unsigned char *bin = dl_malloc(size);
    if (!bin) return;
    unsigned char *bins[1] = {bin};
    if (clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) == CL_SUCCESS &&
        dl_write_file_atomic(path, bin, size) != 0)
        DL_WARN("device", "cannot store program cache: %s", dl_error());
    free(bin);
}

int dl_program_get(dl_device *dev, const char *file, const char *options, cl_program *out) {
    if (!options) options = "";
    pthread_mutex_lock(&dev->lock);
    for (dl_program_entry *e = dev->programs; e; e = e->next)
        if (!strcmp(e->file, file) && !strcmp(e->options, options)) {
            *out = e->program;
            pthread_mutex_unlock(&dev->lock);
            return 0;
        }
    pthread_mutex_unlock(&dev->lock);

    size_t common_size = 0, body_size = 0;
    const char *common = strcmp(file, "common.cl") ? dl_cl_source("common.cl", &common_size) : "";
    if (!common) {
        dl_clear_error();
        common = "";
        common_size = 0;
    }
    const char *body = dl_cl_source(file, &body_size);
    if (!body) return -1;
    char *source = dl_malloc(common_size + body_size + 2);
    if (!source) return -1;
    memcpy(source, common, common_size);
    source[common_size] = '\n';
    memcpy(source + common_size + 1, body, body_size);
    size_t size = common_size + 1 + body_size;
    source[size] = 0;
    size_t common_lines = 1;
    for (size_t i = 0; i < common_size; i++) common_lines += common[i] == '\n';

    char full_options[1024];
    /* DEDLOC_CL_BUILD_OPTIONS: extra options for every kernel (e.g.
     * -cl-mad-enable, -DDL_REDUCE_REVERSE), to train beside peers whose
     * kernels round differently. */
    const char *extra = getenv("DEDLOC_CL_BUILD_OPTIONS");
    snprintf(full_options, sizeof full_options, "-cl-std=CL1.2 %s %s", options, extra ? extra : "");

    char path[4096], hex[17];
    dl_hash64_hex(cache_key(dev, source, size, full_options), hex);
    snprintf(path, sizeof path, "%s/programs", dl_cache_dir());
    bool cache_ok = dl_mkdirs(path) == 0;
    snprintf(path, sizeof path, "%s/programs/%s-%s.bin", dl_cache_dir(), file, hex);

    cl_program program = cache_ok ? load_cached(dev, path, full_options) : NULL;
    if (!program) {
        double t0 = dl_now();
        cl_int err;
        const char *srcs[1] = {source};
        program = clCreateProgramWithSource(dev->context, 1, srcs, &size, &err);
        if (dl_cl_check(err, "clCreateProgramWithSource")) {
            free(source);
            return -1;
        }
        err = clBuildProgram(program, 1, &dev->info.device_id, full_options, NULL, NULL);
        if (err != CL_SUCCESS) {
            report_build_failure(dev, program, file, common_lines, err);
            clReleaseProgram(program);
            free(source);
            return -1;
        }
        DL_DEBUG("device", "compiled %s in %.2f s", file, dl_now() - t0);
        if (cache_ok) store_cached(dev, program, path);
        pthread_mutex_lock(&dev->lock);
        dev->program_stats.built_from_source++;
        pthread_mutex_unlock(&dev->lock);
    } else {
        DL_DEBUG("device", "loaded %s from the program cache %s", file, path);
        pthread_mutex_lock(&dev->lock);
        dev->program_stats.loaded_from_cache++;
        pthread_mutex_unlock(&dev->lock);
    }
    free(source);

    dl_program_entry *e = dl_calloc(1, sizeof *e);
    if (!e) {
        clReleaseProgram(program);
        return -1;
    }
    e->file = dl_strdup(file);
    e->options = dl_strdup(options);
    e->program = program;
    pthread_mutex_lock(&dev->lock);
    e->next = dev->programs;
    dev->programs = e;
    pthread_mutex_unlock(&dev->lock);
    *out = program;
    return 0;
}

int dl_kernel_create(dl_device *dev, const char *file, const char *options, const char *name,
                     cl_kernel *out) {
    cl_program program;
    if (dl_program_get(dev, file, options, &program)) return -1;
    cl_int err;
    *out = clCreateKernel(program, name, &err);
    if (err != CL_SUCCESS) {
        char what[256];
        snprintf(what, sizeof what, "creating kernel %s from %s", name, file);
        return dl_cl_check(err, what);
    }
    return 0;
}
