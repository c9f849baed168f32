/* OpenCL discovery and opening a device: the device list, the selector
 * (index or name part), the context and queue, and OpenCL error names with
 * advice for the user. */
#include <clblast_c.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "device/device_internal.h"

const char *dl_cl_error_name(cl_int err) {
    switch (err) {
#define E(x) case x: return #x;
        E(CL_SUCCESS) E(CL_DEVICE_NOT_FOUND) E(CL_DEVICE_NOT_AVAILABLE) E(CL_COMPILER_NOT_AVAILABLE)
        E(CL_MEM_OBJECT_ALLOCATION_FAILURE) E(CL_OUT_OF_RESOURCES) E(CL_OUT_OF_HOST_MEMORY)
        E(CL_PROFILING_INFO_NOT_AVAILABLE) E(CL_MEM_COPY_OVERLAP) E(CL_IMAGE_FORMAT_MISMATCH)
        E(CL_IMAGE_FORMAT_NOT_SUPPORTED) E(CL_BUILD_PROGRAM_FAILURE) E(CL_MAP_FAILURE)
        E(CL_MISALIGNED_SUB_BUFFER_OFFSET) E(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
        E(CL_COMPILE_PROGRAM_FAILURE) E(CL_LINKER_NOT_AVAILABLE) E(CL_LINK_PROGRAM_FAILURE)
        E(CL_DEVICE_PARTITION_FAILED) E(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) E(CL_INVALID_VALUE)
        E(CL_INVALID_DEVICE_TYPE) E(CL_INVALID_PLATFORM) E(CL_INVALID_DEVICE) E(CL_INVALID_CONTEXT)
        E(CL_INVALID_QUEUE_PROPERTIES) E(CL_INVALID_COMMAND_QUEUE) E(CL_INVALID_HOST_PTR)
        E(CL_INVALID_MEM_OBJECT) E(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR) E(CL_INVALID_IMAGE_SIZE)
        E(CL_INVALID_SAMPLER) E(CL_INVALID_BINARY) E(CL_INVALID_BUILD_OPTIONS) E(CL_INVALID_PROGRAM)
        E(CL_INVALID_PROGRAM_EXECUTABLE) E(CL_INVALID_KERNEL_NAME) E(CL_INVALID_KERNEL_DEFINITION)
        E(CL_INVALID_KERNEL) E(CL_INVALID_ARG_INDEX) E(CL_INVALID_ARG_VALUE) E(CL_INVALID_ARG_SIZE)
        E(CL_INVALID_KERNEL_ARGS) E(CL_INVALID_WORK_DIMENSION) E(CL_INVALID_WORK_GROUP_SIZE)
        E(CL_INVALID_WORK_ITEM_SIZE) E(CL_INVALID_GLOBAL_OFFSET) E(CL_INVALID_EVENT_WAIT_LIST)
        E(CL_INVALID_EVENT) E(CL_INVALID_OPERATION) E(CL_INVALID_GL_OBJECT) E(CL_INVALID_BUFFER_SIZE)
        E(CL_INVALID_MIP_LEVEL) E(CL_INVALID_GLOBAL_WORK_SIZE) E(CL_INVALID_PROPERTY)
        E(CL_INVALID_IMAGE_DESCRIPTOR) E(CL_INVALID_COMPILER_OPTIONS) E(CL_INVALID_LINKER_OPTIONS)
        E(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef E
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: {
        static _Thread_local char buf[32];
        snprintf(buf, sizeof buf, "CL error %d", (int)err);
        return buf;
    }
    }
}

static const char *cl_advice(cl_int err) {
    switch (err) {
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_RESOURCES:
        return "the device ran out of memory or resources; try a smaller --batch or --seq";
    case CL_OUT_OF_HOST_MEMORY: return "the host ran out of memory";
    case CL_DEVICE_NOT_FOUND:
    case -1001:
        return "no OpenCL device found; install a driver (e.g. pocl-opencl-icd for CPUs) and "
               "check 'dedloc devices'";
    case CL_BUILD_PROGRAM_FAILURE: return "a kernel failed to compile; see the build log above";
    case CL_INVALID_BUFFER_SIZE: return "a buffer exceeds the device's maximum allocation";
    default: return NULL;
    }
}

int dl_cl_check(cl_int err, const char *what) {
    if (err == CL_SUCCESS) return 0;
    const char *advice = cl_advice(err);
    if (advice) return dl_fail("%s failed: %s (%s)", what, dl_cl_error_name(err), advice);
    return dl_fail("%s failed: %s", what, dl_cl_error_name(err));
}

static void get_string(cl_device_id d, cl_device_info what, char *out, size_t size) {
    out[0] = 0;
    if (clGetDeviceInfo(d, what, size, out, NULL) != CL_SUCCESS) out[0] = 0;
    out[size - 1] = 0;
    /* drivers pad some strings with spaces */
    size_t n = strlen(out);
    while (n && isspace((unsigned char)out[n - 1])) out[--n] = 0;
}

int dl_device_probe(cl_platform_id platform, cl_device_id device, dl_device_info *info) {
    memset(info, 0, sizeof *info);
    info->platform_id = platform;
    info->device_id = device;
    clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof info->platform, info->platform, NULL);
    info->platform[sizeof info->platform - 1] = 0;
    get_string(device, CL_DEVICE_NAME, info->name, sizeof info->name);
    get_string(device, CL_DEVICE_VENDOR, info->vendor, sizeof info->vendor);
    get_string(device, CL_DRIVER_VERSION, info->driver, sizeof info->driver);
    get_string(device, CL_DEVICE_VERSION, info->device_version, sizeof info->device_version);
    get_string(device, CL_DEVICE_OPENCL_C_VERSION, info->opencl_c_version,
               sizeof info->opencl_c_version);
    cl_device_type type = 0;
    clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    info->is_gpu = (type & CL_DEVICE_TYPE_GPU) != 0;
    info->is_cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
    clGetDeviceInfo(device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof info->compute_units,
                    &info->compute_units, NULL);
    clGetDeviceInfo(device, CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof info->max_clock_mhz,
                    &info->max_clock_mhz, NULL);
    clGetDeviceInfo(device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof info->global_mem, &info->global_mem,
                    NULL);
    clGetDeviceInfo(device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof info->local_mem, &info->local_mem,
                    NULL);
    clGetDeviceInfo(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof info->max_alloc,
                    &info->max_alloc, NULL);
    clGetDeviceInfo(device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof info->max_work_group,
                    &info->max_work_group, NULL);
    clGetDeviceInfo(device, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof info->max_work_item,
                    info->max_work_item, NULL);
    cl_bool unified = CL_FALSE;
    clGetDeviceInfo(device, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL);
    info->unified_memory = unified == CL_TRUE;
    size_t ext_size = 0;
    if (clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, 0, NULL, &ext_size) == CL_SUCCESS &&
        ext_size) {
        char *ext = dl_malloc(ext_size + 1);
        if (!ext) return -1;
        if (clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, ext_size, ext, NULL) == CL_SUCCESS) {
            ext[ext_size] = 0;
            info->fp16 = strstr(ext, "cl_khr_fp16") != NULL;
            info->fp64 = strstr(ext, "cl_khr_fp64") != NULL;
        }
        free(ext);
    }
    return 0;
}

