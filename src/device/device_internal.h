/* Private to src/device: the device struct and helpers shared by its files. */
#ifndef DEDLOC_DEVICE_INTERNAL_H
#define DEDLOC_DEVICE_INTERNAL_H

#include <pthread.h>

#include "dedloc/device.h"

typedef struct dl_program_entry {
    char *file;
    char *options;
    cl_program program;
    struct dl_program_entry *next;
} dl_program_entry;

struct dl_device {
    dl_device_info info;
    cl_context context;
    cl_command_queue queue;
    dl_program_entry *programs;
    pthread_mutex_t lock;      /* guards programs and memory counters */
    size_t bytes_in_use, bytes_peak;
    dl_program_stats program_stats; /* guarded by lock */
    cl_kernel convert_kernels[4];   /* cl/convert.cl, created on first use */
    dl_gemm_backend gemm_backend;   /* who runs dl_gemm's fp32 products (gemm.c) */
};

/* The GEMM backend a freshly opened device gets: OpenBLAS on the mapped
 * buffers for a CPU device whose buffers live in host memory, when built with
 * OpenBLAS and not overridden by DEDLOC_GEMM_BACKEND; CLBlast otherwise. */
dl_gemm_backend dl_gemm_default_backend(const dl_device_info *info);

/* Fills info from a device id (src/device/device.c). */
int dl_device_probe(cl_platform_id platform, cl_device_id device, dl_device_info *info);
/* Applies stored CLBlast parameters for this device, if any (src/device/tune.c).
 * Failures are logged as warnings: a bad tuning file never stops a device. */
void dl_tune_apply_stored(dl_device *dev);

#endif
