/* Precision conversions between fp32 and 16-bit storage. fp16 goes through the
 * core OpenCL 1.2 vload_half / vstore_half_rte (no cl_khr_fp16 needed); NaNs
 * are converted by hand because drivers may canonicalise their payloads, and
 * the host conversion (src/util/half.c) keeps them: both must agree bit for bit.
 * bf16 is the top half of an fp32, rounded to nearest even (common.cl). */

kernel void dl_convert_f32_to_f16(global const float *src, ulong src_off, global ushort *dst,
                                  ulong dst_off, ulong n) {
    size_t i = get_global_id(0);
    if (i >= n) return;
    float value = src[src_off + i];
    uint bits = as_uint(value);
    if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu))
        dst[dst_off + i] = (ushort)(((bits >> 16) & 0x8000u) | 0x7e00u | ((bits & 0x7fffffu) >> 13));
    else
        vstore_half_rte(value, dst_off + i, (global half *)dst);
}

kernel void dl_convert_f16_to_f32(global const ushort *src, ulong src_off, global float *dst,
                                  ulong dst_off, ulong n) {
    size_t i = get_global_id(0);
    if (i >= n) return;
    uint h = src[src_off + i];
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu))
        dst[dst_off + i] = as_float(((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x3ffu) << 13));
    else
        dst[dst_off + i] = vload_half(src_off + i, (global const half *)src);
}

kernel void dl_convert_f32_to_bf16(global const float *src, ulong src_off, global ushort *dst,
                                   ulong dst_off, ulong n) {
    size_t i = get_global_id(0);
    if (i >= n) return;
    dst[dst_off + i] = dl_to_bf16(src[src_off + i]);
}

kernel void dl_convert_bf16_to_f32(global const ushort *src, ulong src_off, global float *dst,
                                   ulong dst_off, ulong n) {
    size_t i = get_global_id(0);
    if (i >= n) return;
    dst[dst_off + i] = as_float(((uint)src[src_off + i]) << 16);
}
