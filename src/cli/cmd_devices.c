#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/commands.h"
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
    while ((c = getopt_long(argc, argv, "jh", opts, NULL)) != -1) {
        if (c == 'j') json = 1;
        else if (c == 'h') {
            help(stdout);
            return DL_EXIT_OK;
        } else {
            help(stderr);
            return DL_EXIT_USAGE;
        }
    }
    dl_device_info *infos;
    int n;
    if (dl_device_list(&infos, &n)) {
        fprintf(stderr, "dedloc devices: %s\n", dl_error());
        return DL_EXIT_FAILURE;
    }
    if (json) {
        printf("[");
        for (int i = 0; i < n; i++) {
            dl_device_info *d = &infos[i];
            printf("%s\n  {\"index\": %d, \"platform\": \"%s\", \"name\": \"%s\", \"vendor\": \"%s\", "
                   "\"driver\": \"%s\", \"opencl_c\": \"%s\", \"type\": \"%s\", "
                   "\"compute_units\": %u, \"clock_mhz\": %u, \"global_mem\": %llu, "
                   "\"local_mem\": %llu, \"max_alloc\": %llu, \"max_work_group\": %zu, "
                   "\"fp16\": %s, \"fp64\": %s, \"unified_memory\": %s}",
                   i ? "," : "", d->index, d->platform, d->name, d->vendor, d->driver,
                   d->opencl_c_version, d->is_gpu ? "gpu" : d->is_cpu ? "cpu" : "other",
                   d->compute_units, d->max_clock_mhz, (unsigned long long)d->global_mem,
                   (unsigned long long)d->local_mem, (unsigned long long)d->max_alloc,
                   d->max_work_group, d->fp16 ? "true" : "false", d->fp64 ? "true" : "false",
                   d->unified_memory ? "true" : "false");
        }
        printf("\n]\n");
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
                   d->fp16 ? "yes (cl_khr_fp16)" : "no (fp16 storage only, fp32 arithmetic)",
                   d->fp64 ? "yes" : "no", d->unified_memory ? "yes" : "no");
        }
    }
    free(infos);
    return DL_EXIT_OK;
}
