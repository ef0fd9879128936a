// libFuzzer harness: token shards through dataloader_init (llmc/dataloader.h), which checks
// the header against the file's size, then every batch of an epoch and the first of the
// next (reshuffled) read back as rank 1 of 2, so that a chunk's offset past the tokens shows.
#include <stdint.h>          // uint8_t
#include <stddef.h>          // size_t
#include <stdlib.h>          // abort
#include "llmc/dataloader.h" // dataloader_init, dataloader_next_batch, dataloader_free
#include "test/fuzz/fuzz_file.h"  // fuzz_write_file: the input as a file
#include "llmc/utils.h"     // llmc_error, llmc_errmsg, the checked wrappers

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_file("shard_000000.bin", data, size);
    DataLoader dl;
    llmc_errbuf[0] = '\0';  // so that a refusal must record its own message
    if (dataloader_init(&dl, path, 2, 3, 1, 2, 1, 1337) == 0) {
        size_t n = dataloader_num_batches(&dl);
        for (size_t b = 0; b <= n; b++) {
            if (dataloader_next_batch(&dl) != 0) { abort(); }  // init vouched for every batch
            for (size_t i = 0; i < 6; i++) {
                if (dl.inputs[i] < 0 || dl.inputs[i] > 65535 || dl.targets[i] < 0 || dl.targets[i] > 65535) { abort(); }
            }
        }
    } else {
        fuzz_refused(llmc_errmsg());
    }
    dataloader_free(&dl);
    return 0;
}
