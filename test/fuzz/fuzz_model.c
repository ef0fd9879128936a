// libFuzzer harness: llm.c model files through gpt2_read_model (llmc/gpt2.h). An input
// is either refused with a message or read into a buffer of exactly the parameters its
// header describes, which the harness touches end to end so that ASan checks the size.
#include <stdint.h>          // uint8_t
#include <stddef.h>          // size_t
#include <stdlib.h>          // free, abort
#include <string.h>          // memcpy
#include "llmc/gpt2.h"       // gpt2_read_model, gpt2_num_params
#include "test/fuzz/fuzz_file.h"  // fuzz_write_file: the input as a file

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_file("model.bin", data, size);
    GPT2Config c;
    float* params = NULL;
    llmc_errbuf[0] = '\0';  // so that a refusal must record its own message
    if (gpt2_read_model(path, &c, &params) == 0) {
        size_t n = gpt2_num_params(&c);
        // every parameter read (ASan: the buffer holds them all); those of a version 5 file
        // (the header's second int32, little-endian) are bf16 widened: low 16 bits 0
        int bf16 = data[4] == 5 && data[5] == 0 && data[6] == 0 && data[7] == 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t bits;
            memcpy(&bits, &params[i], sizeof(bits));
            if (bf16 && (bits & 0xffffu) != 0) { abort(); }
        }
        free(params);
    } else {
        if (params != NULL) { abort(); }  // a refusal allocates nothing
        fuzz_refused(llmc_errmsg());
    }
    return 0;
}
