/* One test per kernel family on random inputs with odd sizes: the forward
 * against a double-precision CPU reference, the backward against finite
 * differences of that reference (L = sum w * out for random w, so dL/dout =
 * w). Outputs are poisoned with NaN before every launch, so an element a
 * kernel forgets to write shows up. Every test runs twice: with the kernels
 * shaped for a GPU (a work-group per row, an item per column or element) and
 * shaped for a CPU as the model builds them there (an item per row with 16
 * lanes, 16 columns or elements per item; cl/common.cl), the sizes leaving a
 * ragged end in both. Beside the random inputs, the row kernels meet inputs
 * that only a numerically safe form survives in fp32 (huge and fully masked
 * scores, rows far from zero, huge logits): a softmax or cross-entropy
 * without its max shift, or a one-pass variance, fails them. */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/device.h"
#include "dedloc/util.h"
#include "dl_test.h"

static dl_device *dev;
static dl_rng rng;
static const uint32_t POISON = 0x7fc00000u; /* quiet NaN */

static float *randn(size_t n, float scale) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = dl_rng_normal(&rng) * scale;
    return x;
}

static dl_buffer upload(const void *data, size_t bytes) {
    dl_buffer b = {0};
    CHECK_OK(dl_buffer_alloc(dev, bytes ? bytes : 4, &b));
    if (bytes) CHECK_OK(dl_buffer_upload(dev, &b, 0, data, bytes));
    return b;
}

static dl_buffer poisoned(size_t floats) {
    dl_buffer b = {0};
    CHECK_OK(dl_buffer_alloc(dev, floats * 4, &b));
    CHECK_OK(dl_buffer_fill32(dev, &b, 0, floats * 4, POISON));
    return b;
}

static float *download(const dl_buffer *b, size_t floats) {
    float *x = malloc(floats * sizeof *x);
    CHECK_OK(dl_buffer_download(dev, b, 0, x, floats * 4));
    return x;
}

/* The CPU shape: DL_COL_VEC columns or elements per item, DL_ROW_LANES. */
static bool cpu_shape;
enum { COL_VEC = 16 };

/* The work-group of the row kernels, as the model sizes it: 16 in the CPU
 * shape; in the GPU shape 32, which divides none of the row lengths, so
 * every strided loop has a ragged end. The kernels are built for exactly
 * the group they are launched with (their local scratch holds
 * DL_ROW_GROUP floats, one per item). */
static int row_group(void) { return cpu_shape ? 16 : 32; }

static cl_kernel kernel(const char *file, const char *name) {
    cl_kernel k = NULL;
    char opts[96];
    snprintf(opts, sizeof opts, "-DDL_ROW_GROUP=%d%s", row_group(),
             cpu_shape ? " -DDL_COL_VEC=16 -DDL_ROW_LANES" : "");
    CHECK_OK(dl_kernel_create(dev, file, opts, name, &k));
    return k;
}

static void launch(cl_kernel k, int dims, size_t g0, size_t g1) {
    size_t global[2] = {g0, g1};
    CHECK_OK(dl_launch(dev, k, (cl_uint)dims, global, NULL));
    CHECK_OK(dl_device_finish(dev));
}

/* A row kernel: one work-group of row_group() items per row. */
static void launch_group_rows(cl_kernel k, int rows) {
    size_t global = (size_t)rows * (size_t)row_group(), local = (size_t)row_group();
    CHECK_OK(dl_launch(dev, k, 1, &global, &local));
    CHECK_OK(dl_device_finish(dev));
}

/* The LayerNorm and softmax kernels: an item per row in the CPU shape. */
static void launch_rows(cl_kernel k, int rows) {
    if (!cpu_shape) return launch_group_rows(k, rows);
    launch(k, 1, (size_t)rows, 1);
}

/* Column reductions and elementwise kernels over n columns or elements. */
static size_t items(int n) { return cpu_shape ? ((size_t)n + COL_VEC - 1) / COL_VEC : (size_t)n; }

/* |a-b| / (1 + |b|); NaN when a is (a poisoned element nobody wrote). */
static double rel_diff(double a, double b) { return dl_test_diff(a, b) / (1.0 + fabs(b)); }

/* max |a-b| / (1 + |b|) over n; a NaN anywhere makes it NaN (dl_test_worse). */
static double max_err(const float *a, const double *b, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) worst = dl_test_worse(worst, rel_diff(a[i], b[i]));
    return worst;
}

/* ---- LayerNorm ---- */
static void ln_ref(const double *x, const double *g, const double *b, double *y, int rows, int C,
                   double eps) {
    for (int r = 0; r < rows; r++) {
        double mean = 0, var = 0;
        for (int c = 0; c < C; c++) mean += x[r * C + c];
        mean /= C;
        for (int c = 0; c < C; c++) var += (x[r * C + c] - mean) * (x[r * C + c] - mean);
        var /= C;
        for (int c = 0; c < C; c++)
            y[r * C + c] = (x[r * C + c] - mean) / sqrt(var + eps) * g[c] + b[c];
    }
}

static double ln_loss(const double *x, const double *p, const float *w, int rows, int C) {
    double *y = malloc((size_t)rows * C * sizeof *y), L = 0;
    ln_ref(x, p, p + C, y, rows, C, 1e-12);
    for (int i = 0; i < rows * C; i++) L += y[i] * w[i];
    free(y);
    return L;
}

