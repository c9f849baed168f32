/* Activation storage in the model's precision (fp32, fp16 or bf16, chosen by
 * the build options of common.cl). The layers compute in fp32 working
 * buffers; what is kept for the backward pass goes through these. */

/* dst = storage(src) and src = the stored value read back, so the forward
 * pass goes on with exactly what the backward pass will see. */
__kernel void storage_keep(__global store_t *dst, __global float *src, int n) {
    int i = get_global_id(0);
    if (i >= n) return;
    STORE(dst, i, src[i]);
    src[i] = LOAD(dst, i);
}

__kernel void storage_load(__global float *dst, __global const store_t *src, int n) {
    int i = get_global_id(0);
    if (i >= n) return;
    dst[i] = LOAD(src, i);
}
