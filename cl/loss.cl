/* Cross-entropy over rows of logits with one target each (the rows are
 * already only the labelled ones), one work-group per row. Writes each row's
 * loss and replaces the logits by their gradient times grad_scale (softmax -
 * onehot). The logits are rows row0.. of the targets and losses (the MLM
 * decoder runs in chunks of rows). */
__kernel void cross_entropy_forward_backward(__global float *logits, __global const int *targets,
                                             __global float *losses, int rows, int V,
                                             float grad_scale, int want_grad, int row0) {
    __local float scratch[DL_ROW_GROUP];
    int r = get_group_id(0), lid = get_local_id(0), n = get_local_size(0);
    if (r >= rows) return;
    __global float *x = logits + (size_t)r * V;
    int target = targets[row0 + r];
    float mx = -INFINITY;
    DL_FOR_ROW(j, lid, n, V) mx = fmax(mx, x[j]);
    mx = dl_group_max(mx, scratch);
    float part = 0.0f;
    DL_FOR_ROW(j, lid, n, V) part += exp(x[j] - mx);
    float log_sum = log(dl_group_sum(part, scratch));
    if (lid == 0) losses[row0 + r] = log_sum - (x[target] - mx);
    if (!want_grad) return;
    /* The gradient overwrites the row in place, x[target] included, which
     * item 0 has just read and which another item may write: the barriers
     * of dl_group_sum fence only local memory, so this one orders the
     * group's global reads of the row before any write to it. */
    barrier(CLK_GLOBAL_MEM_FENCE);
    DL_FOR_ROW(j, lid, n, V) {
        float p = exp(x[j] - mx - log_sum);
        x[j] = (p - (j == target ? 1.0f : 0.0f)) * grad_scale;
    }
}