static void test_layernorm(void) {
    int rows = 7, C = 37;
    size_t n = (size_t)rows * C;
    float *x = randn(n, 2.0f), *params = randn(2 * (size_t)C, 1.0f), *w = randn(n, 1.0f);
    for (int i = 0; i < rows * C; i++) x[i] += 0.5f;
    double *xd = malloc(n * sizeof *xd), *pd = malloc(2 * (size_t)C * sizeof *pd),
           *yd = malloc(n * sizeof *yd);
    for (size_t i = 0; i < n; i++) xd[i] = x[i];
    for (int i = 0; i < 2 * C; i++) pd[i] = params[i];
    ln_ref(xd, pd, pd + C, yd, rows, C, 1e-12);
    /* parameters at an offset inside a bigger buffer, as in the model */
    float *pbuf = calloc(2 * (size_t)C + 5, sizeof *pbuf);
    memcpy(pbuf + 5, params, 2 * (size_t)C * sizeof *pbuf);
    dl_buffer in = upload(x, n * 4), pb = upload(pbuf, (2 * (size_t)C + 5) * 4), out = poisoned(n),
              mean = poisoned((size_t)rows), rstd = poisoned((size_t)rows);
    cl_kernel k = kernel("layernorm.cl", "layernorm_forward");
    int goff = 5, boff = 5 + C;
    float eps = 1e-12f;
    DL_ARG(k, 0, out.mem); DL_ARG(k, 1, mean.mem); DL_ARG(k, 2, rstd.mem); DL_ARG(k, 3, in.mem);
    DL_ARG(k, 4, pb.mem); DL_ARG(k, 5, goff); DL_ARG(k, 6, boff); DL_ARG(k, 7, rows);
    DL_ARG(k, 8, C); DL_ARG(k, 9, eps);
    launch_rows(k, rows);
    float *y = download(&out, n);
    double e = max_err(y, yd, n);
    CHECK_MSG(e < 1e-5, "layernorm forward err %g", e);

    /* backward: dx and d(gamma, beta) with gradients accumulating onto 1.0 */
    dl_buffer dy = upload(w, n * 4), dx = poisoned(n);
    float *g0 = malloc((2 * (size_t)C + 5) * sizeof *g0);
    for (int i = 0; i < 2 * C + 5; i++) g0[i] = 1.0f;
    dl_buffer grads = upload(g0, (2 * (size_t)C + 5) * 4);
    cl_kernel kb = kernel("layernorm.cl", "layernorm_backward_input");
    DL_ARG(kb, 0, dx.mem); DL_ARG(kb, 1, dy.mem); DL_ARG(kb, 2, in.mem); DL_ARG(kb, 3, mean.mem);
    DL_ARG(kb, 4, rstd.mem); DL_ARG(kb, 5, pb.mem); DL_ARG(kb, 6, goff); DL_ARG(kb, 7, rows);
    DL_ARG(kb, 8, C);
    launch_rows(kb, rows);
    cl_kernel kp = kernel("layernorm.cl", "layernorm_backward_params");
    DL_ARG(kp, 0, grads.mem); DL_ARG(kp, 1, dy.mem); DL_ARG(kp, 2, in.mem); DL_ARG(kp, 3, mean.mem);
    DL_ARG(kp, 4, rstd.mem); DL_ARG(kp, 5, goff); DL_ARG(kp, 6, boff); DL_ARG(kp, 7, rows);
    DL_ARG(kp, 8, C);
    launch(kp, 1, items(C), 1);
    float *gx = download(&dx, n), *gp = download(&grads, 2 * (size_t)C + 5);
    double worst = 0, h = 1e-4;
    for (size_t i = 0; i < n; i += 3) {
        double keep = xd[i];
        xd[i] = keep + h;
        double lp = ln_loss(xd, pd, w, rows, C);
        xd[i] = keep - h;
        double lm = ln_loss(xd, pd, w, rows, C);
        xd[i] = keep;
        double fd = (lp - lm) / (2 * h);
        worst = dl_test_worse(worst, rel_diff(gx[i], fd));
    }
    CHECK_MSG(worst < 1e-4, "layernorm dx vs finite differences: %g", worst);
    worst = 0;
    for (int i = 0; i < 2 * C; i++) {
        double keep = pd[i];
        pd[i] = keep + h;
        double lp = ln_loss(xd, pd, w, rows, C);
        pd[i] = keep - h;
        double lm = ln_loss(xd, pd, w, rows, C);
        pd[i] = keep;
        double fd = (lp - lm) / (2 * h);
        worst = dl_test_worse(worst, rel_diff(gp[5 + i] - 1.0, fd));
    }
    CHECK_MSG(worst < 1e-4, "layernorm dgamma/dbeta vs finite differences: %g", worst);
    for (int i = 0; i < 5; i++) CHECK(gp[i] == 1.0f); /* untouched outside its slice */
    free(x); free(params); free(w); free(xd); free(pd); free(yd); free(pbuf); free(y);
    free(g0); free(gx); free(gp);
    dl_buffer *all[] = {&in, &pb, &out, &mean, &rstd, &dy, &dx, &grads};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dl_buffer_free(dev, all[i]);
    clReleaseKernel(k); clReleaseKernel(kb); clReleaseKernel(kp);
}

/* Residual + LayerNorm fused (forward), and the LayerNorm parameter
 * gradients with the preceding Linear's bias gradient (backward), against
 * double-precision references: pre = res + (pre + bias) written back, out =
 * LN(pre); dgamma += sum dy*xhat, dbeta += sum dy, dbias += sum dx. */
