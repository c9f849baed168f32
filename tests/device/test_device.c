/* device: discovery, selection, capabilities, buffers, program build errors
 * and the on-disk program-binary cache. */
#include <ctype.h>
#include <dirent.h>
#include <stdint.h>
#include <unistd.h>

#include "dedloc/device.h"
#include "dedloc/util.h"
#include "dl_test.h"

static char temp_root[] = "/tmp/dedloc-test-device-XXXXXX";

/* The OpenCL runtime's own answer for one device, asked here directly. */
static void check_against_runtime(const dl_device_info *d) {
    cl_device_type type = 0;
    cl_uint units = 0;
    cl_ulong mem = 0;
    char name[256] = {0};
    cl_device_id id = d->device_id;
    CHECK(clGetDeviceInfo(id, CL_DEVICE_TYPE, sizeof type, &type, NULL) == CL_SUCCESS);
    CHECK(clGetDeviceInfo(id, CL_DEVICE_NAME, sizeof name - 1, name, NULL) == CL_SUCCESS);
    CHECK(clGetDeviceInfo(id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL) == CL_SUCCESS);
    CHECK(clGetDeviceInfo(id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL) == CL_SUCCESS);
    size_t ext_size = 0;
    CHECK(clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, 0, NULL, &ext_size) == CL_SUCCESS);
    char *extensions = calloc(ext_size + 1, 1);
    CHECK(extensions && clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, ext_size, extensions, NULL) ==
                            CL_SUCCESS);
    CHECK_MSG(d->is_gpu == ((type & CL_DEVICE_TYPE_GPU) != 0), "%s: is_gpu %d, type 0x%lx", d->name,
              d->is_gpu, (unsigned long)type);
    CHECK_MSG(d->is_cpu == ((type & CL_DEVICE_TYPE_CPU) != 0), "%s: is_cpu %d, type 0x%lx", d->name,
              d->is_cpu, (unsigned long)type);
    CHECK_MSG(strstr(d->name, name) != NULL || strstr(name, d->name) != NULL, "'%s' vs '%s'", d->name,
              name);
    CHECK(d->compute_units == units);
    CHECK(d->global_mem == mem);
    CHECK(extensions && d->fp16 == (strstr(extensions, "cl_khr_fp16") != NULL));
    free(extensions);
}

/* Devices across all platforms, counted with the runtime's own calls. */
static int runtime_device_count(void) {
    cl_uint nplat = 0, total = 0;
    if (clGetPlatformIDs(0, NULL, &nplat) != CL_SUCCESS || nplat == 0) return 0;
    cl_platform_id plats[16];
    if (nplat > 16) nplat = 16;
    if (clGetPlatformIDs(nplat, plats, NULL) != CL_SUCCESS) return 0;
    for (cl_uint p = 0; p < nplat; p++) {
        cl_uint n = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &n) == CL_SUCCESS) total += n;
    }
    return (int)total;
}

static void test_listing(dl_device_info **infos, int *count) {
    CHECK_OK(dl_device_list(infos, count));
    CHECK(*count >= 1);
    for (int i = 0; i < *count; i++) {
        const dl_device_info *d = &(*infos)[i];
        CHECK(d->index == i);
        CHECK(d->name[0] != 0);
        CHECK(d->platform[0] != 0);
        CHECK(d->compute_units >= 1);
        CHECK(d->global_mem > 0);
        CHECK(d->max_alloc > 0 && d->max_alloc <= d->global_mem);
        CHECK(d->local_mem > 0);
        CHECK(d->max_work_group >= 1);
        CHECK(d->max_work_item[0] >= 1);
        CHECK_MSG(!strncmp(d->opencl_c_version, "OpenCL C ", 9), "'%s'", d->opencl_c_version);
        check_against_runtime(d);
    }
    CHECK_MSG(*count == runtime_device_count(), "%d listed, the runtime has %d", *count,
              runtime_device_count());
}

