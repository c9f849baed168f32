/* CLBlast tuning: stored parameters are applied when a device opens. The
 * search that produces them is tune_search.c (run by `dedloc tune`); the file is
 * untrusted input like any other: bounded, type-checked, names restricted. */
#include <cjson/cJSON.h>
#include <clblast_c.h>
#include <ctype.h>
#include <string.h>

#include "dedloc/util.h"
#include "device/device_internal.h"

enum { TUNE_FILE_MAX = 1 << 20, TUNE_PARAMS_MAX = 32, TUNE_NAME_MAX = 32 };

void dl_tune_device_key(const dl_device_info *info, char *key, size_t size) {
    /* readable part: the device name with anything unusual replaced */
    char readable[81];
    size_t n = 0;
    for (const char *p = info->name; *p && n < sizeof readable - 1; p++)
        readable[n++] = (isalnum((unsigned char)*p) || *p == '.' || *p == '-') ? *p : '_';
    readable[n] = 0;
    /* unique part: everything that changes generated code */
    uint64_t h = dl_hash64(info->platform, strlen(info->platform), 0x74756e65ull);
    h = dl_hash64(info->name, strlen(info->name), h);
    h = dl_hash64(info->driver, strlen(info->driver), h);
    h = dl_hash64(info->device_version, strlen(info->device_version), h);
    char hex[17];
    dl_hash64_hex(h, hex);
    snprintf(key, size, "%s-%s.json", readable, hex);
}

void dl_tune_path(const dl_device_info *info, char *path, size_t size) {
    char key[128];
    dl_tune_device_key(info, key, sizeof key);
    snprintf(path, size, "%s/clblast/%s", dl_cache_dir(), key);
}

static bool valid_kernel_name(const char *name) {
    static const char *const known[] = {"Xgemm", "XgemmDirect", "GemmRoutine", "Copy", "Pad",
                                        "Transpose", "Padtranspose"};
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (!strcmp(name, known[i])) return true;
    return false;
}

static bool valid_parameter_name(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > TUNE_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++)
        if (!isupper((unsigned char)name[i]) && !isdigit((unsigned char)name[i]) && name[i] != '_')
            return false;
    return true;
}

/* Applies one {"kernel", "precision", "parameters"} entry. */
static int apply_entry(dl_device *dev, const cJSON *entry, int index) {
    const cJSON *kernel = cJSON_GetObjectItemCaseSensitive(entry, "kernel");
    const cJSON *precision = cJSON_GetObjectItemCaseSensitive(entry, "precision");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(entry, "parameters");
    if (!cJSON_IsString(kernel) || !valid_kernel_name(kernel->valuestring))
        return dl_fail("entry %d: \"kernel\" must name a CLBlast GEMM kernel", index);
    if (!cJSON_IsNumber(precision) || (precision->valuedouble != 32 && precision->valuedouble != 16))
        return dl_fail("entry %d: \"precision\" must be 32 or 16", index);
    if (!cJSON_IsObject(params)) return dl_fail("entry %d: \"parameters\" must be an object", index);
    const char *names[TUNE_PARAMS_MAX];
    size_t values[TUNE_PARAMS_MAX], count = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, params) {
        if (count == TUNE_PARAMS_MAX) return dl_fail("entry %d: too many parameters", index);
        if (!p->string || !valid_parameter_name(p->string))
            return dl_fail("entry %d: bad parameter name", index);
        if (!cJSON_IsNumber(p) || p->valuedouble < 0 || p->valuedouble > 65536 ||
            p->valuedouble != (double)(size_t)p->valuedouble)
            return dl_fail("entry %d: parameter %s must be an integer in [0, 65536]", index,
                           p->string);
        names[count] = p->string;
        values[count] = (size_t)p->valuedouble;
        count++;
    }
    CLBlastPrecision prec =
        precision->valuedouble == 16 ? CLBlastPrecisionHalf : CLBlastPrecisionSingle;
    CLBlastStatusCode st = CLBlastOverrideParameters(dev->info.device_id, kernel->valuestring,
                                                     prec, count, names, values);
    if (st != CLBlastSuccess)
        return dl_fail("entry %d: CLBlast refused the %s parameters (error %d%s)", index,
                       kernel->valuestring, (int)st,
                       st == CLBlastMissingOverrideParameter ? ": a parameter is missing" : "");
    return 0;
}

int dl_tune_apply(dl_device *dev, bool *applied) {
    if (applied) *applied = false;
    char path[4096];
    dl_tune_path(&dev->info, path, sizeof path);
    if (!dl_file_exists(path)) return 0;
    char *text;
    size_t size;
    if (dl_read_file(path, TUNE_FILE_MAX, &text, &size)) return -1;
    cJSON *root = cJSON_ParseWithLength(text, size);
    free(text);
    int rc = 0;
    const cJSON *kernels = root ? cJSON_GetObjectItemCaseSensitive(root, "kernels") : NULL;
    if (!root || !cJSON_IsObject(root)) {
        rc = dl_fail("%s is not valid JSON; run 'dedloc tune' again or delete it", path);
    } else if (!cJSON_IsArray(kernels)) {
        rc = dl_fail("%s has no \"kernels\" array; run 'dedloc tune' again or delete it", path);
    } else {
        int index = 0;
        const cJSON *entry;
        cJSON_ArrayForEach(entry, kernels) {
            if (apply_entry(dev, entry, index++)) {
                rc = dl_fail_context("%s", path);
                break;
            }
        }
        if (rc == 0 && applied) *applied = index > 0;
    }
    cJSON_Delete(root);
    return rc;
}

void dl_tune_apply_stored(dl_device *dev) {
    bool applied = false;
    if (dl_tune_apply(dev, &applied))
        DL_WARN("device", "stored CLBlast tuning not applied: %s", dl_error());
    else if (applied)
        DL_DEBUG("device", "applied stored CLBlast tuning for %s", dev->info.name);
}