static void test_residual_layernorm(void) {
    int rows = 9, C = 41, boff = 2, goff = 2 + C, betaoff = 2 + 2 * C, np = 2 + 3 * C;
    size_t n = (size_t)rows * C;
    float *pre = randn(n, 1.5f), *res = randn(n, 1.0f), *params = randn((size_t)np, 1.0f),
          *dyv = randn(n, 1.0f), *dxv = randn(n, 1.0f);
    double *xd = malloc(n * sizeof *xd), *yd = malloc(n * sizeof *yd), *gd = malloc(2 * (size_t)C * sizeof *gd);
    for (size_t i = 0; i < n; i++) xd[i] = (double)res[i] + ((double)pre[i] + params[boff + i % C]);
    for (int c = 0; c < C; c++) gd[c] = params[goff + c], gd[C + c] = params[betaoff + c];
    ln_ref(xd, gd, gd + C, yd, rows, C, 1e-12);
    dl_buffer dpre = upload(pre, n * 4), dres = upload(res, n * 4), pb = upload(params, (size_t)np * 4),
              out = poisoned(n), mean = poisoned((size_t)rows), rstd = poisoned((size_t)rows);
    cl_kernel k = kernel("layernorm.cl", "bias_residual_layernorm_forward");
    float eps = 1e-12f;
    DL_ARG(k, 0, out.mem); DL_ARG(k, 1, mean.mem); DL_ARG(k, 2, rstd.mem); DL_ARG(k, 3, dpre.mem);
    DL_ARG(k, 4, dres.mem); DL_ARG(k, 5, pb.mem); DL_ARG(k, 6, boff); DL_ARG(k, 7, goff);
    DL_ARG(k, 8, betaoff); DL_ARG(k, 9, rows); DL_ARG(k, 10, C); DL_ARG(k, 11, eps);
    launch_rows(k, rows);
    float *got_pre = download(&dpre, n), *y = download(&out, n), *m = download(&mean, (size_t)rows),
          *rs = download(&rstd, (size_t)rows);
    CHECK_MSG(max_err(got_pre, xd, n) < 1e-6, "residual sum err %g", max_err(got_pre, xd, n));
    CHECK_MSG(max_err(y, yd, n) < 1e-5, "residual layernorm err %g", max_err(y, yd, n));

    float *g0 = malloc((size_t)np * sizeof *g0);
    for (int i = 0; i < np; i++) g0[i] = 1.0f;
    dl_buffer grads = upload(g0, (size_t)np * 4), dy = upload(dyv, n * 4), dx = upload(dxv, n * 4);
    cl_kernel kp = kernel("layernorm.cl", "layernorm_backward_params_bias");
    DL_ARG(kp, 0, grads.mem); DL_ARG(kp, 1, dy.mem); DL_ARG(kp, 2, dpre.mem); DL_ARG(kp, 3, mean.mem);
    DL_ARG(kp, 4, rstd.mem); DL_ARG(kp, 5, dx.mem); DL_ARG(kp, 6, goff); DL_ARG(kp, 7, betaoff);
    DL_ARG(kp, 8, boff); DL_ARG(kp, 9, rows); DL_ARG(kp, 10, C);
    launch(kp, 1, items(C), 1);
    float *gp = download(&grads, (size_t)np);
    double worst = 0;
    for (int c = 0; c < C; c++) {
        double dg = 1, db = 1, dbias = 1;
        for (int r = 0; r < rows; r++) {
            size_t i = (size_t)r * C + c;
            dg += (double)dyv[i] * ((double)got_pre[i] - m[r]) * rs[r];
            db += dyv[i];
            dbias += dxv[i];
        }
        worst = dl_test_worse(worst, rel_diff(gp[goff + c], dg));
        worst = dl_test_worse(worst, rel_diff(gp[betaoff + c], db));
        worst = dl_test_worse(worst, rel_diff(gp[boff + c], dbias));
    }
    CHECK_MSG(worst < 1e-5, "layernorm_backward_params_bias err %g", worst);
    CHECK(gp[0] == 1.0f && gp[1] == 1.0f); /* untouched outside the slices */
    free(pre); free(res); free(params); free(dyv); free(dxv); free(xd); free(yd); free(gd);
    free(got_pre); free(y); free(m); free(rs); free(g0); free(gp);
    dl_buffer *all[] = {&dpre, &dres, &pb, &out, &mean, &rstd, &grads, &dy, &dx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dl_buffer_free(dev, all[i]);
    clReleaseKernel(k); clReleaseKernel(kp);
}

/* LayerNorm of rows far from zero (offset 1000, spread about 2, as a
 * residual stream can drift): a one-pass variance, E[x^2] - E[x]^2 in fp32,
 * loses the variance here (x^2 ~ 1e6 has an ulp of 0.06; the sums reach
 * 4e7, ulp 4, against a variance of 4) and fails; the two-pass form only
 * rounds the mean's sum: at most C * 2^-24 * 1000 / std ~ 1e-3 on xhat over
 * 37 columns, 3e-4 typically. Both the plain and the fused residual form. */
static void test_layernorm_offset(void) {
    int rows = 5, C = 37;
    size_t n = (size_t)rows * C;
    float *x = randn(n, 2.0f), *params = randn(2 * (size_t)C, 1.0f);
    for (size_t i = 0; i < n; i++) x[i] += (i / (size_t)C) % 2 ? -1000.0f : 1000.0f;
    double *xd = malloc(n * sizeof *xd), *pd = malloc(2 * (size_t)C * sizeof *pd),
           *yd = malloc(n * sizeof *yd);
    for (size_t i = 0; i < n; i++) xd[i] = x[i];
    for (int i = 0; i < 2 * C; i++) pd[i] = params[i];
    ln_ref(xd, pd, pd + C, yd, rows, C, 1e-12);
    dl_buffer in = upload(x, n * 4), pb = upload(params, 2 * (size_t)C * 4), out = poisoned(n),
              mean = poisoned((size_t)rows), rstd = poisoned((size_t)rows);
    cl_kernel k = kernel("layernorm.cl", "layernorm_forward");
    int goff = 0, boff = C;
    float eps = 1e-12f;
    DL_ARG(k, 0, out.mem); DL_ARG(k, 1, mean.mem); DL_ARG(k, 2, rstd.mem); DL_ARG(k, 3, in.mem);
    DL_ARG(k, 4, pb.mem); DL_ARG(k, 5, goff); DL_ARG(k, 6, boff); DL_ARG(k, 7, rows);
    DL_ARG(k, 8, C); DL_ARG(k, 9, eps);
    launch_rows(k, rows);
    float *y = download(&out, n);
    double e = max_err(y, yd, n);
    CHECK_MSG(e < 2e-3, "layernorm forward at offset 1000: err %g", e);

    /* the fused form: residual 0, bias 0, the offset in pre */
    float *zeros = calloc(n + (size_t)C, sizeof *zeros), *fused = malloc((3 * (size_t)C) * sizeof *fused);
    for (int c = 0; c < C; c++) fused[c] = 0.0f, fused[C + c] = params[c], fused[2 * C + c] = params[C + c];
    dl_buffer pre = upload(x, n * 4), res = upload(zeros, n * 4), fb = upload(fused, 3 * (size_t)C * 4),
              out2 = poisoned(n);
    cl_kernel kf = kernel("layernorm.cl", "bias_residual_layernorm_forward");
    int bias_off = 0, gamma_off = C, beta_off = 2 * C;
    DL_ARG(kf, 0, out2.mem); DL_ARG(kf, 1, mean.mem); DL_ARG(kf, 2, rstd.mem); DL_ARG(kf, 3, pre.mem);
    DL_ARG(kf, 4, res.mem); DL_ARG(kf, 5, fb.mem); DL_ARG(kf, 6, bias_off); DL_ARG(kf, 7, gamma_off);
    DL_ARG(kf, 8, beta_off); DL_ARG(kf, 9, rows); DL_ARG(kf, 10, C); DL_ARG(kf, 11, eps);
    launch_rows(kf, rows);
    float *y2 = download(&out2, n);
    e = max_err(y2, yd, n);
    CHECK_MSG(e < 2e-3, "residual layernorm forward at offset 1000: err %g", e);
    free(x); free(params); free(xd); free(pd); free(yd); free(y); free(zeros); free(fused); free(y2);
    dl_buffer *all[] = {&in, &pb, &out, &mean, &rstd, &pre, &res, &fb, &out2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dl_buffer_free(dev, all[i]);
    clReleaseKernel(k); clReleaseKernel(kf);
}

/* ---- elementwise activations ---- */
static double gelu_ref(double x) {
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

static void test_unary(const char *fwd, const char *bwd, double (*f)(double), bool bwd_uses_output) {
    int n = 1001;
    float *x = randn((size_t)n, 3.0f), *w = randn((size_t)n, 1.0f);
    dl_buffer in = upload(x, (size_t)n * 4), out = poisoned((size_t)n), dy = upload(w, (size_t)n * 4),
              dx = poisoned((size_t)n);
    cl_kernel k = kernel("activation.cl", fwd), kb = kernel("activation.cl", bwd);
    DL_ARG(k, 0, out.mem); DL_ARG(k, 1, in.mem); DL_ARG(k, 2, n);
    launch(k, 1, items(n), 1);
    DL_ARG(kb, 0, dx.mem); DL_ARG(kb, 1, dy.mem);
    if (bwd_uses_output) DL_ARG(kb, 2, out.mem); else DL_ARG(kb, 2, in.mem);
    DL_ARG(kb, 3, n);
    launch(kb, 1, items(n), 1);
    float *y = download(&out, (size_t)n), *g = download(&dx, (size_t)n);
    double fe = 0, be = 0, h = 1e-5;
    for (int i = 0; i < n; i++) {
        double ref = f(x[i]);
        fe = dl_test_worse(fe, rel_diff(y[i], ref));
        double fd = (f((double)x[i] + h) - f((double)x[i] - h)) / (2 * h) * w[i];
        be = dl_test_worse(be, rel_diff(g[i], fd));
    }
    CHECK_MSG(fe < 1e-6, "%s forward err %g", fwd, fe);
    CHECK_MSG(be < 1e-5, "%s vs finite differences: %g", bwd, be);
    free(x); free(w); free(y); free(g);
    dl_buffer_free(dev, &in); dl_buffer_free(dev, &out); dl_buffer_free(dev, &dy);
    dl_buffer_free(dev, &dx);
    clReleaseKernel(k); clReleaseKernel(kb);
}

/* The fused bias + gelu: pre gains the bias, act is gelu of it, both
 * against double on odd sizes, the parameters read at an offset. */
static void test_bias_gelu(void) {
    int rows = 7, C = 45, off = 3;
    size_t n = (size_t)rows * C;
    float *x = randn(n, 2.0f), *p = randn((size_t)(C + off), 1.0f);
    dl_buffer pre = upload(x, n * 4), act = poisoned(n), pb = upload(p, (size_t)(C + off) * 4);
    cl_kernel k = kernel("activation.cl", "bias_gelu_forward");
    DL_ARG(k, 0, pre.mem); DL_ARG(k, 1, act.mem); DL_ARG(k, 2, pb.mem); DL_ARG(k, 3, off);
    DL_ARG(k, 4, rows); DL_ARG(k, 5, C);
    launch(k, 2, items(C), (size_t)rows);
    float *got_pre = download(&pre, n), *got_act = download(&act, n);
    double pe = 0, ae = 0;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)r * C + c;
            double want = (double)x[i] + (double)p[off + c];
            pe = fmax(pe, fabs(got_pre[i] - want) / (1 + fabs(want)));
            double g = gelu_ref(want);
            double e = fabs(got_act[i] - g) / (1 + fabs(g));
            if (!(e <= ae)) ae = e;
        }
    CHECK_MSG(pe < 1e-6, "bias_gelu_forward pre err %g", pe);
    CHECK_MSG(ae < 1e-6, "bias_gelu_forward act err %g", ae);
    free(x); free(p); free(got_pre); free(got_act);
    dl_buffer_free(dev, &pre); dl_buffer_free(dev, &act); dl_buffer_free(dev, &pb);
    clReleaseKernel(k);
}

/* ---- attention softmax ---- */
static void softmax_ref(const double *s, const int *mask, double *p, int B, int heads, int T,
                        double sqrt_d) {
    for (int r = 0; r < B * heads * T; r++) {
        int b = r / (heads * T);
        double mx = -INFINITY, sum = 0;
        double *row = p + (size_t)r * T;
        for (int j = 0; j < T; j++) {
            row[j] = s[(size_t)r * T + j] / sqrt_d + (mask[b * T + j] ? 0 : -FLT_MAX);
            mx = fmax(mx, row[j]);
        }
        for (int j = 0; j < T; j++) sum += (row[j] = exp(row[j] - mx));
        for (int j = 0; j < T; j++) row[j] /= sum;
    }
}

/* T = 11 leaves every row ragged; T = 37 has two whole vectors of 16 and a
 * ragged end in the CPU shape. */
static void test_softmax(int T) {
    int B = 3, heads = 2, rows = B * heads * T;
    size_t n = (size_t)rows * T;
    float sqrt_d = sqrtf(5.0f);
    int mask[3 * 37];
    for (int i = 0; i < B * T; i++) mask[i] = !(i / T == 1 && i % T >= 6); /* sequence 1 padded */
    float *s = randn(n, 2.0f), *w = randn(n, 1.0f);
    double *sd = malloc(n * sizeof *sd), *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) sd[i] = s[i];
    softmax_ref(sd, mask, p, B, heads, T, sqrt_d);
    dl_buffer att = upload(s, n * 4), m = upload(mask, sizeof mask), datt = upload(w, n * 4);
    cl_kernel k = kernel("softmax.cl", "attention_softmax_forward");
    DL_ARG(k, 0, att.mem); DL_ARG(k, 1, m.mem); DL_ARG(k, 2, rows); DL_ARG(k, 3, heads);
    DL_ARG(k, 4, T); DL_ARG(k, 5, sqrt_d);
    launch_rows(k, rows);
    float *got = download(&att, n);
    double e = max_err(got, p, n);
    CHECK_MSG(e < 1e-6, "softmax forward err %g", e);
    for (int j = 6; j < T; j++) CHECK(got[(size_t)(1 * heads * T) * T + j] == 0.0f);
    cl_kernel kb = kernel("softmax.cl", "attention_softmax_backward");
    DL_ARG(kb, 0, datt.mem); DL_ARG(kb, 1, att.mem); DL_ARG(kb, 2, rows); DL_ARG(kb, 3, T);
    DL_ARG(kb, 4, sqrt_d);
    launch_rows(kb, rows);
    float *g = download(&datt, n);
    double worst = 0, h = 1e-4;
    double *pp = malloc(n * sizeof *pp);
    for (size_t i = 0; i < n; i += 5) {
        double keep = sd[i], lp = 0, lm = 0;
        sd[i] = keep + h;
        softmax_ref(sd, mask, pp, B, heads, T, sqrt_d);
        for (size_t j = 0; j < n; j++) lp += pp[j] * w[j];
        sd[i] = keep - h;
        softmax_ref(sd, mask, pp, B, heads, T, sqrt_d);
        for (size_t j = 0; j < n; j++) lm += pp[j] * w[j];
        sd[i] = keep;
        double fd = (lp - lm) / (2 * h);
        worst = dl_test_worse(worst, rel_diff(g[i], fd));
    }
    CHECK_MSG(worst < 1e-5, "softmax backward vs finite differences: %g", worst);
    free(s); free(w); free(sd); free(p); free(pp); free(got); free(g);
    dl_buffer_free(dev, &att); dl_buffer_free(dev, &m); dl_buffer_free(dev, &datt);
    clReleaseKernel(k); clReleaseKernel(kb);
}

