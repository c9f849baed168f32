/* Cross-entropy over rows of logits with one target each (the rows are
 * already only the labelled ones). Writes each row's loss and replaces the
 * logits by their gradient times grad_scale (softmax - onehot). */
__kernel void cross_entropy_forward_backward(__global float *logits, __global const int *targets,
                                             __global float *losses, int rows, int V,
                                             float grad_scale, int want_grad) {
    int r = get_global_id(0);
    if (r >= rows) return;
    __global float *x = logits + (size_t)r * V;
    float mx = -INFINITY;
    for (int j = 0; j < V; j++) mx = fmax(mx, x[j]);
    float sum = 0.0f;
    for (int j = 0; j < V; j++) sum += exp(x[j] - mx);
    float log_sum = log(sum);
    int target = targets[r];
    losses[r] = log_sum - (x[target] - mx);
    if (!want_grad) return;
    for (int j = 0; j < V; j++) {
        float p = exp(x[j] - mx - log_sum);
        x[j] = (p - (j == target ? 1.0f : 0.0f)) * grad_scale;
    }
}
