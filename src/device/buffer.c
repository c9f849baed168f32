/* Device buffers: checked allocation, upload, download, fill and copy, with
 * the device memory in use and its peak counted per device. */
#include <string.h>

#include "dedloc/util.h"
#include "device/device_internal.h"

int dl_buffer_alloc(dl_device *dev, size_t bytes, dl_buffer *out) {
    out->mem = NULL;
    out->size = 0;
    if (bytes > dev->info.max_alloc)
        return dl_fail("buffer of %zu bytes exceeds the device's maximum allocation of %llu bytes",
                       bytes, (unsigned long long)dev->info.max_alloc);
    cl_int err;
    /* zero-size buffers are invalid in OpenCL; allocate one word instead */
    out->mem = clCreateBuffer(dev->context, CL_MEM_READ_WRITE, bytes ? bytes : 4, NULL, &err);
    if (err != CL_SUCCESS) {
        out->mem = NULL;
        char what[96];
        snprintf(what, sizeof what, "allocating %zu bytes on the device", bytes);
        return dl_cl_check(err, what);
    }
    out->size = bytes;
    pthread_mutex_lock(&dev->lock);
    dev->bytes_in_use += bytes;
    if (dev->bytes_in_use > dev->bytes_peak) dev->bytes_peak = dev->bytes_in_use;
    pthread_mutex_unlock(&dev->lock);
    return 0;
}

void dl_buffer_free(dl_device *dev, dl_buffer *buf) {
    if (!buf || !buf->mem) return;
    clReleaseMemObject(buf->mem);
    pthread_mutex_lock(&dev->lock);
    dev->bytes_in_use -= buf->size;
    pthread_mutex_unlock(&dev->lock);
    buf->mem = NULL;
    buf->size = 0;
}

static int check_range(const dl_buffer *buf, size_t offset, size_t bytes, const char *what) {
    if (!buf || !buf->mem) return dl_fail("%s: buffer not allocated", what);
    if (offset > buf->size || bytes > buf->size - offset)
        return dl_fail("%s: range [%zu, %zu) outside a buffer of %zu bytes", what, offset,
                       offset + bytes, buf->size);
    return 0;
}

int dl_buffer_upload(dl_device *dev, dl_buffer *buf, size_t offset, const void *src, size_t bytes) {
    if (check_range(buf, offset, bytes, "upload")) return -1;
    if (!bytes) return 0;
    return dl_cl_check(clEnqueueWriteBuffer(dev->queue, buf->mem, CL_TRUE, offset, bytes, src, 0,
                                            NULL, NULL),
                       "uploading to the device");
}

int dl_buffer_download(dl_device *dev, const dl_buffer *buf, size_t offset, void *dst,
                       size_t bytes) {
    if (check_range(buf, offset, bytes, "download")) return -1;
    if (!bytes) return 0;
    return dl_cl_check(clEnqueueReadBuffer(dev->queue, buf->mem, CL_TRUE, offset, bytes, dst, 0,
                                           NULL, NULL),
                       "downloading from the device");
}

int dl_buffer_fill32(dl_device *dev, dl_buffer *buf, size_t offset, size_t bytes, uint32_t pattern) {
    if (check_range(buf, offset, bytes, "fill")) return -1;
    if (offset % 4 || bytes % 4) return dl_fail("fill: offset and size must be multiples of 4");
    if (!bytes) return 0;
    return dl_cl_check(clEnqueueFillBuffer(dev->queue, buf->mem, &pattern, sizeof pattern, offset,
                                           bytes, 0, NULL, NULL),
                       "filling a device buffer");
}

int dl_buffer_copy(dl_device *dev, const dl_buffer *src, size_t src_off, dl_buffer *dst,
                   size_t dst_off, size_t bytes) {
    if (check_range(src, src_off, bytes, "copy source") ||
        check_range(dst, dst_off, bytes, "copy destination"))
        return -1;
    if (!bytes) return 0;
    return dl_cl_check(clEnqueueCopyBuffer(dev->queue, src->mem, dst->mem, src_off, dst_off, bytes,
                                           0, NULL, NULL),
                       "copying between device buffers");
}

size_t dl_device_bytes_in_use(const dl_device *dev) { return dev->bytes_in_use; }
size_t dl_device_bytes_peak(const dl_device *dev) { return dev->bytes_peak; }