/* Scores a softmax must shift by the row maximum to survive in fp32
 * (sqrt_d = 1, so the scaled scores are exactly the inputs): sequence 0
 * around +100 (exp overflows to Inf without the shift), sequence 1 around
 * -200 (every exp underflows to 0), sequence 2 fully masked (every score
 * -FLT_MAX: uniform, as torch gives; 0 / 0 without the shift). The shifted
 * differences are exact (Sterbenz), so the usual 1e-6 holds. */
static void test_softmax_extreme(void) {
    int B = 3, heads = 2, T = 19, rows = B * heads * T;
    size_t n = (size_t)rows * T;
    float sqrt_d = 1.0f;
    int mask[3 * 19];
    for (int i = 0; i < B * T; i++) mask[i] = i / T != 2 && !(i / T == 0 && i % T == 17);
    float *s = randn(n, 3.0f);
    for (size_t i = 0; i < n; i++) {
        int b = (int)(i / ((size_t)heads * T * T));
        s[i] += b == 0 ? 100.0f : b == 1 ? -200.0f : 0.0f;
    }
    double *sd = malloc(n * sizeof *sd), *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) sd[i] = s[i];
    softmax_ref(sd, mask, p, B, heads, T, sqrt_d);
    dl_buffer att = upload(s, n * 4), m = upload(mask, sizeof mask);
    cl_kernel k = kernel("softmax.cl", "attention_softmax_forward");
    DL_ARG(k, 0, att.mem); DL_ARG(k, 1, m.mem); DL_ARG(k, 2, rows); DL_ARG(k, 3, heads);
    DL_ARG(k, 4, T); DL_ARG(k, 5, sqrt_d);
    launch_rows(k, rows);
    float *got = download(&att, n);
    double e = max_err(got, p, n);
    CHECK_MSG(e < 1e-6, "softmax forward on extreme scores: err %g", e);
    /* the fully masked rows: every key 1/T */
    int uniform_bad = 0;
    for (size_t i = (size_t)2 * heads * T * T; i < n; i++)
        uniform_bad += !(fabs(got[i] - 1.0 / T) < 1e-7);
    CHECK_MSG(uniform_bad == 0, "softmax of fully masked rows: %d keys not 1/T", uniform_bad);
    free(s); free(sd); free(p); free(got);
    dl_buffer_free(dev, &att); dl_buffer_free(dev, &m);
    clReleaseKernel(k);
}

