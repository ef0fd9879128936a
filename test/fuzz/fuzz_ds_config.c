// libFuzzer harness: DeepSpeed JSON configs (--ds-config) through zero_config_load_json
// (zero3/config_json.h), then the cross-field checks and the description of what was read.
#include <stdint.h>          // uint8_t
#include <stddef.h>          // size_t
#include <stdlib.h>          // abort
#include <string.h>          // strlen
#include "zero3/config.h"    // zero_config_defaults, zero_config_validate, zero_config_describe
#include "zero3/config_json.h"  // zero_config_load_json
#include "test/fuzz/fuzz_file.h"  // fuzz_write_file: the input as a file
#include "zero3/util.h"     // zero_error, zero_errmsg

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_file("ds_config.json", data, size);
    ZeroConfig c;
    zero_config_defaults(&c);
    char warnings[256] = "";  // small, so that the appender's truncation is exercised
    char text[2048];
    (void)zero_error("%s", "");  // empty, so that a refusal must record its own message
    if (zero_config_load_json(&c, path, warnings, sizeof(warnings)) == 0) {
        zero_config_validate(&c);
        zero_config_describe(&c, text, sizeof(text));
        if (strlen(text) >= sizeof(text)) { abort(); }
    } else {
        fuzz_refused(zero_errmsg());
    }
    if (strlen(warnings) >= sizeof(warnings)) { abort(); }
    return 0;
}