static void test_selection(const dl_device_info *infos, int count) {
    dl_device *dev = NULL;
    CHECK_OK(dl_device_open("0", &dev));
    if (dev) {
        CHECK(!strcmp(dl_device_get_info(dev)->name, infos[0].name));
        CHECK(dl_device_context(dev) != NULL && dl_device_queue(dev) != NULL);
        CHECK_OK(dl_device_finish(dev));
        dl_device_close(dev);
    }
    /* a part of the name, in the other case, selects the same device */
    char part[8] = {0};
    size_t len = strlen(infos[0].name);
    size_t take = len < 6 ? len : 6;
    for (size_t i = 0; i < take; i++) {
        char c = infos[0].name[len - take + i];
        part[i] = (char)(isupper((unsigned char)c) ? tolower((unsigned char)c)
                                                   : toupper((unsigned char)c));
    }
    dev = NULL;
    CHECK_OK(dl_device_open(part, &dev));
    if (dev) {
        /* the first device whose name, vendor or platform contains the part */
        CHECK(dl_device_get_info(dev)->index <= infos[0].index);
        dl_device_close(dev);
    }
    /* the default: the first GPU, else device 0 */
    int expected = 0;
    for (int i = count - 1; i >= 0; i--)
        if (infos[i].is_gpu) expected = i;
    dev = NULL;
    CHECK_OK(dl_device_open(NULL, &dev));
    if (dev) {
        CHECK(dl_device_get_info(dev)->index == expected);
        dl_device_close(dev);
    }
    dev = NULL;
    CHECK(dl_device_open("no-such-device-anywhere", &dev) == -1 && dev == NULL);
    CHECK_MSG(strstr(dl_error(), "no device matches 'no-such-device-anywhere'") != NULL, "%s",
              dl_error());
    CHECK(dl_device_open("999", &dev) == -1 && dev == NULL);
    CHECK_MSG(strstr(dl_error(), "out of range") != NULL, "%s", dl_error());
    CHECK(dl_device_open("-1", &dev) == -1 && dev == NULL);
}

static void test_buffers(dl_device *dev) {
    size_t before = dl_device_bytes_in_use(dev);
    dl_buffer a, b;
    CHECK_OK(dl_buffer_alloc(dev, 1000, &a));
    CHECK_OK(dl_buffer_alloc(dev, 400, &b));
    CHECK(dl_device_bytes_in_use(dev) == before + 1400);
    CHECK(dl_device_bytes_peak(dev) >= before + 1400);

    uint8_t host[1000], back[1000];
    for (int i = 0; i < 1000; i++) host[i] = (uint8_t)(i * 7 + 3);
    CHECK_OK(dl_buffer_upload(dev, &a, 0, host, sizeof host));
    memset(back, 0, sizeof back);
    CHECK_OK(dl_buffer_download(dev, &a, 0, back, sizeof back));
    CHECK(!memcmp(host, back, sizeof host));

    /* partial upload / download at offsets */
    uint8_t patch[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    CHECK_OK(dl_buffer_upload(dev, &a, 500, patch, sizeof patch));
    memcpy(host + 500, patch, sizeof patch);
    uint8_t slice[20];
    CHECK_OK(dl_buffer_download(dev, &a, 495, slice, sizeof slice));
    CHECK(!memcmp(slice, host + 495, sizeof slice));

    /* fill a word-aligned range; bytes around it stay */
    CHECK_OK(dl_buffer_fill32(dev, &a, 40, 80, 0x7fc00001u));
    CHECK_OK(dl_buffer_download(dev, &a, 0, back, sizeof back));
    int fill_ok = 1;
    for (int i = 0; i < 1000; i++) {
        if (i >= 40 && i < 120) {
            uint32_t w;
            memcpy(&w, back + (i & ~3), 4);
            fill_ok &= w == 0x7fc00001u;
        } else {
            fill_ok &= back[i] == host[i];
        }
    }
    CHECK(fill_ok);
    memcpy(host, back, sizeof host);

    /* copy between buffers at offsets */
    CHECK_OK(dl_buffer_fill32(dev, &b, 0, 400, 0));
    CHECK_OK(dl_buffer_copy(dev, &a, 100, &b, 200, 64));
    uint8_t bb[400];
    CHECK_OK(dl_buffer_download(dev, &b, 0, bb, sizeof bb));
    int copy_ok = 1;
    for (int i = 0; i < 400; i++)
        copy_ok &= bb[i] == ((i >= 200 && i < 264) ? host[100 + i - 200] : 0);
    CHECK(copy_ok);

    /* range errors name the range and change nothing */
    CHECK(dl_buffer_upload(dev, &a, 990, patch, 20) == -1);
    CHECK_MSG(strstr(dl_error(), "outside a buffer of 1000 bytes") != NULL, "%s", dl_error());
    CHECK(dl_buffer_download(dev, &b, 0, back, 401) == -1);
    CHECK(dl_buffer_download(dev, &b, SIZE_MAX, back, 2) == -1);
    CHECK(dl_buffer_fill32(dev, &a, 2, 8, 0) == -1);
    CHECK(dl_buffer_fill32(dev, &a, 0, 1004, 0) == -1);
    CHECK(dl_buffer_copy(dev, &a, 990, &b, 0, 20) == -1);
    CHECK(dl_buffer_copy(dev, &a, 0, &b, 390, 20) == -1);
    dl_buffer too_big;
    CHECK(dl_buffer_alloc(dev, (size_t)dl_device_get_info(dev)->max_alloc + 1, &too_big) == -1);
    CHECK_MSG(strstr(dl_error(), "maximum allocation") != NULL, "%s", dl_error());
    CHECK(too_big.mem == NULL);
    CHECK(dl_device_bytes_in_use(dev) == before + 1400);

    dl_buffer_free(dev, &a);
    CHECK(a.mem == NULL && a.size == 0);
    dl_buffer_free(dev, &a); /* freeing twice is harmless */
    dl_buffer_free(dev, &b);
    CHECK(dl_device_bytes_in_use(dev) == before);
}

static int write_text(const char *path, const char *text) {
    return dl_write_file_atomic(path, text, strlen(text));
}

static void test_build_failure(dl_device *dev) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/cl", temp_root);
    CHECK_OK(dl_mkdirs(dir));
    /* the real common.cl, so the reported line must be mapped past it */
    char *common;
    size_t common_size;
    CHECK_OK(dl_read_file(DEDLOC_SOURCE_DIR "/cl/common.cl", 1 << 20, &common, &common_size));
    snprintf(path, sizeof path, "%s/common.cl", dir);
    CHECK_OK(dl_write_file_atomic(path, common, common_size));
    free(common);
    snprintf(path, sizeof path, "%s/broken.cl", dir);
    CHECK_OK(write_text(path, "/* a kernel with a mistake on line 4 */\n"
                              "kernel void broken(global float *x) {\n"
                              "    size_t i = get_global_id(0);\n"
                              "    x[i] = undeclared_name * 2.0f;\n"
                              "}\n"));
    setenv("DEDLOC_CL_DIR", dir, 1);
    cl_program program = NULL;
    CHECK(dl_program_get(dev, "broken.cl", "", &program) == -1);
    CHECK_MSG(strstr(dl_error(), "broken.cl:4") != NULL, "%s", dl_error());
    CHECK(dl_program_get(dev, "missing.cl", "", &program) == -1);
    CHECK_MSG(strstr(dl_error(), "missing.cl") != NULL, "%s", dl_error());
    unsetenv("DEDLOC_CL_DIR");
    /* without the override, only embedded files exist */
    CHECK(dl_cl_source("broken.cl", NULL) == NULL);
    CHECK(dl_cl_source("common.cl", NULL) != NULL);
}