/* ---- cross-entropy ---- */
/* Rows 2.. of the targets and losses (row0 = 2, as the MLM decoder's later
 * chunks read them): the first two losses stay poisoned. */
static void test_cross_entropy(void) {
    int rows = 5, V = 131, row0 = 2;
    size_t n = (size_t)rows * V;
    float *x = randn(n, 3.0f), scale = 0.37f;
    int all_targets[7] = {99, 99, 0, 130, 7, 7, 64}, *targets = all_targets + row0;
    dl_buffer logits = upload(x, n * 4), t = upload(all_targets, sizeof all_targets),
              losses = poisoned((size_t)(rows + row0));
    cl_kernel k = kernel("loss.cl", "cross_entropy_forward_backward");
    int want = 1;
    DL_ARG(k, 0, logits.mem); DL_ARG(k, 1, t.mem); DL_ARG(k, 2, losses.mem); DL_ARG(k, 3, rows);
    DL_ARG(k, 4, V); DL_ARG(k, 5, scale); DL_ARG(k, 6, want); DL_ARG(k, 7, row0);
    launch_group_rows(k, rows);
    float *all_losses = download(&losses, (size_t)(rows + row0)), *l = all_losses + row0;
    CHECK(isnan(all_losses[0]) && isnan(all_losses[1]));
    float *g = download(&logits, n);
    double le = 0, ge = 0, h = 1e-4;
    for (int r = 0; r < rows; r++) {
        const float *row = x + (size_t)r * V;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < V; j++) mx = fmax(mx, row[j]);
        for (int j = 0; j < V; j++) sum += exp(row[j] - mx);
        double ref = log(sum) + mx - row[targets[r]];
        le = dl_test_worse(le, rel_diff(l[r], ref));
        for (int j = 0; j < V; j += 7) {
            /* d(scale * loss_r)/dx_j by central differences in double */
            double lp = 0, lm = 0, s2;
            double xs[131];
            for (int q = 0; q < V; q++) xs[q] = row[q];
            for (int sign = 0; sign < 2; sign++) {
                xs[j] = row[j] + (sign ? -h : h);
                double m2 = -INFINITY;
                s2 = 0;
                for (int q = 0; q < V; q++) m2 = fmax(m2, xs[q]);
                for (int q = 0; q < V; q++) s2 += exp(xs[q] - m2);
                double v = log(s2) + m2 - xs[targets[r]];
                if (sign) lm = v; else lp = v;
            }
            double fd = scale * (lp - lm) / (2 * h);
            ge = dl_test_worse(ge, dl_test_diff(g[(size_t)r * V + j], fd));
        }
    }
    CHECK_MSG(le < 1e-6, "cross-entropy loss err %g", le);
    CHECK_MSG(ge < 1e-5, "cross-entropy gradient vs finite differences: %g", ge);
    free(x); free(all_losses); free(g);
    dl_buffer_free(dev, &logits); dl_buffer_free(dev, &t); dl_buffer_free(dev, &losses);
    clReleaseKernel(k);
}