int dl_device_list(dl_device_info **infos, int *count) {
    *infos = NULL;
    *count = 0;
    cl_uint nplat = 0;
    cl_int err = clGetPlatformIDs(0, NULL, &nplat);
    if (err == -1001 || (err == CL_SUCCESS && nplat == 0))
        return dl_fail("no OpenCL platform found: install an OpenCL driver (on Debian: "
                       "apt-get install pocl-opencl-icd for CPUs, or your GPU vendor's ICD)");
    if (dl_cl_check(err, "clGetPlatformIDs")) return -1;
    cl_platform_id *plats = dl_calloc(nplat, sizeof *plats);
    if (!plats) return -1;
    if (dl_cl_check(clGetPlatformIDs(nplat, plats, NULL), "clGetPlatformIDs")) {
        free(plats);
        return -1;
    }
    dl_device_info *list = NULL;
    int n = 0;
    for (cl_uint p = 0; p < nplat; p++) {
        cl_uint ndev = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &ndev) != CL_SUCCESS || !ndev)
            continue;
        cl_device_id *devs = dl_calloc(ndev, sizeof *devs);
        dl_device_info *grown = devs ? dl_realloc(list, (size_t)(n + (int)ndev) * sizeof *list)
                                     : NULL;
        if (!grown) {
            free(devs);
            free(list);
            free(plats);
            return -1;
        }
        list = grown;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, ndev, devs, NULL) == CL_SUCCESS) {
            for (cl_uint d = 0; d < ndev; d++) {
                if (dl_device_probe(plats[p], devs[d], &list[n]) != 0) continue;
                list[n].index = n;
                list[n].platform_index = (int)p;
                n++;
            }
        }
        free(devs);
    }
    free(plats);
    if (n == 0) {
        free(list);
        return dl_fail("OpenCL platforms found, but no devices; check your driver installation");
    }
    *infos = list;
    *count = n;
    return 0;
}

static bool contains_nocase(const char *hay, const char *needle) {
    size_t nl = strlen(needle);
    for (const char *h = hay; *h; h++)
        if (!strncasecmp(h, needle, nl)) return true;
    return false;
}

int dl_device_open(const char *selector, dl_device **out) {
    const char *no_tuning = getenv("DEDLOC_NO_TUNING");
    return dl_device_open_ex(selector, no_tuning && no_tuning[0] ? DL_OPEN_NO_TUNING : 0, out);
}

