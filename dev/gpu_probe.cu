/*
 What a GPU machine offers the trainer, before the trainer runs: the CUDA runtime and
 driver versions, each GPU (name, compute capability, multiprocessors, memory), the
 cuBLAS, cuBLASLt and NCCL the loader found, and the file each of them came from.
 scripts/gpu_first_contact.sh runs it first; on a machine without a GPU or driver it still
 reports the libraries (their version calls need no device), which is how `make test`
 rehearses the bundle's library search (test/gpu/test_gpu_bundle.sh).

    make build/gpu_probe && ./build/gpu_probe

 Prints one `key=value` line per fact. Exit status: 0 with at least one GPU, 2 without one
 (the libraries loaded: the program would not have started otherwise).
*/
#include <stdio.h>           // printf
#include <string.h>          // strstr, strrchr
#include <link.h>            // dl_iterate_phdr: the files the loader mapped
#include <cuda_runtime.h>    // cudaRuntimeGetVersion, cudaGetDeviceCount, cudaGetDeviceProperties
#include <cublas_v2.h>       // cublasGetProperty
#include <cublasLt.h>        // cublasLtGetVersion
#include <nccl.h>            // ncclGetVersion

// the libraries whose origin matters: the ones a bare machine may hold in several places
static const char* probe_libs[] = {"libcublasLt.so", "libcublas.so", "libnccl.so", "libcudart.so", "libcuda.so"};

// dl_iterate_phdr's callback: prints `lib.<name>=<path>` for each library of probe_libs
static int probe_print_lib(struct dl_phdr_info* info, size_t size, void* data) {
    (void)size; (void)data;
    const char* path = info->dlpi_name;
    if (path == NULL || path[0] == '\0') { return 0; }
    const char* base = strrchr(path, '/');
    base = base != NULL ? base + 1 : path;
    for (size_t i = 0; i < sizeof(probe_libs) / sizeof(probe_libs[0]); i++) {
        // libcublas.so must not also match libcublasLt.so: compare up to the ".so"
        size_t n = strlen(probe_libs[i]);
        if (strncmp(base, probe_libs[i], n) == 0) {
            printf("lib.%.*s=%s\n", (int)(n - 3), probe_libs[i], path);
        }
    }
    return 0;
}

int main(void) {
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);   // 0 when no driver is installed
    printf("cuda_runtime=%d.%d\n", runtime / 1000, (runtime % 1000) / 10);
    printf("cuda_driver=%d.%d\n", driver / 1000, (driver % 1000) / 10);

    int major = 0, minor = 0, patch = 0;
    cublasGetProperty(MAJOR_VERSION, &major);
    cublasGetProperty(MINOR_VERSION, &minor);
    cublasGetProperty(PATCH_LEVEL, &patch);
    printf("cublas=%d.%d.%d\n", major, minor, patch);
    size_t lt = cublasLtGetVersion();   // major * 10000 + minor * 100 + patch
    printf("cublaslt=%zu.%zu.%zu\n", lt / 10000, (lt / 100) % 100, lt % 100);
    int nccl = 0;
    if (ncclGetVersion(&nccl) == ncclSuccess) {   // major * 10000 + minor * 100 + patch (NCCL >= 2.9)
        printf("nccl=%d.%d.%d\n", nccl / 10000, (nccl / 100) % 100, nccl % 100);
    }
    dl_iterate_phdr(probe_print_lib, NULL);

    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        printf("gpus=0\n");
        printf("gpu_error=%s\n", err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device");
        return 2;
    }
    printf("gpus=%d\n", count);
    for (int d = 0; d < count; d++) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, d) != cudaSuccess) { continue; }
        size_t free_b = 0, total_b = 0;
        if (cudaSetDevice(d) == cudaSuccess) { cudaMemGetInfo(&free_b, &total_b); }
        printf("gpu%d.name=%s\n", d, p.name);
        printf("gpu%d.cc=%d.%d\n", d, p.major, p.minor);
        printf("gpu%d.sms=%d\n", d, p.multiProcessorCount);
        printf("gpu%d.mem_total_mib=%zu\n", d, p.totalGlobalMem >> 20);
        printf("gpu%d.mem_free_mib=%zu\n", d, free_b >> 20);
        printf("gpu%d.l2_mib=%.1f\n", d, p.l2CacheSize / 1048576.0);
    }
    return 0;
}