/* Logits a cross-entropy must shift by the row maximum to survive in
 * fp32: row 0 around +1000 (exp overflows), row 1 around -1000 (every exp
 * underflows: log 0), row 2 near zero but for one logit of 30000 that is not
 * the target (loss about 30000, its gradient -1 at the target and +1 at the
 * large logit). Loss and gradient against double, as in test_cross_entropy. */
static void test_cross_entropy_extreme(void) {
    int rows = 3, V = 37, row0 = 0;
    size_t n = (size_t)rows * V;
    float *x = randn(n, 3.0f), scale = 0.5f;
    for (int j = 0; j < V; j++) x[j] += 1000.0f, x[V + j] -= 1000.0f;
    x[2 * V + 5] = 30000.0f;
    int targets[3] = {36, 0, 11};
    dl_buffer logits = upload(x, n * 4), t = upload(targets, sizeof targets),
              losses = poisoned((size_t)rows);
    cl_kernel k = kernel("loss.cl", "cross_entropy_forward_backward");
    int want = 1;
    DL_ARG(k, 0, logits.mem); DL_ARG(k, 1, t.mem); DL_ARG(k, 2, losses.mem); DL_ARG(k, 3, rows);
    DL_ARG(k, 4, V); DL_ARG(k, 5, scale); DL_ARG(k, 6, want); DL_ARG(k, 7, row0);
    launch_group_rows(k, rows);
    float *l = download(&losses, (size_t)rows), *g = download(&logits, n);
    double le = 0, ge = 0;
    for (int r = 0; r < rows; r++) {
        const float *row = x + (size_t)r * V;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < V; j++) mx = fmax(mx, row[j]);
        for (int j = 0; j < V; j++) sum += exp((double)row[j] - mx);
        le = dl_test_worse(le, rel_diff(l[r], log(sum) + mx - row[targets[r]]));
        for (int j = 0; j < V; j++) {
            double want_g = scale * (exp((double)row[j] - mx) / sum - (j == targets[r]));
            ge = dl_test_worse(ge, dl_test_diff(g[(size_t)r * V + j], want_g));
        }
    }
    CHECK_MSG(le < 1e-6, "cross-entropy loss on extreme logits: err %g", le);
    CHECK_MSG(ge < 1e-6, "cross-entropy gradient on extreme logits: err %g", ge);
    free(x); free(l); free(g);
    dl_buffer_free(dev, &logits); dl_buffer_free(dev, &t); dl_buffer_free(dev, &losses);
    clReleaseKernel(k);
}

