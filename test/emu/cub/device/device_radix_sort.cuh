/*
 cub::DeviceRadixSort::SortPairs on the CPU (see ../../cuda_runtime.h): a stable sort of
 (key, value) pairs by the key's bits [begin_bit, end_bit), as unsigned, which is what the
 radix sort computes, queued on its stream with the ranges it touches declared. With d_temp_storage NULL it only reports the temporary bytes.
*/
#ifndef EMU_CUB_DEVICE_RADIX_SORT_CUH
#define EMU_CUB_DEVICE_RADIX_SORT_CUH

#include <algorithm>        // std::stable_sort
#include <vector>           // the order
#include "cuda_runtime.h"   // cudaError_t, cudaStream_t

namespace cub {
struct DeviceRadixSort {
    template <typename K, typename V>
    static cudaError_t SortPairs(void* d_temp_storage, size_t& temp_bytes, const K* keys_in, K* keys_out,
                                 const V* values_in, V* values_out, int n, int begin_bit = 0,
                                 int end_bit = (int)sizeof(K) * 8, cudaStream_t stream = NULL,
                                 const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
        if (d_temp_storage == NULL) { temp_bytes = 256; return cudaSuccess; }
        size_t nn = n > 0 ? (size_t)n : 0;
        std::vector<EmuAccess> acc = {emu_range(keys_in, nn * sizeof(K), 0), emu_range(values_in, nn * sizeof(V), 0),
                                      emu_range(keys_out, nn * sizeof(K), 1), emu_range(values_out, nn * sizeof(V), 1),
                                      emu_range(d_temp_storage, temp_bytes, 1)};
        emu_stream_declared(stream, "cub::DeviceRadixSort::SortPairs", acc, [=]() {
            auto bits = [&](K k) {
                unsigned long long u = (unsigned long long)(typename std::make_unsigned<K>::type)k >> begin_bit;
                int width = end_bit - begin_bit;
                return width >= 64 ? u : u & ((1ull << width) - 1);
            };
            std::vector<int> order(nn);
            for (size_t i = 0; i < nn; i++) { order[i] = (int)i; }
            std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return bits(keys_in[a]) < bits(keys_in[b]); });
            std::vector<K> k2(nn);
            std::vector<V> v2(nn);
            for (size_t i = 0; i < nn; i++) { k2[i] = keys_in[order[i]]; v2[i] = values_in[order[i]]; }
            std::copy(k2.begin(), k2.end(), keys_out);
            std::copy(v2.begin(), v2.end(), values_out);
        }, file, line);
        return cudaSuccess;
    }
};
}  // namespace cub

#endif // EMU_CUB_DEVICE_RADIX_SORT_CUH
