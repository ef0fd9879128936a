// libFuzzer harness: llm.c tokenizer files through tokenizer_init (llmc/tokenizer.h),
// then every token decoded, so an offset or length past the storage shows under ASan.
#include <stdint.h>          // uint8_t
#include <stddef.h>          // size_t
#include <stdlib.h>          // abort
#include <string.h>          // strlen
#include "llmc/tokenizer.h"  // tokenizer_init, tokenizer_decode_len, tokenizer_free
#include "test/fuzz/fuzz_file.h"  // fuzz_write_file: the input as a file
#include "llmc/utils.h"     // llmc_error, llmc_errmsg, the checked wrappers

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_file("tokenizer.bin", data, size);
    Tokenizer t;
    llmc_errbuf[0] = '\0';  // so that a refusal must record its own message
    if (tokenizer_init(&t, path) == 0) {
        for (uint32_t i = 0; i < t.vocab_size; i++) {
            size_t len;
            const char* s = tokenizer_decode_len(&t, i, &len);
            if (s == NULL || len == 0 || s[len] != '\0') { abort(); }
        }
        if (tokenizer_decode(&t, t.vocab_size) != NULL) { abort(); }
    } else {
        fuzz_refused(llmc_errmsg());
    }
    tokenizer_free(&t);
    return 0;
}
