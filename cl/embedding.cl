/* Factorised ALBERT embeddings: word + token type + position, and the
 * deterministic backward (every gradient element is summed by one work item in
 * a fixed order; no atomics). Rows are tokens n = b*T + t, E columns. */

/* out[n, e] = (word[id[n], e] + type[tt[n], e]) + pos[n % T, e] (HF's order). */
__kernel void embedding_forward(__global float *out, __global const int *ids,
                                __global const int *types, __global const float *params,
                                int word_off, int pos_off, int type_off, int N, int T, int E) {
    int e = get_global_id(0), n = get_global_id(1);
    if (e >= E || n >= N) return;
    float w = params[word_off + ids[n] * E + e];
    float ty = params[type_off + types[n] * E + e];
    float p = params[pos_off + (n % T) * E + e];
    out[n * E + e] = (w + ty) + p;
}

/* Word rows: positions are grouped by token id on the host (sorted_rows,
 * segments of one id each: seg_ids[s], rows seg_start[s]..seg_start[s+1]).
 * One work item per (segment, column) sums its rows in order. */
__kernel void embedding_backward_word(__global float *grads, __global const float *dout,
                                      __global const int *sorted_rows,
                                      __global const int *seg_ids, __global const int *seg_start,
                                      int segments, int word_off, int E) {
    int e = get_global_id(0), s = get_global_id(1);
    if (e >= E || s >= segments) return;
    float sum = 0.0f;
    for (int j = seg_start[s]; j < seg_start[s + 1]; j++) sum += dout[sorted_rows[j] * E + e];
    grads[word_off + seg_ids[s] * E + e] += sum;
}

/* Position rows: t gets the sum over the batch of row b*T + t. */
__kernel void embedding_backward_position(__global float *grads, __global const float *dout,
                                          int pos_off, int B, int T, int E) {
    int e = get_global_id(0), t = get_global_id(1);
    if (e >= E || t >= T) return;
    float sum = 0.0f;
    for (int b = 0; b < B; b++) sum += dout[(b * T + t) * E + e];
    grads[pos_off + t * E + e] += sum;
}

/* Token type rows: few types, so each scans all rows for its own. */
__kernel void embedding_backward_type(__global float *grads, __global const float *dout,
                                      __global const int *types, int type_off, int N,
                                      int type_vocab, int E) {
    int e = get_global_id(0), ty = get_global_id(1);
    if (e >= E || ty >= type_vocab) return;
    float sum = 0.0f;
    for (int n = 0; n < N; n++)
        if (types[n] == ty) sum += dout[n * E + e];
    grads[type_off + ty * E + e] += sum;
}
