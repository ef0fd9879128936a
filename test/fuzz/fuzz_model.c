// libFuzzer harness: llm.c model files through gpt2_source_open and gpt2_source_read
// (llmc/gpt2.h), as the trainers read them: the header and size checked once, then each
// unit in ranges (here two: as two ranks would read their shards). An input is either
// refused with a message, or every parameter its header describes is read into a buffer
// of exactly the unit's size, which ASan checks.
#include <stdint.h>          // uint8_t
#include <stddef.h>          // size_t
#include <stdlib.h>          // malloc, free, abort
#include <string.h>          // memcpy
#include "llmc/gpt2.h"       // gpt2_source_open, gpt2_source_read, the units
#include "test/fuzz/fuzz_file.h"  // fuzz_write_file: the input as a file
#include "llmc/utils.h"     // llmc_errmsg

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_file("model.bin", data, size);
    GPT2Source s;
    llmc_errbuf[0] = '\0';  // so that a refusal must record its own message
    if (gpt2_source_open(&s, path) != 0) {
        if (s.fd >= 0) { abort(); }  // a refusal leaves nothing open
        fuzz_refused(llmc_errmsg());
        return 0;
    }
    // those of a version 5 file (the header's second int32, little-endian) are bf16
    // widened: low 16 bits 0
    int bf16 = data[4] == 5 && data[5] == 0 && data[6] == 0 && data[7] == 0;
    for (int u = 0; u < gpt2_num_units(&s.config); u++) {
        size_t n = gpt2_unit_size(&s.config, u), half = n / 2;
        float* unit = (float*)malloc(n * sizeof(float));
        if (unit == NULL) { abort(); }
        llmc_errbuf[0] = '\0';
        if (gpt2_source_read(&s, u, half, n - half, unit + half) != 0 || gpt2_source_read(&s, u, 0, half, unit) != 0) {
            fuzz_refused(llmc_errmsg());  // a non-finite parameter
            free(unit);
            break;
        }
        for (size_t i = 0; i < n; i++) {
            uint32_t bits;
            memcpy(&bits, &unit[i], sizeof(bits));
            if (bf16 && (bits & 0xffffu) != 0) { abort(); }
        }
        free(unit);
    }
    gpt2_source_close(&s);
    return 0;
}
