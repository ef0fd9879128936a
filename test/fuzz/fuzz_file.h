/*
 What every fuzz harness of test/fuzz shares: the readers take paths, so each input is
 written whole to a file in a private directory under /dev/shm (memory, no disk wear)
 before the real reader is called on it. The directory is removed at exit.
*/
#ifndef TEST_FUZZ_FILE_H
#define TEST_FUZZ_FILE_H

#include <stdio.h>    // snprintf, fopen, fwrite, perror
#include <stdlib.h>   // mkdtemp, atexit, abort, getenv
#include <stdint.h>   // uint8_t
#include <stddef.h>   // size_t
#include <unistd.h>   // unlink, rmdir

static char fuzz_dir[64];
static char fuzz_path[128];

static void fuzz_cleanup(void) {
    if (fuzz_path[0] != '\0') { unlink(fuzz_path); }
    if (fuzz_dir[0] != '\0') { rmdir(fuzz_dir); }
}

// writes data to DIR/name (DIR made on the first call) and returns the path; a failure
// here is the harness's, not the reader's, so it aborts loudly instead of hiding inputs
static const char* fuzz_write_file(const char* name, const uint8_t* data, size_t size) {
    if (fuzz_dir[0] == '\0') {
        snprintf(fuzz_dir, sizeof(fuzz_dir), "/dev/shm/fuzz_XXXXXX");
        if (mkdtemp(fuzz_dir) == NULL) { perror("fuzz: mkdtemp"); abort(); }
        atexit(fuzz_cleanup);
    }
    snprintf(fuzz_path, sizeof(fuzz_path), "%s/%s", fuzz_dir, name);
    FILE* fp = fopen(fuzz_path, "wb");
    if (fp == NULL || (size > 0 && fwrite(data, 1, size, fp) != size) || fclose(fp) != 0) {
        perror("fuzz: writing the input");
        abort();
    }
    return fuzz_path;
}

// called when the reader refused the input, with its recorded message: a refusal must say
// why, and under FUZZ_MUST_ACCEPT=1 (run_fuzz.sh, on the valid seeds ok_*) it is a failure
static void fuzz_refused(const char* msg) {
    if (msg[0] == '\0') { fprintf(stderr, "fuzz: refused without a message\n"); abort(); }
    if (getenv("FUZZ_MUST_ACCEPT") != NULL) { fprintf(stderr, "fuzz: a valid input refused: %s\n", msg); abort(); }
}

#endif // TEST_FUZZ_FILE_H
