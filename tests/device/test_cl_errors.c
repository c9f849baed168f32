/* OpenCL error codes become names and advice a user can act on. The codes
 * are the numbers the OpenCL 1.2 specification (table of error codes in
 * cl.h) gives them, written here as numbers so that a wrong case in the
 * name table shows. No device is needed. */
#include <string.h>

#include "dedloc/device.h"
#include "dedloc/util.h"
#include "dl_test.h"

static const struct {
    cl_int code;
    const char *name;
} spec_codes[] = {
    {0, "CL_SUCCESS"},
    {-1, "CL_DEVICE_NOT_FOUND"},
    {-2, "CL_DEVICE_NOT_AVAILABLE"},
    {-3, "CL_COMPILER_NOT_AVAILABLE"},
    {-4, "CL_MEM_OBJECT_ALLOCATION_FAILURE"},
    {-5, "CL_OUT_OF_RESOURCES"},
    {-6, "CL_OUT_OF_HOST_MEMORY"},
    {-11, "CL_BUILD_PROGRAM_FAILURE"},
    {-14, "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST"},
    {-19, "CL_KERNEL_ARG_INFO_NOT_AVAILABLE"},
    {-30, "CL_INVALID_VALUE"},
    {-33, "CL_INVALID_DEVICE"},
    {-36, "CL_INVALID_COMMAND_QUEUE"},
    {-38, "CL_INVALID_MEM_OBJECT"},
    {-45, "CL_INVALID_PROGRAM_EXECUTABLE"},
    {-46, "CL_INVALID_KERNEL_NAME"},
    {-48, "CL_INVALID_KERNEL"},
    {-51, "CL_INVALID_ARG_SIZE"},
    {-52, "CL_INVALID_KERNEL_ARGS"},
    {-54, "CL_INVALID_WORK_GROUP_SIZE"},
    {-59, "CL_INVALID_OPERATION"},
    {-61, "CL_INVALID_BUFFER_SIZE"},
    {-63, "CL_INVALID_GLOBAL_WORK_SIZE"},
    {-68, "CL_INVALID_DEVICE_PARTITION_COUNT"},
    {-1001, "CL_PLATFORM_NOT_FOUND_KHR"},
};

static void test_names(void) {
    for (size_t i = 0; i < sizeof spec_codes / sizeof *spec_codes; i++) {
        const char *got = dl_cl_error_name(spec_codes[i].code);
        CHECK_MSG(!strcmp(got, spec_codes[i].name), "code %d: %s, expected %s",
                  (int)spec_codes[i].code, got, spec_codes[i].name);
    }
    /* codes no table knows (a vendor extension, a CLBlast code) keep their number */
    CHECK(!strcmp(dl_cl_error_name(-9999), "CL error -9999"));
    CHECK(!strcmp(dl_cl_error_name(-2048), "CL error -2048"));
    CHECK(!strcmp(dl_cl_error_name(7), "CL error 7"));
}

static void test_check(void) {
    dl_clear_error();
    CHECK(dl_cl_check(0, "clFinish") == 0);
    CHECK(!strcmp(dl_error(), "unknown error")); /* success records nothing */

    /* out of device memory: names the call, the code and what to try */
    CHECK(dl_cl_check(-4, "clEnqueueWriteBuffer(weights)") == -1);
    CHECK_MSG(!strcmp(dl_error(), "clEnqueueWriteBuffer(weights) failed: "
                                  "CL_MEM_OBJECT_ALLOCATION_FAILURE (the device ran out of "
                                  "memory or resources; try a smaller --batch or --seq)"),
              "%s", dl_error());
    CHECK(dl_cl_check(-5, "clEnqueueNDRangeKernel") == -1);
    CHECK_MSG(strstr(dl_error(), "CL_OUT_OF_RESOURCES (") && strstr(dl_error(), "--batch"), "%s",
              dl_error());
    /* no platform: say how to get a driver */
    CHECK(dl_cl_check(-1001, "clGetPlatformIDs") == -1);
    CHECK_MSG(strstr(dl_error(), "CL_PLATFORM_NOT_FOUND_KHR") &&
                  strstr(dl_error(), "pocl-opencl-icd") && strstr(dl_error(), "dedloc devices"),
              "%s", dl_error());
    CHECK(dl_cl_check(-1, "clGetDeviceIDs") == -1);
    CHECK_MSG(strstr(dl_error(), "install a driver"), "%s", dl_error());
    CHECK(dl_cl_check(-6, "clCreateBuffer") == -1);
    CHECK_MSG(strstr(dl_error(), "host ran out of memory"), "%s", dl_error());
    CHECK(dl_cl_check(-11, "clBuildProgram(gelu.cl)") == -1);
    CHECK_MSG(strstr(dl_error(), "build log"), "%s", dl_error());
    CHECK(dl_cl_check(-61, "clCreateBuffer") == -1);
    CHECK_MSG(strstr(dl_error(), "maximum allocation"), "%s", dl_error());
    /* a code without advice: just the call and the name */
    CHECK(dl_cl_check(-30, "clSetKernelArg(3)") == -1);
    CHECK_MSG(!strcmp(dl_error(), "clSetKernelArg(3) failed: CL_INVALID_VALUE"), "%s", dl_error());
    CHECK(dl_cl_check(-9999, "clFlush") == -1);
    CHECK_MSG(!strcmp(dl_error(), "clFlush failed: CL error -9999"), "%s", dl_error());
}

int main(void) {
    test_names();
    test_check();
    return dl_test_finish("test_cl_errors");
}