/* The first device start builds convert.cl from source and stores the
 * binary; a second start loads it and compiles nothing. */
static void test_binary_cache(void) {
    dl_device *first = NULL, *second = NULL;
    cl_program program;
    CHECK_OK(dl_device_open("0", &first));
    if (!first) return;
    CHECK_OK(dl_program_get(first, "convert.cl", "-DDL_TEST_CACHE_PROBE", &program));
    CHECK_OK(dl_program_get(first, "convert.cl", "-DDL_TEST_CACHE_PROBE", &program)); /* memoised */
    dl_program_stats s1 = dl_device_program_stats(first);
    CHECK(s1.built_from_source == 1);
    CHECK(s1.loaded_from_cache == 0);
    dl_device_close(first);

    CHECK_OK(dl_device_open("0", &second));
    if (!second) return;
    CHECK_OK(dl_program_get(second, "convert.cl", "-DDL_TEST_CACHE_PROBE", &program));
    dl_program_stats s2 = dl_device_program_stats(second);
    CHECK_MSG(s2.built_from_source == 0, "%lu builds", s2.built_from_source);
    CHECK(s2.loaded_from_cache == 1);
    /* the cached binary works: run a conversion through it */
    cl_kernel kernel;
    CHECK_OK(dl_kernel_create(second, "convert.cl", "-DDL_TEST_CACHE_PROBE",
                              "dl_convert_bf16_to_f32", &kernel));
    dl_buffer src, dst;
    CHECK_OK(dl_buffer_alloc(second, 2 * sizeof(uint16_t), &src));
    CHECK_OK(dl_buffer_alloc(second, 2 * sizeof(float), &dst));
    uint16_t in[2] = {0x3f80, 0xc040};
    CHECK_OK(dl_buffer_upload(second, &src, 0, in, sizeof in));
    cl_ulong zero = 0, n = 2;
    CHECK_OK(DL_ARG(kernel, 0, src.mem) || DL_ARG(kernel, 1, zero) || DL_ARG(kernel, 2, dst.mem) ||
             DL_ARG(kernel, 3, zero) || DL_ARG(kernel, 4, n));
    size_t global = 2;
    CHECK_OK(dl_launch(second, kernel, 1, &global, NULL));
    float out[2] = {0};
    CHECK_OK(dl_buffer_download(second, &dst, 0, out, sizeof out));
    CHECK(out[0] == 1.0f && out[1] == -3.0f);
    clReleaseKernel(kernel);
    dl_buffer_free(second, &src);
    dl_buffer_free(second, &dst);
    dl_device_close(second);

    /* a corrupt cache file is rebuilt, not trusted */
    char dir[600], path[1200];
    snprintf(dir, sizeof dir, "%s/cache/programs", temp_root);
    DIR *d = opendir(dir);
    int corrupted = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (!strncmp(e->d_name, "convert.cl-", 11)) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            corrupted += write_text(path, "not a program binary") == 0;
        }
    if (d) closedir(d);
    CHECK(corrupted == 1);
    dl_device *third = NULL;
    CHECK_OK(dl_device_open("0", &third));
    if (!third) return;
    CHECK_OK(dl_program_get(third, "convert.cl", "-DDL_TEST_CACHE_PROBE", &program));
    dl_program_stats s3 = dl_device_program_stats(third);
    CHECK(s3.built_from_source == 1 && s3.loaded_from_cache == 0);
    dl_device_close(third);
}

