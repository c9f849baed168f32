/* dedloc grad: loss and gradients of one batch for a HF model folder, written
 * as safetensors under the HF parameter names, so they can be compared with
 * transformers directly. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/opt_table.h"
#include "dedloc/model.h"
#include "dedloc/safetensors.h"
#include "dedloc/util.h"

static void help(FILE *out) {
    fprintf(out,
            "usage: dedloc grad --model DIR --batch FILE --out FILE [--device D]\n\n"
            "Runs one forward and backward pass of AlbertForPreTraining and writes the\n"
            "losses and every parameter gradient.\n\n"
            "  --model DIR    HF model folder: config.json and model.safetensors, as\n"
            "                 AlbertForPreTraining.save_pretrained writes them\n"
            "  --batch FILE   safetensors with input_ids, token_type_ids, attention_mask,\n"
            "                 labels (integers [B,T]; -100 = not masked) and\n"
            "                 sentence_order_label (integers [B])\n"
            "  --out FILE     safetensors to write: loss, mlm_loss, sop_loss (F32 [1]) and\n"
            "                 the gradient of each parameter under its HF name (the tied\n"
            "                 decoder weight once, as albert.embeddings.word_embeddings.weight)\n"
            "  --logits FILE  also write the forward pass's sop_logits [B,2] and\n"
            "                 prediction_logits [M,V] at the M labelled positions (row-major),\n"
            "                 with the losses (the format scripts/check_export.py reads)\n"
            "  --device D     OpenCL device: index or part of its name (see dedloc devices)\n");
}

static int write_output(const char *path, const dl_param_layout *layout, const dl_losses *l,
                        const float *grads) {
    dl_st_writer *w = dl_st_writer_new();
    if (!w) return -1;
    int64_t one = 1;
    int rc = dl_st_writer_metadata(w, "format", "pt");
    if (!rc) rc = dl_st_writer_add(w, "loss", DL_ST_F32, 1, &one, &l->loss);
    if (!rc) rc = dl_st_writer_add(w, "mlm_loss", DL_ST_F32, 1, &one, &l->mlm_loss);
    if (!rc) rc = dl_st_writer_add(w, "sop_loss", DL_ST_F32, 1, &one, &l->sop_loss);
    for (int i = 0; !rc && i < layout->count; i++) {
        const dl_param_entry *e = &layout->entries[i];
        rc = dl_st_writer_add(w, e->name, DL_ST_F32, e->ndim, e->shape, grads + e->offset);
    }
    if (!rc) rc = dl_st_writer_write(w, path);
    dl_st_writer_free(w);
    return rc;
}

static int write_logits(const char *path, dl_model *model, const dl_batch *batch,
                        const dl_losses *l) {
    int V = dl_model_config(model)->vocab_size, M = l->masked_tokens;
    float *sop = dl_malloc((size_t)batch->batch * 2 * sizeof *sop);
    float *mlm = dl_malloc(((size_t)M * (size_t)V + 1) * sizeof *mlm);
    dl_st_writer *w = dl_st_writer_new();
    int64_t one = 1, sop_shape[2] = {batch->batch, 2}, mlm_shape[2] = {M, V};
    int rc = sop && mlm && w ? dl_model_get_logits(model, sop, mlm) : -1;
    if (!rc) rc = dl_st_writer_metadata(w, "format", "pt");
    if (!rc) rc = dl_st_writer_add(w, "sop_logits", DL_ST_F32, 2, sop_shape, sop);
    if (!rc) rc = dl_st_writer_add(w, "prediction_logits", DL_ST_F32, 2, mlm_shape, mlm);
    if (!rc) rc = dl_st_writer_add(w, "loss", DL_ST_F32, 1, &one, &l->loss);
    if (!rc) rc = dl_st_writer_add(w, "mlm_loss", DL_ST_F32, 1, &one, &l->mlm_loss);
    if (!rc) rc = dl_st_writer_add(w, "sop_loss", DL_ST_F32, 1, &one, &l->sop_loss);
    if (!rc) rc = dl_st_writer_write(w, path);
    dl_st_writer_free(w);
    free(sop);
    free(mlm);
    return rc;
}

int cmd_grad(int argc, char **argv) {
    const char *model_dir = NULL, *batch_path = NULL, *out_path = NULL, *device_sel = NULL,
               *logits_path = NULL;
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'}, {"batch", required_argument, NULL, 'b'},
        {"out", required_argument, NULL, 'o'},   {"device", required_argument, NULL, 'd'},
        {"logits", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},        {0, 0, 0, 0}};
    int c;
    while ((c = cli_getopt_long(argc, argv, "m:b:o:d:l:h", opts, "grad")) != -1) {
        switch (c) {
        case 'm': model_dir = optarg; break;
        case 'b': batch_path = optarg; break;
        case 'o': out_path = optarg; break;
        case 'd': device_sel = optarg; break;
        case 'l': logits_path = optarg; break;
        case 'h': help(stdout); return DL_EXIT_OK;
        default: help(stderr); return DL_EXIT_USAGE;
        }
    }
    if (optind < argc || !model_dir || !batch_path || !out_path) {
        fprintf(stderr, "dedloc grad: --model, --batch and --out are required%s\n",
                optind < argc ? " (and no other arguments)" : "");
        help(stderr);
        return DL_EXIT_USAGE;
    }
    dl_albert_config cfg;
    float *params = NULL, *grads = NULL;
    dl_batch batch = {0};
    dl_device *dev = NULL;
    dl_model *model = NULL;
    dl_losses losses;
    int rc = dl_albert_load_hf(model_dir, &cfg, &params);
    if (!rc) rc = dl_albert_load_batch(batch_path, &batch);
    if (!rc && dl_albert_check_batch(&cfg, &batch, 0, 0))
        rc = dl_fail_context("%s", batch_path);
    if (!rc) rc = dl_device_open(device_sel, &dev);
    if (!rc) rc = dl_model_create(dev, &cfg, batch.batch, batch.seq, DL_PRECISION_FP32, &model);
    if (!rc) rc = dl_model_set_params(model, params);
    if (!rc) rc = dl_model_zero_grad(model);
    if (!rc) rc = dl_model_forward_backward(model, &batch, 1.0f, &losses);
    if (!rc) {
        grads = dl_malloc(dl_model_layout(model)->total * sizeof *grads);
        rc = grads ? dl_model_get_grads(model, 1.0f, grads) : -1;
    }
    if (!rc) rc = write_output(out_path, dl_model_layout(model), &losses, grads);
    if (!rc && logits_path) {
        dl_losses forward_losses;
        rc = dl_model_forward(model, &batch, &forward_losses);
        if (!rc) rc = write_logits(logits_path, model, &batch, &forward_losses);
        /* A failed run leaves no output: scripts check for --out alone. */
        if (rc) unlink(out_path);
    }
    if (!rc)
        printf("loss %.7f (mlm %.7f over %d masked tokens, sop %.7f over %d sequences)\n",
               losses.loss, losses.mlm_loss, losses.masked_tokens, losses.sop_loss,
               losses.sequences);
    else
        fprintf(stderr, "dedloc grad: %s\n", dl_error());
    dl_model_free(model);
    if (dev) dl_device_close(dev);
    dl_batch_free(&batch);
    free(params);
    free(grads);
    return rc ? DL_EXIT_FAILURE : DL_EXIT_OK;
}