/* ---- embeddings: forward and the segmented (atomic-free) backward ---- */
static void test_embedding(void) {
    int B = 3, T = 5, N = B * T, E = 7, V = 11, types = 2;
    int ids[15] = {1, 4, 4, 9, 0, 4, 10, 1, 1, 2, 3, 3, 4, 9, 0};
    int tt[15] = {0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 0, 1, 1, 1, 1};
    int word_off = 3, pos_off = word_off + V * E, type_off = pos_off + T * E;
    size_t P = (size_t)type_off + (size_t)types * E;
    float *params = randn(P, 1.0f), *dout = randn((size_t)N * E, 1.0f);
    dl_buffer pb = upload(params, P * 4), idb = upload(ids, sizeof ids), tb = upload(tt, sizeof tt),
              out = poisoned((size_t)N * E), db = upload(dout, (size_t)N * E * 4);
    cl_kernel k = kernel("embedding.cl", "embedding_forward");
    DL_ARG(k, 0, out.mem); DL_ARG(k, 1, idb.mem); DL_ARG(k, 2, tb.mem); DL_ARG(k, 3, pb.mem);
    DL_ARG(k, 4, word_off); DL_ARG(k, 5, pos_off); DL_ARG(k, 6, type_off); DL_ARG(k, 7, N);
    DL_ARG(k, 8, T); DL_ARG(k, 9, E);
    launch(k, 2, (size_t)E, (size_t)N);
    float *y = download(&out, (size_t)N * E);
    int bad = 0;
    for (int n = 0; n < N; n++)
        for (int e = 0; e < E; e++) {
            float ref = (params[word_off + ids[n] * E + e] + params[type_off + tt[n] * E + e]) +
                        params[pos_off + (n % T) * E + e];
            bad += y[n * E + e] != ref;
        }
    CHECK_MSG(bad == 0, "embedding forward: %d elements differ", bad);

    /* segments by id, skipping id 0 (the pad row gets no gradient) */
    int sorted[15], seg_ids[15], seg_start[16], segs = 0, kept = 0;
    for (int id = 1; id < V; id++) {
        int start = kept;
        for (int n = 0; n < N; n++)
            if (ids[n] == id) sorted[kept++] = n;
        if (kept > start) {
            seg_ids[segs] = id;
            seg_start[segs++] = start;
        }
    }
    seg_start[segs] = kept;
    float *g0 = calloc(P, sizeof *g0);
    dl_buffer grads = upload(g0, P * 4), sb = upload(sorted, sizeof sorted),
              sib = upload(seg_ids, sizeof seg_ids), ssb = upload(seg_start, sizeof seg_start);
    cl_kernel kw = kernel("embedding.cl", "embedding_backward_word");
    DL_ARG(kw, 0, grads.mem); DL_ARG(kw, 1, db.mem); DL_ARG(kw, 2, sb.mem); DL_ARG(kw, 3, sib.mem);
    DL_ARG(kw, 4, ssb.mem); DL_ARG(kw, 5, segs); DL_ARG(kw, 6, word_off); DL_ARG(kw, 7, E);
    launch(kw, 2, (size_t)E, (size_t)segs);
    cl_kernel kp = kernel("embedding.cl", "embedding_backward_position");
    DL_ARG(kp, 0, grads.mem); DL_ARG(kp, 1, db.mem); DL_ARG(kp, 2, pos_off); DL_ARG(kp, 3, B);
    DL_ARG(kp, 4, T); DL_ARG(kp, 5, E);
    launch(kp, 2, (size_t)E, (size_t)T);
    cl_kernel kt = kernel("embedding.cl", "embedding_backward_type");
    DL_ARG(kt, 0, grads.mem); DL_ARG(kt, 1, db.mem); DL_ARG(kt, 2, tb.mem); DL_ARG(kt, 3, type_off);
    DL_ARG(kt, 4, N); DL_ARG(kt, 5, types); DL_ARG(kt, 6, E);
    launch(kt, 2, (size_t)E, (size_t)types);
    float *g = download(&grads, P);
    /* the forward is linear: dL/dparam = sum of dout over the rows that read it */
    double *ref = calloc(P, sizeof *ref);
    for (int n = 0; n < N; n++)
        for (int e = 0; e < E; e++) {
            if (ids[n] != 0) ref[word_off + ids[n] * E + e] += dout[n * E + e];
            ref[pos_off + (n % T) * E + e] += dout[n * E + e];
            ref[type_off + tt[n] * E + e] += dout[n * E + e];
        }
    double e = max_err(g, ref, P);
    CHECK_MSG(e < 1e-6, "embedding backward err %g", e);
    for (int e2 = 0; e2 < E; e2++) CHECK(g[word_off + e2] == 0.0f); /* pad row */
    free(params); free(dout); free(y); free(g0); free(g); free(ref);
    dl_buffer *all[] = {&pb, &idb, &tb, &out, &db, &grads, &sb, &sib, &ssb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dl_buffer_free(dev, all[i]);
    clReleaseKernel(k); clReleaseKernel(kw); clReleaseKernel(kp); clReleaseKernel(kt);
}

/* ---- bias, residual, gather/scatter ---- */
static void test_elementwise(void) {
    int rows = 9, C = 29;
    size_t n = (size_t)rows * C;
    float *x = randn(n, 1.0f), *r = randn(n, 1.0f), *params = randn((size_t)C + 2, 1.0f);
    int boff = 2;
    dl_buffer out = upload(x, n * 4), res = upload(r, n * 4), pb = upload(params, ((size_t)C + 2) * 4);
    cl_kernel k = kernel("elementwise.cl", "bias_residual_add");
    DL_ARG(k, 0, out.mem); DL_ARG(k, 1, res.mem); DL_ARG(k, 2, pb.mem); DL_ARG(k, 3, boff);
    DL_ARG(k, 4, rows); DL_ARG(k, 5, C);
    launch(k, 2, (size_t)C, (size_t)rows);
    float *y = download(&out, n);
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += y[i] != r[i] + (x[i] + params[boff + i % (size_t)C]);
    CHECK(bad == 0);
    /* bias gradient accumulates the column sums */
    float *g0 = calloc((size_t)C + 2, sizeof *g0);
    g0[boff] = 1.0f;
    dl_buffer grads = upload(g0, ((size_t)C + 2) * 4);
    cl_kernel kb = kernel("elementwise.cl", "bias_backward");
    DL_ARG(kb, 0, grads.mem); DL_ARG(kb, 1, res.mem); DL_ARG(kb, 2, boff); DL_ARG(kb, 3, rows);
    DL_ARG(kb, 4, C);
    launch(kb, 1, items(C), 1);
    float *g = download(&grads, (size_t)C + 2);
    double worst = 0;
    for (int c = 0; c < C; c++) {
        double s = c == 0 ? 1.0 : 0.0;
        for (int q = 0; q < rows; q++) s += r[q * C + c];
        worst = dl_test_worse(worst, dl_test_diff(g[boff + c], s));
    }
    CHECK_MSG(worst < 1e-5, "bias backward err %g", worst);
    CHECK(g[0] == 0 && g[1] == 0);
    /* gather rows 8, 0, 3 then scatter them back onto zeros */
    int index[3] = {8, 0, 3};
    dl_buffer ib = upload(index, sizeof index), gathered = poisoned(3 * (size_t)C);
    cl_kernel kg = kernel("elementwise.cl", "gather_rows");
    int three = 3;
    DL_ARG(kg, 0, gathered.mem); DL_ARG(kg, 1, res.mem); DL_ARG(kg, 2, ib.mem);
    DL_ARG(kg, 3, three); DL_ARG(kg, 4, C);
    launch(kg, 2, (size_t)C, 3);
    float *gr = download(&gathered, 3 * (size_t)C);
    CHECK(!memcmp(gr, r + 8 * C, (size_t)C * 4) && !memcmp(gr + C, r, (size_t)C * 4) &&
          !memcmp(gr + 2 * C, r + 3 * C, (size_t)C * 4));
    CHECK_OK(dl_buffer_fill32(dev, &out, 0, n * 4, 0));
    cl_kernel ks = kernel("elementwise.cl", "scatter_add_rows");
    DL_ARG(ks, 0, out.mem); DL_ARG(ks, 1, gathered.mem); DL_ARG(ks, 2, ib.mem);
    DL_ARG(ks, 3, three); DL_ARG(ks, 4, C);
    launch(ks, 2, (size_t)C, 3);
    float *sc = download(&out, n);
    /* rows 8, 0 and 3 come back; every other row stays zero */
    int scatter_bad = 0;
    for (int q = 0; q < rows; q++)
        for (int c = 0; c < C; c++) {
            float want = (q == 8 || q == 0 || q == 3) ? r[q * C + c] : 0.0f;
            scatter_bad += !(sc[q * C + c] == want);
        }
    CHECK_MSG(scatter_bad == 0, "scatter_add_rows: %d elements differ", scatter_bad);
    free(x); free(r); free(params); free(y); free(g0); free(g); free(gr); free(sc);
    dl_buffer *all[] = {&out, &res, &pb, &grads, &ib, &gathered};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dl_buffer_free(dev, all[i]);
    clReleaseKernel(k); clReleaseKernel(kb); clReleaseKernel(kg); clReleaseKernel(ks);
}

int main(void) {
    CHECK_OK(dl_device_open(getenv("DEDLOC_TEST_DEVICE"), &dev));
    if (!dev) return dl_test_finish("test_kernels");
    dl_rng_seed(&rng, 2024);
    for (int shape = 0; shape < 2; shape++) {
        cpu_shape = shape == 1;
        test_layernorm();
        test_layernorm_offset();
        test_residual_layernorm();
        test_unary("gelu_forward", "gelu_backward", gelu_ref, false);
        test_unary("tanh_forward", "tanh_backward", tanh, true);
        test_bias_gelu();
        test_softmax(11);
        test_softmax(37);
        test_softmax_extreme();
        test_cross_entropy();
        test_cross_entropy_extreme();
        test_embedding();
        test_elementwise();
    }
    dl_device_close(dev);
    return dl_test_finish("test_kernels");
}