/* Stored tuning: a valid file is applied, a broken one is an error that
 * names the file, a missing one is fine. */
static void test_tuning_file(dl_device *dev) {
    char path[4096], key[128];
    dl_tune_device_key(dl_device_get_info(dev), key, sizeof key);
    CHECK(strstr(key, ".json") != NULL && strchr(key, '/') == NULL && strchr(key, ' ') == NULL);
    dl_tune_path(dl_device_get_info(dev), path, sizeof path);
    CHECK(strstr(path, "/clblast/") != NULL);
    bool applied = true;
    CHECK_OK(dl_tune_apply(dev, &applied));
    CHECK(!applied);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/clblast", dl_cache_dir());
    CHECK_OK(dl_mkdirs(dir));
    CHECK_OK(write_text(path, "{\"kernels\": [{\"kernel\": \"Xgemm\", \"precision\": 32, "
                              "\"parameters\": {\"GEMMK\": 0, \"KREG\": 1, \"KWG\": 32, "
                              "\"KWI\": 2, \"MDIMA\": 8, \"MDIMC\": 8, \"MWG\": 64, "
                              "\"NDIMB\": 8, \"NDIMC\": 8, \"NWG\": 64, \"SA\": 1, "
                              "\"SB\": 1, \"STRM\": 0, \"STRN\": 0, \"VWM\": 4, "
                              "\"VWN\": 4}}]}"));
    CHECK_OK(dl_tune_apply(dev, &applied));
    CHECK(applied);
    static const char *const broken[] = {
        "{\"kernels\": [",
        "{\"kernels\": 3}",
        "{\"kernels\": [{\"kernel\": \"Evil/../x\", \"precision\": 32, \"parameters\": {}}]}",
        "{\"kernels\": [{\"kernel\": \"Xgemm\", \"precision\": 32, \"parameters\": {\"KWG\": 32}}]}",
        "{\"kernels\": [{\"kernel\": \"Xgemm\", \"precision\": 32, \"parameters\": {\"KWG\": -1}}]}",
    };
    for (size_t i = 0; i < sizeof broken / sizeof *broken; i++) {
        CHECK_OK(write_text(path, broken[i]));
        CHECK_MSG(dl_tune_apply(dev, &applied) == -1, "case %zu", i);
        CHECK_MSG(strstr(dl_error(), key) != NULL, "case %zu: %s", i, dl_error());
    }
    /* a broken file never stops a device from opening */
    dl_device *other = NULL;
    CHECK_OK(dl_device_open("0", &other));
    dl_device_close(other);
    remove(path);
}

int main(void) {
    if (!mkdtemp(temp_root)) {
        perror("mkdtemp");
        return 1;
    }
    char cache[600];
    snprintf(cache, sizeof cache, "%s/cache", temp_root);
    setenv("DEDLOC_CACHE_DIR", cache, 1); /* before anything reads dl_cache_dir() */

    dl_device_info *infos = NULL;
    int count = 0;
    test_listing(&infos, &count);
    if (count > 0) {
        test_selection(infos, count);
        dl_device *dev = NULL;
        CHECK_OK(dl_device_open("0", &dev));
        if (dev) {
            test_buffers(dev);
            test_build_failure(dev);
            test_tuning_file(dev);
            dl_device_close(dev);
        }
        test_binary_cache();
    }
    free(infos);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", temp_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", temp_root);
    return dl_test_finish("test_device");
}