int dl_device_open_ex(const char *selector, unsigned flags, dl_device **out) {
    *out = NULL;
    dl_device_info *infos;
    int count;
    if (dl_device_list(&infos, &count)) return -1;
    int pick = -1;
    if (!selector || !selector[0]) {
        for (int i = 0; i < count && pick < 0; i++)
            if (infos[i].is_gpu) pick = i;
        if (pick < 0) pick = 0;
    } else {
        char *end;
        long idx = strtol(selector, &end, 10);
        if (*end == 0) {
            if (idx < 0 || idx >= count) {
                free(infos);
                return dl_fail("device index %ld out of range: %d device(s) found; see "
                               "'dedloc devices'", idx, count);
            }
            pick = (int)idx;
        } else {
            for (int i = 0; i < count && pick < 0; i++)
                if (contains_nocase(infos[i].name, selector) ||
                    contains_nocase(infos[i].vendor, selector) ||
                    contains_nocase(infos[i].platform, selector))
                    pick = i;
            if (pick < 0) {
                free(infos);
                return dl_fail("no device matches '%s'; see 'dedloc devices'", selector);
            }
        }
    }
    dl_device *dev = dl_calloc(1, sizeof *dev);
    if (!dev) {
        free(infos);
        return -1;
    }
    dev->info = infos[pick];
    free(infos);
    pthread_mutex_init(&dev->lock, NULL);
    cl_int err;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                     (cl_context_properties)dev->info.platform_id, 0};
    dev->context = clCreateContext(props, 1, &dev->info.device_id, NULL, NULL, &err);
    if (dl_cl_check(err, "clCreateContext")) {
        dl_fail_context("opening device '%s'", dev->info.name);
        free(dev);
        return -1;
    }
    dev->queue = clCreateCommandQueue(dev->context, dev->info.device_id, 0, &err);
    if (dl_cl_check(err, "clCreateCommandQueue")) {
        clReleaseContext(dev->context);
        free(dev);
        return -1;
    }
    if (!(flags & DL_OPEN_NO_TUNING)) dl_tune_apply_stored(dev);
    dev->gemm_backend = (flags & DL_OPEN_CLBLAST) ? DL_GEMM_CLBLAST : dl_gemm_default_backend(&dev->info);
    *out = dev;
    return 0;
}

void dl_device_close(dl_device *dev) {
    if (!dev) return;
    clFinish(dev->queue);
    /* CLBlast keeps the programs it built in a process-wide cache that it
     * would release only at exit, after the OpenCL runtime may have torn
     * itself down (Oclgrind then aborts with a corrupted heap); its entries
     * for this context can never be used again anyway. */
    CLBlastClearCache();
    for (size_t i = 0; i < sizeof dev->convert_kernels / sizeof *dev->convert_kernels; i++)
        if (dev->convert_kernels[i]) clReleaseKernel(dev->convert_kernels[i]);
    for (dl_program_entry *e = dev->programs, *next; e; e = next) {
        next = e->next;
        clReleaseProgram(e->program);
        free(e->file);
        free(e->options);
        free(e);
    }
    clReleaseCommandQueue(dev->queue);
    clReleaseContext(dev->context);
    pthread_mutex_destroy(&dev->lock);
    free(dev);
}

const dl_device_info *dl_device_get_info(const dl_device *dev) { return &dev->info; }

dl_program_stats dl_device_program_stats(const dl_device *dev) {
    dl_device *mutable_dev = (dl_device *)dev; /* the lock is not part of the value */
    pthread_mutex_lock(&mutable_dev->lock);
    dl_program_stats stats = dev->program_stats;
    pthread_mutex_unlock(&mutable_dev->lock);
    return stats;
}
cl_context dl_device_context(const dl_device *dev) { return dev->context; }
cl_command_queue dl_device_queue(const dl_device *dev) { return dev->queue; }

int dl_device_finish(dl_device *dev) { return dl_cl_check(clFinish(dev->queue), "clFinish"); }

int dl_launch(dl_device *dev, cl_kernel kernel, cl_uint dims, const size_t *global,
              const size_t *local) {
    size_t g[3];
    for (cl_uint i = 0; i < dims; i++) {
        g[i] = global[i];
        if (local && local[i]) g[i] = (g[i] + local[i] - 1) / local[i] * local[i];
        if (g[i] == 0) return 0; /* nothing to do */
    }
    cl_int err = clEnqueueNDRangeKernel(dev->queue, kernel, dims, NULL, g, local, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        char name[128] = "?";
        clGetKernelInfo(kernel, CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL);
        name[sizeof name - 1] = 0;
        char what[192];
        snprintf(what, sizeof what, "launching kernel %s", name);
        return dl_cl_check(err, what);
    }
    return 0;
}
