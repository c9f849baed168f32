/* dedloc devices: lists every OpenCL device with the index --device takes. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/commands.h"
#include "cli/opt_table.h"
#include "dedloc/device.h"
#include "dedloc/util.h"

static void help(FILE *out) {
    fprintf(out,
            "usage: dedloc devices [--json]\n\n"
            "Lists every OpenCL device with its capabilities. The index or a part of the\n"
            "name selects a device in other commands (--device 0, --device nvidia).\n\n"
            "  --json   one JSON array for scripts\n");
}

int cmd_devices(int argc, char **argv) {
    int json = 0;
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'}, {0, 0, 0, 0}};
    int c;
    while ((c = cli_getopt_long(argc, argv, "jh", opts, "devices")) != -1) {
        if (c == 'j') json = 1;
        else if (c == 'h') {
            help(stdout);
            return DL_EXIT_OK;
        } else {
            help(stderr);
            return DL_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "dedloc devices: unexpected argument '%s'\n", argv[optind]);
        help(stderr);
        return DL_EXIT_USAGE;
    }
    dl_device_info *infos;
    int n;
    if (dl_device_list(&infos, &n)) {
        fprintf(stderr, "dedloc devices: %s\n", dl_error());
        return DL_EXIT_FAILURE;
    }
    if (json) {
        /* through cJSON so that any device string comes out properly escaped */
        cJSON *list = cJSON_CreateArray();
        for (int i = 0; i < n; i++) {
            const dl_device_info *d = &infos[i];
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "index", d->index);
            cJSON_AddStringToObject(o, "platform", d->platform);
            cJSON_AddStringToObject(o, "name", d->name);
            cJSON_AddStringToObject(o, "vendor", d->vendor);
            cJSON_AddStringToObject(o, "driver", d->driver);
            cJSON_AddStringToObject(o, "device_version", d->device_version);
            cJSON_AddStringToObject(o, "opencl_c", d->opencl_c_version);
            cJSON_AddStringToObject(o, "type", d->is_gpu ? "gpu" : d->is_cpu ? "cpu" : "other");
            cJSON_AddNumberToObject(o, "compute_units", d->compute_units);
            cJSON_AddNumberToObject(o, "clock_mhz", d->max_clock_mhz);
            cJSON_AddNumberToObject(o, "global_mem", (double)d->global_mem);
            cJSON_AddNumberToObject(o, "local_mem", (double)d->local_mem);
            cJSON_AddNumberToObject(o, "max_alloc", (double)d->max_alloc);
            cJSON_AddNumberToObject(o, "max_work_group", (double)d->max_work_group);
            cJSON_AddBoolToObject(o, "fp16", d->fp16);
            /* what --precision fp16 computes with on this device */
            cJSON_AddStringToObject(o, "fp16_compute", d->fp16 ? "half GEMMs (CLBlastHgemm)"
                                                               : "none: fp16 storage, fp32 arithmetic");
            cJSON_AddBoolToObject(o, "fp64", d->fp64);
            cJSON_AddBoolToObject(o, "unified_memory", d->unified_memory);
            cJSON_AddItemToArray(list, o);
        }
        char *text = cJSON_Print(list);
        cJSON_Delete(list);
        if (!text) {
            free(infos);
            fprintf(stderr, "dedloc devices: out of memory\n");
            return DL_EXIT_FAILURE;
        }
        printf("%s\n", text);
        free(text);
    } else {
        for (int i = 0; i < n; i++) {
            dl_device_info *d = &infos[i];
            printf("[%d] %s (%s)\n", d->index, d->name, d->is_gpu ? "GPU" : d->is_cpu ? "CPU" : "other");
            printf("    platform        %s\n    vendor          %s\n    driver          %s\n",
                   d->platform, d->vendor, d->driver);
            printf("    OpenCL C        %s\n    compute units   %u @ %u MHz\n", d->opencl_c_version,
                   d->compute_units, d->max_clock_mhz);
            printf("    global memory   %.1f GiB (max allocation %.1f GiB)\n",
                   d->global_mem / 1073741824.0, d->max_alloc / 1073741824.0);
            printf("    local memory    %.0f KiB\n    work-group max  %zu (%zu x %zu x %zu)\n",
                   d->local_mem / 1024.0, d->max_work_group, d->max_work_item[0],
                   d->max_work_item[1], d->max_work_item[2]);
            printf("    fp16 compute    %s\n    fp64            %s\n    unified memory  %s\n",
                   d->fp16 ? "yes (cl_khr_fp16: --precision fp16 runs half GEMMs)"
                           : "no (no cl_khr_fp16: --precision fp16 stores fp16, computes fp32)",
                   d->fp64 ? "yes" : "no", d->unified_memory ? "yes" : "no");
        }
    }
    free(infos);
    return DL_EXIT_OK;
}
