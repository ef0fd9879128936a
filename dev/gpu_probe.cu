/*
 What a GPU machine offers the trainer, before the trainer runs: the CUDA runtime and
 driver versions, each GPU (name, compute capability, multiprocessors, memory), the
 cuBLAS, cuBLASLt and NCCL the loader found, and the file each of them came from.
 scripts/gpu_first_contact.sh runs it first; on a machine without a GPU or driver it still
 reports the libraries (their version calls need no device), which is how `make test`
 rehearses the bundle's library search (test/gpu/test_gpu_bundle.sh).

    make build/gpu_probe && ./build/gpu_probe
    ./build/gpu_probe --rates [MIB [PIN_MIB]]      (defaults 1024 and 4096)

 Prints one `key=value` line per fact. Exit status: 0 with at least one GPU, 2 without one
 (the libraries loaded: the program would not have started otherwise).

 --rates measures, on GPU 0, what the offload tiers and start-up move at (scripts/gpu_speed.sh
 step a): rates.h2d_pinned_gbps and rates.d2h_pinned_gbps (MIB copied between a pinned host
 buffer and the GPU, the best of 5 after a warm-up, timed with events), rates.h2d_pageable_gbps
 (from malloc'd memory), rates.d2d_gbps (a device-to-device copy, bytes read plus written);
 then how fast PIN_MIB of pinned host memory is made, zeroed on every core, two ways:
 rates.pin_mallochost_gbps (cudaMallocHost, then the zeroing: what the engine does) and
 rates.pin_register_gbps (mmap, the zeroing that faults the pages in, then one
 cudaHostRegister), with rates.pin_register_only_gbps (the registration alone) and
 rates.h2d_registered_gbps (a copy from the registered memory: is it as fast as pinned?).
*/
#include <stdio.h>           // printf
#include <stdlib.h>          // atol, malloc, free
#include <string.h>          // strstr, strrchr, memset
#include <link.h>            // dl_iterate_phdr: the files the loader mapped
#include <sys/mman.h>        // mmap, munmap: memory for cudaHostRegister
#include <omp.h>             // omp_get_wtime; the zeroing on every core
#include <cuda_runtime.h>    // cudaRuntimeGetVersion, cudaGetDeviceCount, cudaGetDeviceProperties, the copies
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

// ----------------------------------------------------------------------------
// --rates

// the first CUDA error of a --rates measurement: said, and the program ends with 1
#define RATES_CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("rates_error=%s: %s\n", #call, cudaGetErrorString(e_)); return 1; } } while (0)

// GB/s of the best of 5 copies of n bytes (after a warm-up), timed with events
static int rates_copy(const char* key, void* dst, const void* src, size_t n, cudaMemcpyKind kind, double counted) {
    cudaEvent_t a, b;
    RATES_CHECK(cudaEventCreate(&a));
    RATES_CHECK(cudaEventCreate(&b));
    RATES_CHECK(cudaMemcpy(dst, src, n, kind));
    float best = 1e30f;
    for (int i = 0; i < 5; i++) {
        RATES_CHECK(cudaEventRecord(a));
        RATES_CHECK(cudaMemcpyAsync(dst, src, n, kind));
        RATES_CHECK(cudaEventRecord(b));
        RATES_CHECK(cudaEventSynchronize(b));
        float ms = 0.0f;
        RATES_CHECK(cudaEventElapsedTime(&ms, a, b));
        if (ms < best) { best = ms; }
    }
    printf("rates.%s_gbps=%.2f\n", key, counted * n / (best * 1e-3) / 1e9);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return 0;
}

// zeroes n bytes on every OpenMP thread, 2 MiB a piece (zero3/util.h's zero_clear)
static void rates_clear(char* p, size_t n) {
    const size_t piece = (size_t)2 << 20;
    long pieces = (long)((n + piece - 1) / piece);
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < pieces; i++) {
        size_t at = (size_t)i * piece;
        memset(p + at, 0, n - at < piece ? n - at : piece);
    }
}

static int rates(size_t mib, size_t pin_mib) {
    size_t n = mib << 20, pn = pin_mib << 20;
    RATES_CHECK(cudaSetDevice(0));
    RATES_CHECK(cudaFree(0));  // the context, before anything is timed
    void *host, *dev, *dev2;
    RATES_CHECK(cudaMallocHost(&host, n));
    RATES_CHECK(cudaMalloc(&dev, n));
    RATES_CHECK(cudaMalloc(&dev2, n));
    memset(host, 1, n);
    RATES_CHECK(cudaMemset(dev, 1, n));
    printf("rates.mib=%zu\nrates.threads=%d\n", mib, omp_get_max_threads());
    if (rates_copy("h2d_pinned", dev, host, n, cudaMemcpyHostToDevice, 1.0) != 0 ||
        rates_copy("d2h_pinned", host, dev, n, cudaMemcpyDeviceToHost, 1.0) != 0 ||
        rates_copy("d2d", dev2, dev, n, cudaMemcpyDeviceToDevice, 2.0) != 0) {
        return 1;
    }
    char* pageable = (char*)malloc(n);
    if (pageable == NULL) { printf("rates_error=out of memory\n"); return 1; }
    memset(pageable, 1, n);
    if (rates_copy("h2d_pageable", dev, pageable, n, cudaMemcpyHostToDevice, 1.0) != 0) { return 1; }
    free(pageable);
    RATES_CHECK(cudaFreeHost(host));

    // pinned memory made two ways, each zeroed on every core
    printf("rates.pin_mib=%zu\n", pin_mib);
    double t0 = omp_get_wtime();
    void* pinned = NULL;
    RATES_CHECK(cudaMallocHost(&pinned, pn));
    rates_clear((char*)pinned, pn);
    double t1 = omp_get_wtime();
    RATES_CHECK(cudaFreeHost(pinned));
    printf("rates.pin_mallochost_gbps=%.2f\n", pn / (t1 - t0) / 1e9);
    t0 = omp_get_wtime();
    char* mapped = (char*)mmap(NULL, pn, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) { printf("rates_error=mmap of %zu MiB failed\n", pin_mib); return 1; }
    rates_clear(mapped, pn);
    double t2 = omp_get_wtime();
    RATES_CHECK(cudaHostRegister(mapped, pn, cudaHostRegisterDefault));
    t1 = omp_get_wtime();
    printf("rates.pin_register_gbps=%.2f\nrates.pin_register_only_gbps=%.2f\n", pn / (t1 - t0) / 1e9, pn / (t1 - t2) / 1e9);
    size_t m = n < pn ? n : pn;
    if (rates_copy("h2d_registered", dev, mapped, m, cudaMemcpyHostToDevice, 1.0) != 0) { return 1; }
    RATES_CHECK(cudaHostUnregister(mapped));
    munmap(mapped, pn);
    cudaFree(dev);
    cudaFree(dev2);
    return 0;
}

int main(int argc, char** argv) {
    int rates_mode = argc > 1 && strcmp(argv[1], "--rates") == 0;
    if (argc > 1 && !rates_mode) {
        fprintf(stderr, "usage: %s [--rates [MIB [PIN_MIB]]]\n", argv[0]);
        return 1;
    }
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
    if (rates_mode) {
        long mib = argc > 2 ? atol(argv[2]) : 1024, pin_mib = argc > 3 ? atol(argv[3]) : 4096;
        if (mib < 1 || pin_mib < 1) { fprintf(stderr, "--rates: MIB and PIN_MIB must be positive\n"); return 1; }
        return rates((size_t)mib, (size_t)pin_mib);
    }
    return 0;
}
