/* fp32 <-> fp16 / bf16 conversion on the device (cl/convert.cl). */
#include "dedloc/util.h"
#include "device/device_internal.h"

enum { CONVERT_F32_TO_F16, CONVERT_F16_TO_F32, CONVERT_F32_TO_BF16, CONVERT_BF16_TO_F32 };

static const char *const convert_kernel_names[] = {
    [CONVERT_F32_TO_F16] = "dl_convert_f32_to_f16",
    [CONVERT_F16_TO_F32] = "dl_convert_f16_to_f32",
    [CONVERT_F32_TO_BF16] = "dl_convert_f32_to_bf16",
    [CONVERT_BF16_TO_F32] = "dl_convert_bf16_to_f32",
};

static int run_convert(dl_device *dev, int which, const dl_buffer *src, size_t src_off,
                       size_t src_elem, dl_buffer *dst, size_t dst_off, size_t dst_elem,
                       size_t n) {
    const char *name = convert_kernel_names[which];
    /* Range checks in bytes, with overflow checks, before anything is queued. */
    if (!src || !src->mem || !dst || !dst->mem) return dl_fail("%s: buffer not allocated", name);
    if (n > SIZE_MAX / 4 || src_off > src->size / src_elem || n > src->size / src_elem - src_off)
        return dl_fail("%s: source range [%zu, %zu) outside a buffer of %zu elements", name,
                       src_off, src_off + n, src->size / src_elem);
    if (dst_off > dst->size / dst_elem || n > dst->size / dst_elem - dst_off)
        return dl_fail("%s: destination range [%zu, %zu) outside a buffer of %zu elements", name,
                       dst_off, dst_off + n, dst->size / dst_elem);
    if (n == 0) return 0;

    pthread_mutex_lock(&dev->lock);
    cl_kernel kernel = dev->convert_kernels[which];
    pthread_mutex_unlock(&dev->lock);
    if (!kernel) {
        if (dl_kernel_create(dev, "convert.cl", "", name, &kernel)) return -1;
        pthread_mutex_lock(&dev->lock);
        if (dev->convert_kernels[which]) { /* another thread was first */
            clReleaseKernel(kernel);
            kernel = dev->convert_kernels[which];
        } else {
            dev->convert_kernels[which] = kernel;
        }
        pthread_mutex_unlock(&dev->lock);
    }
    cl_ulong src_off_arg = src_off, dst_off_arg = dst_off, n_arg = n;
    if (DL_ARG(kernel, 0, src->mem) || DL_ARG(kernel, 1, src_off_arg) ||
        DL_ARG(kernel, 2, dst->mem) || DL_ARG(kernel, 3, dst_off_arg) || DL_ARG(kernel, 4, n_arg))
        return dl_fail_context("%s", name);
    size_t global = n, local = 64;
    if (local > dev->info.max_work_group) local = dev->info.max_work_group;
    return dl_launch(dev, kernel, 1, &global, &local);
}

int dl_convert_f32_to_f16(dl_device *dev, const dl_buffer *src, size_t src_off, dl_buffer *dst,
                          size_t dst_off, size_t n) {
    return run_convert(dev, CONVERT_F32_TO_F16, src, src_off, 4, dst, dst_off, 2, n);
}

int dl_convert_f16_to_f32(dl_device *dev, const dl_buffer *src, size_t src_off, dl_buffer *dst,
                          size_t dst_off, size_t n) {
    return run_convert(dev, CONVERT_F16_TO_F32, src, src_off, 2, dst, dst_off, 4, n);
}

int dl_convert_f32_to_bf16(dl_device *dev, const dl_buffer *src, size_t src_off, dl_buffer *dst,
                           size_t dst_off, size_t n) {
    return run_convert(dev, CONVERT_F32_TO_BF16, src, src_off, 4, dst, dst_off, 2, n);
}

int dl_convert_bf16_to_f32(dl_device *dev, const dl_buffer *src, size_t src_off, dl_buffer *dst,
                           size_t dst_off, size_t n) {
    return run_convert(dev, CONVERT_BF16_TO_F32, src, src_off, 2, dst, dst_off, 4, n);
}
