/*
 Tests of llmc/dataloader.h on small synthetic shards.

 Every shard holds tokens that are a known function of (shard id, position), so each batch
 can be checked exactly and traced back to the (shard, chunk) it came from. Criterion forks
 every test, so each one gets its own temporary directory (made in .init, removed in .fini).

 build: make build/test_dataloader (links the library, build/lib/opt/lib.a)
*/
#include <stdio.h>              // FILE, fopen, fwrite, snprintf
#include <stdlib.h>             // mkdtemp, calloc, free
#include <string.h>             // strstr, strcpy, memcmp
#include <dirent.h>             // opendir, readdir: cleaning the temp dir
#include <unistd.h>             // unlink, rmdir, truncate
#include <criterion/criterion.h> // Test, TestSuite, cr_assert*
#include "llmc/dataloader.h"    // the code under test
#include "llmc/utils.h"     // llmc_error, llmc_errmsg, the checked wrappers

// ----------------------------------------------------------------------------
// fixture: a fresh temp dir per test

static char tmpdir[256];

static void dir_make(void) {
    strcpy(tmpdir, "/tmp/test_dataloader_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir), "mkdtemp failed");
}

static void dir_remove(void) {
    DIR* d = opendir(tmpdir);
    if (d == NULL) { return; }
    struct dirent* e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) { continue; }
        snprintf(path, sizeof(path), "%s/%s", tmpdir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(tmpdir);
}

TestSuite(dataloader, .init = dir_make, .fini = dir_remove);

// ----------------------------------------------------------------------------
// synthetic shards

// the token at position i of shard `id`: distinct across shards and positions in these tests
static int tok(int id, size_t i) { return (int)((i * 7 + (size_t)id * 1000) % 65536); }

static void put_i32le(uint8_t* p, int32_t v) {
    uint32_t u = (uint32_t)v;
    p[0] = (uint8_t)u; p[1] = (uint8_t)(u >> 8); p[2] = (uint8_t)(u >> 16); p[3] = (uint8_t)(u >> 24);
}

// writes tmpdir/name: a header (magic, version, count) then `ntok` tokens tok(id, i);
// count != ntok makes a broken file. Returns the path in `path` (512 bytes).
static void shard_write_raw(char* path, const char* name, int32_t magic, int32_t version, int32_t count, int id,
                            size_t ntok) {
    snprintf(path, 512, "%s/%s", tmpdir, name);
    FILE* fp = fopen(path, "wb");
    cr_assert_not_null(fp, "cannot create %s", path);
    uint8_t header[1024] = {0};
    put_i32le(header + 0, magic);
    put_i32le(header + 4, version);
    put_i32le(header + 8, count);
    cr_assert_eq(fwrite(header, 1, sizeof(header), fp), sizeof(header));
    for (size_t i = 0; i < ntok; i++) {
        int t = tok(id, i);
        uint8_t b[2] = {(uint8_t)(t & 0xff), (uint8_t)(t >> 8)};
        cr_assert_eq(fwrite(b, 1, 2, fp), 2);
    }
    fclose(fp);
}

static void shard_write(char* path, const char* name, int id, size_t ntok) {
    shard_write_raw(path, name, 20240520, 1, (int32_t)ntok, id, ntok);
}

// pattern tmpdir/shard_*.bin in `pattern` (512 bytes)
static void shard_pattern(char* pattern) { snprintf(pattern, 512, "%s/shard_*.bin", tmpdir); }

// writes shards shard_000.bin.. with id = index and the given token counts
static void shards_write(const size_t* ntoks, int n) {
    char path[512], name[64];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "shard_%03d.bin", i);
        shard_write(path, name, i, ntoks[i]);
    }
}

// does the current batch of dl equal chunk k of shard `id` for its rank (inputs and targets)?
static int batch_is(const DataLoader* dl, int id, size_t k) {
    size_t bt = dl->B * dl->T;
    size_t start = k * (size_t)dl->nproc * bt + (size_t)dl->rank * bt;
    for (size_t i = 0; i < bt; i++) {
        if (dl->inputs[i] != tok(id, start + i)) { return 0; }
        if (dl->targets[i] != tok(id, start + i + 1)) { return 0; }
    }
    return 1;
}

// which (shard id, chunk) the current batch is, searching the shards of the test; -1 if none
static long batch_decode(const DataLoader* dl, const size_t* ntoks, int n) {
    size_t g = (size_t)dl->nproc * dl->B * dl->T;
    long code = 0;
    for (int s = 0; s < n; s++) {
        size_t nch = (ntoks[s] - 1) / g;
        for (size_t k = 0; k < nch; k++, code++) {
            if (batch_is(dl, s, k)) { return code; }
        }
    }
    return -1;
}

// ----------------------------------------------------------------------------
// layout

// ranks 0..nproc-1 with batch B together read what one rank with batch nproc*B reads
static void check_layout(int nproc) {
    const size_t B = 2, T = 8;
    size_t ntoks[2] = {1000, 777};
    shards_write(ntoks, 2);
    char pattern[512];
    shard_pattern(pattern);

    DataLoader ref;
    cr_assert_eq(dataloader_init(&ref, pattern, B * (size_t)nproc, T, 0, 1, 0, 0), 0, "%s", llmc_errmsg());
    DataLoader dl[4];
    for (int r = 0; r < nproc; r++) {
        cr_assert_eq(dataloader_init(&dl[r], pattern, B, T, r, nproc, 0, 0), 0, "%s", llmc_errmsg());
    }
    size_t g = (size_t)nproc * B * T;
    size_t n0 = 999 / g, n1 = 776 / g, total = n0 + n1;
    cr_assert_eq(dataloader_num_batches(&ref), total);
    size_t bt = B * T;
    for (size_t step = 0; step < 2 * total + 3; step++) {
        cr_assert_eq(dataloader_next_batch(&ref), 0, "%s", llmc_errmsg());
        // sequential order: shard 0 chunks, shard 1 chunks, then the next epoch
        size_t e = step % total;
        int id = e < n0 ? 0 : 1;
        size_t k = e < n0 ? e : e - n0;
        cr_assert(batch_is(&ref, id, k), "nproc=%d step %zu: reference is not shard %d chunk %zu", nproc, step, id, k);
        for (size_t i = 0; i + 1 < bt * (size_t)nproc; i++) {
            cr_assert_eq(ref.targets[i], ref.inputs[i + 1], "targets are inputs shifted by one");
        }
        for (int r = 0; r < nproc; r++) {
            cr_assert_eq(dataloader_next_batch(&dl[r]), 0, "%s", llmc_errmsg());
            cr_assert_eq(memcmp(dl[r].inputs, ref.inputs + (size_t)r * bt, bt * sizeof(int)), 0,
                         "nproc=%d rank %d step %zu: inputs differ from the reference slice", nproc, r, step);
            cr_assert_eq(memcmp(dl[r].targets, ref.targets + (size_t)r * bt, bt * sizeof(int)), 0,
                         "nproc=%d rank %d step %zu: targets differ from the reference slice", nproc, r, step);
            for (size_t i = 0; i + 1 < bt; i++) { cr_assert_eq(dl[r].targets[i], dl[r].inputs[i + 1]); }
        }
    }
    for (int r = 0; r < nproc; r++) { dataloader_free(&dl[r]); }
    dataloader_free(&ref);
}

Test(dataloader, layout_nproc1) { check_layout(1); }
Test(dataloader, layout_nproc2) { check_layout(2); }
Test(dataloader, layout_nproc4) { check_layout(4); }

Test(dataloader, layout_exact_offsets) {
    // rank r of chunk k starts at token k*nproc*B*T + r*B*T: checked on raw numbers
    size_t ntoks[1] = {200};
    shards_write(ntoks, 1);
    char pattern[512];
    shard_pattern(pattern);
    DataLoader dl;
    cr_assert_eq(dataloader_init(&dl, pattern, 2, 3, 1, 2, 0, 0), 0, "%s", llmc_errmsg());  // B=2 T=3 rank 1 of 2
    cr_assert_eq(dataloader_next_batch(&dl), 0);
    cr_assert_eq(dataloader_next_batch(&dl), 0);  // chunk 1: start = 1*12 + 1*6 = 18
    for (size_t i = 0; i < 6; i++) {
        cr_assert_eq(dl.inputs[i], tok(0, 18 + i));
        cr_assert_eq(dl.targets[i], tok(0, 19 + i));
    }
    dataloader_free(&dl);
}

// ----------------------------------------------------------------------------
// shards in glob order, epochs, num_batches

Test(dataloader, glob_sorted_order_and_epoch_wrap) {
    char path[512], pattern[512];
    // created out of order, with files the pattern must not match
    shard_write(path, "shard_002.bin", 2, 300);
    shard_write(path, "shard_000.bin", 0, 200);
    shard_write(path, "shard_001.bin", 1, 250);
    shard_write(path, "shard_003.idx", 3, 300);
    shard_write(path, "notes.bin", 4, 300);
    shard_pattern(pattern);
    size_t ntoks[3] = {200, 250, 300};
    const size_t B = 2, T = 4, g = 8;
    DataLoader dl;
    cr_assert_eq(dataloader_init(&dl, pattern, B, T, 0, 1, 0, 123), 0, "%s", llmc_errmsg());
    cr_assert_eq(dl.num_shards, 3);
    size_t nch[3] = {199 / g, 249 / g, 299 / g};
    size_t total = nch[0] + nch[1] + nch[2];
    cr_assert_eq(dataloader_num_batches(&dl), total);
    for (uint64_t epoch = 0; epoch < 3; epoch++) {
        for (int s = 0; s < 3; s++) {
            for (size_t k = 0; k < nch[s]; k++) {
                DataLoaderState st;
                dataloader_get_state(&dl, &st);
                cr_assert_eq(st.epoch, epoch);
                cr_assert_eq(st.shard, (uint64_t)s);
                cr_assert_eq(st.batch, (uint64_t)k);
                cr_assert_eq(dataloader_next_batch(&dl), 0, "%s", llmc_errmsg());
                cr_assert(batch_is(&dl, s, k), "epoch %llu: expected shard %d chunk %zu, got code %ld",
                          (unsigned long long)epoch, s, k, batch_decode(&dl, ntoks, 3));
            }
        }
    }
    DataLoaderState st;
    dataloader_get_state(&dl, &st);
    cr_assert_eq(st.epoch, 3);
    cr_assert_eq(st.shard, 0);
    cr_assert_eq(st.batch, 0);
    dataloader_free(&dl);
    dataloader_free(&dl);  // safe twice
}

Test(dataloader, num_batches) {
    // global batch nproc*B*T = 2*2*4 = 16; chunks = (ntok-1)/16
    size_t ntoks[3] = {3 * 16 + 1, 3 * 16, 16 + 1};  // 3, 2, 1 chunks
    shards_write(ntoks, 3);
    char pattern[512];
    shard_pattern(pattern);
    for (int r = 0; r < 2; r++) {
        DataLoader dl;
        cr_assert_eq(dataloader_init(&dl, pattern, 2, 4, r, 2, 0, 0), 0, "%s", llmc_errmsg());
        cr_assert_eq(dataloader_num_batches(&dl), 6);
        dataloader_free(&dl);
    }
    DataLoader one;  // one rank with the same global batch: the same count
    cr_assert_eq(dataloader_init(&one, pattern, 4, 4, 0, 1, 0, 0), 0, "%s", llmc_errmsg());
    cr_assert_eq(dataloader_num_batches(&one), 6);
    // after num_batches steps we are back at epoch 1, shard 0, batch 0
    for (size_t i = 0; i < 6; i++) { cr_assert_eq(dataloader_next_batch(&one), 0); }
    DataLoaderState st;
    dataloader_get_state(&one, &st);
    cr_assert(st.epoch == 1 && st.shard == 0 && st.batch == 0);
    dataloader_free(&one);
}

Test(dataloader, reads_last_token_of_shard) {
    // ntok = one chunk + 1 exactly: the target of the last position is the shard's last token
    size_t ntoks[1] = {2 * 2 * 4 + 1};
    shards_write(ntoks, 1);
    char pattern[512];
    shard_pattern(pattern);
    DataLoader dl;
    cr_assert_eq(dataloader_init(&dl, pattern, 2, 4, 1, 2, 0, 0), 0, "%s", llmc_errmsg());
    cr_assert_eq(dataloader_num_batches(&dl), 1);
    cr_assert_eq(dataloader_next_batch(&dl), 0, "%s", llmc_errmsg());
    cr_assert_eq(dl.targets[7], tok(0, 16));
    dataloader_free(&dl);
}

// ----------------------------------------------------------------------------
// shuffle

static const size_t shuf_ntoks[3] = {8 * 5 + 3, 8 * 7 + 1, 8 * 11 + 6};  // 5, 7, 11 chunks at g = 8

// the decoded chunk codes of `steps` batches (nproc 1, B=2, T=4)
static void shuffle_sequence(const char* pattern, uint64_t seed, int shuffle, long* codes, size_t steps) {
    DataLoader dl;
    cr_assert_eq(dataloader_init(&dl, pattern, 2, 4, 0, 1, shuffle, seed), 0, "%s", llmc_errmsg());
    for (size_t i = 0; i < steps; i++) {
        cr_assert_eq(dataloader_next_batch(&dl), 0, "%s", llmc_errmsg());
        codes[i] = batch_decode(&dl, shuf_ntoks, 3);
        cr_assert_geq(codes[i], 0, "batch %zu is no chunk of any shard", i);
    }
    dataloader_free(&dl);
}

Test(dataloader, shuffle_deterministic_permutation) {
    shards_write(shuf_ntoks, 3);
    char pattern[512];
    shard_pattern(pattern);
    const size_t total = 5 + 7 + 11, epochs = 3, steps = epochs * total;
    long a[3 * 23], b[3 * 23], c[3 * 23];
    shuffle_sequence(pattern, 42, 1, a, steps);
    shuffle_sequence(pattern, 42, 1, b, steps);
    shuffle_sequence(pattern, 43, 1, c, steps);
    cr_assert_eq(memcmp(a, b, sizeof(a)), 0, "same seed must give the same order");
    cr_assert_neq(memcmp(a, c, total * sizeof(long)), 0, "another seed should give another order");
    cr_assert_neq(memcmp(a, a + total, total * sizeof(long)), 0, "epochs 0 and 1 should differ");

    const long first_code[3] = {0, 5, 12};  // code = first_code[shard] + chunk
    for (size_t e = 0; e < epochs; e++) {
        int seen[23] = {0};
        int identity = 1;
        for (size_t i = 0; i < total; i++) {
            long code = a[e * total + i];
            seen[code]++;
            if (code != (long)i) { identity = 0; }
        }
        for (size_t i = 0; i < total; i++) { cr_assert_eq(seen[i], 1, "epoch %zu: chunk code %zu seen %d times", e, i, seen[i]); }
        cr_assert(!identity, "epoch %zu was not shuffled", e);
        // shards are permuted as blocks: the chunks of one shard come together
        size_t i = 0;
        while (i < total) {
            long code = a[e * total + i];
            int s = code >= first_code[2] ? 2 : code >= first_code[1] ? 1 : 0;
            size_t n = s == 0 ? 5 : s == 1 ? 7 : 11;
            for (size_t j = 0; j < n; j++) {
                long cj = a[e * total + i + j];
                cr_assert(cj >= first_code[s] && cj < first_code[s] + (long)n, "epoch %zu: shard %d is not contiguous", e, s);
            }
            i += n;
        }
    }
}

Test(dataloader, shuffle_off_is_sorted_order) {
    shards_write(shuf_ntoks, 3);
    char pattern[512];
    shard_pattern(pattern);
    long a[2 * 23];
    shuffle_sequence(pattern, 42, 0, a, 2 * 23);
    for (size_t i = 0; i < 2 * 23; i++) { cr_assert_eq(a[i], (long)(i % 23)); }
}

Test(dataloader, shuffle_identical_across_ranks) {
    // 4 ranks with B=2 and one rank with B=8 under the same seed read the same global batches
    size_t ntoks[3] = {32 * 4 + 1, 32 * 6 + 10, 32 * 3 + 31};
    shards_write(ntoks, 3);
    char pattern[512];
    shard_pattern(pattern);
    const int nproc = 4;
    const size_t B = 2, T = 4, bt = 8;
    DataLoader ref, dl[4];
    cr_assert_eq(dataloader_init(&ref, pattern, B * nproc, T, 0, 1, 1, 7), 0, "%s", llmc_errmsg());
    for (int r = 0; r < nproc; r++) {
        cr_assert_eq(dataloader_init(&dl[r], pattern, B, T, r, nproc, 1, 7), 0, "%s", llmc_errmsg());
    }
    size_t total = dataloader_num_batches(&ref);
    cr_assert_eq(total, 13);
    for (size_t step = 0; step < 2 * total + 2; step++) {
        cr_assert_eq(dataloader_next_batch(&ref), 0);
        long code = batch_decode(&ref, ntoks, 3);
        cr_assert_geq(code, 0);
        for (int r = 0; r < nproc; r++) {
            cr_assert_eq(dataloader_next_batch(&dl[r]), 0);
            cr_assert_eq(batch_decode(&dl[r], ntoks, 3), code, "rank %d step %zu: another chunk", r, step);
            cr_assert_eq(memcmp(dl[r].inputs, ref.inputs + (size_t)r * bt, bt * sizeof(int)), 0);
            cr_assert_eq(memcmp(dl[r].targets, ref.targets + (size_t)r * bt, bt * sizeof(int)), 0);
        }
    }
    for (int r = 0; r < nproc; r++) { dataloader_free(&dl[r]); }
    dataloader_free(&ref);
}

// ----------------------------------------------------------------------------
// reset and resume

Test(dataloader, reset_returns_to_epoch0) {
    shards_write(shuf_ntoks, 3);
    char pattern[512];
    shard_pattern(pattern);
    for (int shuffle = 0; shuffle <= 1; shuffle++) {
        long fresh[23];
        shuffle_sequence(pattern, 5, shuffle, fresh, 23);
        DataLoader dl;
        cr_assert_eq(dataloader_init(&dl, pattern, 2, 4, 0, 1, shuffle, 5), 0);
        for (int i = 0; i < 30; i++) { cr_assert_eq(dataloader_next_batch(&dl), 0); }  // into epoch 1
        dataloader_reset(&dl);
        DataLoaderState st;
        dataloader_get_state(&dl, &st);
        cr_assert(st.epoch == 0 && st.shard == 0 && st.batch == 0);
        for (int i = 0; i < 23; i++) {
            cr_assert_eq(dataloader_next_batch(&dl), 0);
            cr_assert_eq(batch_decode(&dl, shuf_ntoks, 3), fresh[i], "shuffle %d: batch %d after reset", shuffle, i);
        }
        dataloader_free(&dl);
    }
}

Test(dataloader, state_resume_every_position) {
    // stop at every position of two epochs (every shard and epoch boundary), resume in another
    // loader, and compare the next batches with the loader that did not stop
    shards_write(shuf_ntoks, 3);
    char pattern[512];
    shard_pattern(pattern);
    const size_t total = 23, follow = 25;
    for (int shuffle = 0; shuffle <= 1; shuffle++) {
        for (size_t stop = 0; stop <= 2 * total; stop++) {
            DataLoader a, b;
            cr_assert_eq(dataloader_init(&a, pattern, 2, 4, 0, 1, shuffle, 99), 0);
            cr_assert_eq(dataloader_init(&b, pattern, 2, 4, 0, 1, shuffle, 99), 0);
            for (size_t i = 0; i < stop; i++) { cr_assert_eq(dataloader_next_batch(&a), 0); }
            // b is somewhere else (another epoch) before it resumes
            for (size_t i = 0; i < 31; i++) { cr_assert_eq(dataloader_next_batch(&b), 0); }
            DataLoaderState st;
            dataloader_get_state(&a, &st);
            cr_assert_eq(dataloader_set_state(&b, &st), 0, "%s", llmc_errmsg());
            DataLoaderState st2;
            dataloader_get_state(&b, &st2);
            cr_assert(st2.epoch == st.epoch && st2.shard == st.shard && st2.batch == st.batch);
            for (size_t i = 0; i < follow; i++) {
                cr_assert_eq(dataloader_next_batch(&a), 0);
                cr_assert_eq(dataloader_next_batch(&b), 0);
                cr_assert_eq(memcmp(a.inputs, b.inputs, 8 * sizeof(int)), 0, "shuffle %d stop %zu: batch %zu differs",
                             shuffle, stop, i);
                cr_assert_eq(memcmp(a.targets, b.targets, 8 * sizeof(int)), 0);
            }
            dataloader_free(&a);
            dataloader_free(&b);
        }
    }
}

Test(dataloader, state_resume_multi_rank) {
    // a state saved on rank 0 resumes rank 1 at the same global batch
    size_t ntoks[2] = {16 * 5 + 1, 16 * 3 + 1};
    shards_write(ntoks, 2);
    char pattern[512];
    shard_pattern(pattern);
    DataLoader r0, r1, fresh1;
    cr_assert_eq(dataloader_init(&r0, pattern, 2, 4, 0, 2, 1, 3), 0);
    cr_assert_eq(dataloader_init(&r1, pattern, 2, 4, 1, 2, 1, 3), 0);
    cr_assert_eq(dataloader_init(&fresh1, pattern, 2, 4, 1, 2, 1, 3), 0);
    for (int i = 0; i < 6; i++) { cr_assert_eq(dataloader_next_batch(&r0), 0); cr_assert_eq(dataloader_next_batch(&r1), 0); }
    DataLoaderState st;
    dataloader_get_state(&r0, &st);
    cr_assert_eq(dataloader_set_state(&fresh1, &st), 0, "%s", llmc_errmsg());
    for (int i = 0; i < 12; i++) {
        cr_assert_eq(dataloader_next_batch(&r1), 0);
        cr_assert_eq(dataloader_next_batch(&fresh1), 0);
        cr_assert_eq(memcmp(r1.inputs, fresh1.inputs, 8 * sizeof(int)), 0);
    }
    dataloader_free(&r0);
    dataloader_free(&r1);
    dataloader_free(&fresh1);
}

Test(dataloader, set_state_validates) {
    shards_write(shuf_ntoks, 3);
    char pattern[512];
    shard_pattern(pattern);
    for (int shuffle = 0; shuffle <= 1; shuffle++) {
        DataLoader dl, ref;
        cr_assert_eq(dataloader_init(&dl, pattern, 2, 4, 0, 1, shuffle, 11), 0);
        cr_assert_eq(dataloader_init(&ref, pattern, 2, 4, 0, 1, shuffle, 11), 0);
        for (int i = 0; i < 3; i++) { cr_assert_eq(dataloader_next_batch(&dl), 0); cr_assert_eq(dataloader_next_batch(&ref), 0); }
        DataLoaderState bad_shard = {0, 3, 0};
        cr_assert_eq(dataloader_set_state(&dl, &bad_shard), -1);
        cr_assert(strstr(llmc_errmsg(), "shard") != NULL, "message: %s", llmc_errmsg());
        DataLoaderState bad_batch = {5, 0, 11};  // no shard has more than 11 chunks
        cr_assert_eq(dataloader_set_state(&dl, &bad_batch), -1);
        cr_assert(strstr(llmc_errmsg(), "batch 11") != NULL, "message: %s", llmc_errmsg());
        // a rejected state leaves the loader where it was, shuffle order included
        DataLoaderState st;
        dataloader_get_state(&dl, &st);
        cr_assert(st.epoch == 0 && st.shard == 0 && st.batch == 3);
        for (int i = 0; i < 23; i++) {
            cr_assert_eq(dataloader_next_batch(&dl), 0);
            cr_assert_eq(dataloader_next_batch(&ref), 0);
            cr_assert_eq(memcmp(dl.inputs, ref.inputs, 8 * sizeof(int)), 0);
        }
        dataloader_free(&dl);
        dataloader_free(&ref);
    }
}

// ----------------------------------------------------------------------------
// errors: -1 and a message naming the file

static void expect_init_error(const char* pattern, size_t B, size_t T, int rank, int nproc, const char* must1,
                              const char* must2) {
    DataLoader dl;
    cr_assert_eq(dataloader_init(&dl, pattern, B, T, rank, nproc, 0, 0), -1, "init should fail");
    const char* msg = llmc_errmsg();
    if (must1) { cr_assert(strstr(msg, must1) != NULL, "message \"%s\" lacks \"%s\"", msg, must1); }
    if (must2) { cr_assert(strstr(msg, must2) != NULL, "message \"%s\" lacks \"%s\"", msg, must2); }
    dataloader_free(&dl);  // safe after a failed init
}

Test(dataloader, error_no_match) {
    char pattern[512];
    snprintf(pattern, sizeof(pattern), "%s/nothing_*.bin", tmpdir);
    expect_init_error(pattern, 2, 4, 0, 1, pattern, "no file matches");
}

Test(dataloader, error_bad_magic) {
    char path[512];
    shard_write_raw(path, "shard_000.bin", 12345, 1, 100, 0, 100);
    expect_init_error(path, 2, 4, 0, 1, path, "magic");
}

Test(dataloader, error_bad_version) {
    char path[512];
    shard_write_raw(path, "shard_000.bin", 20240520, 2, 100, 0, 100);
    expect_init_error(path, 2, 4, 0, 1, path, "version");
}

Test(dataloader, error_truncated_header) {
    char path[512];
    snprintf(path, sizeof(path), "%s/shard_000.bin", tmpdir);
    FILE* fp = fopen(path, "wb");
    cr_assert_not_null(fp);
    uint8_t part[100] = {0};
    put_i32le(part, 20240520);
    fwrite(part, 1, sizeof(part), fp);
    fclose(fp);
    expect_init_error(path, 2, 4, 0, 1, path, "truncated");
}

Test(dataloader, error_count_larger_than_file) {
    char path[512];
    shard_write_raw(path, "shard_000.bin", 20240520, 1, 500, 0, 400);
    expect_init_error(path, 2, 4, 0, 1, path, "truncated");
}

Test(dataloader, error_size_mismatch) {
    char path[512];
    shard_write_raw(path, "shard_000.bin", 20240520, 1, 400, 0, 500);
    expect_init_error(path, 2, 4, 0, 1, path, "size mismatch");
}

Test(dataloader, error_shard_shorter_than_global_batch) {
    // nproc*B*T+1 = 2*2*16+1 = 65: 64 tokens fail, 65 tokens make one chunk
    char path[512];
    shard_write(path, "shard_000.bin", 0, 64);
    expect_init_error(path, 2, 16, 0, 2, path, "has 64 tokens");
    expect_init_error(path, 2, 16, 1, 2, "= 65", "fewer than one global batch");
    shard_write(path, "shard_000.bin", 0, 65);
    DataLoader dl;
    cr_assert_eq(dataloader_init(&dl, path, 2, 16, 1, 2, 0, 0), 0, "%s", llmc_errmsg());
    cr_assert_eq(dataloader_num_batches(&dl), 1);
    dataloader_free(&dl);
}

Test(dataloader, error_names_the_bad_shard_among_good_ones) {
    char path[512], bad[512], pattern[512];
    shard_write(path, "shard_000.bin", 0, 300);
    shard_write_raw(bad, "shard_001.bin", 20240520, 1, 300, 1, 299);
    shard_write(path, "shard_002.bin", 2, 300);
    shard_pattern(pattern);
    expect_init_error(pattern, 2, 4, 0, 1, bad, "truncated");
}

Test(dataloader, error_bad_arguments) {
    char path[512];
    shard_write(path, "shard_000.bin", 0, 300);
    expect_init_error(path, 2, 4, 2, 2, "rank 2", NULL);
    expect_init_error(path, 2, 4, -1, 2, "rank -1", NULL);
    expect_init_error(path, 0, 4, 0, 1, "B=0", NULL);
    expect_init_error(path, 2, 0, 0, 1, "T=0", NULL);
    expect_init_error(path, 2, 4, 0, 0, "nproc=0", NULL);
}

Test(dataloader, error_io_during_next_batch) {
    // the shard shrinks after init: the read fails with -1 naming the file, position kept
    char path[512];
    shard_write(path, "shard_000.bin", 0, 300);
    DataLoader dl;
    cr_assert_eq(dataloader_init(&dl, path, 2, 4, 0, 1, 0, 0), 0, "%s", llmc_errmsg());
    cr_assert_eq(dataloader_next_batch(&dl), 0);
    cr_assert_eq(truncate(path, 1024 + 2 * 10), 0);
    cr_assert_eq(dataloader_next_batch(&dl), -1);
    cr_assert(strstr(llmc_errmsg(), path) != NULL, "message: %s", llmc_errmsg());
    DataLoaderState st;
    dataloader_get_state(&dl, &st);
    cr_assert_eq(st.batch, 1, "a failed read does not advance");
    dataloader_free(&dl);
}

Test(dataloader, error_token_id_past_vocab) {
    // tokens are 7*i: with a vocabulary of 100, batch 0 (tokens 0..8, ids up to 56) is
    // good but token 15, in batch 1, is 105. The whole shard is checked when the loader
    // first opens it, so already the first batch fails, naming token 15; the position kept
    char path[512];
    shard_write(path, "shard_000.bin", 0, 300);
    DataLoader dl;
    cr_assert_eq(dataloader_init(&dl, path, 2, 4, 0, 1, 0, 0), 0, "%s", llmc_errmsg());
    dataloader_set_vocab(&dl, 100);
    cr_assert_eq(dataloader_next_batch(&dl), -1);
    cr_assert(strstr(llmc_errmsg(), "token 15 (byte offset 1054) is 105, not below the model's vocabulary size 100") != NULL,
              "message: %s", llmc_errmsg());
    cr_assert(strstr(llmc_errmsg(), path) != NULL, "message: %s", llmc_errmsg());
    DataLoaderState st;
    dataloader_get_state(&dl, &st);
    cr_assert_eq(st.batch, 0, "a bad id does not advance");
    dataloader_set_vocab(&dl, 7 * 299 + 1);  // the largest id of the shard: now every id is below it
    cr_assert_eq(dataloader_next_batch(&dl), 0, "%s", llmc_errmsg());
    cr_assert_eq(dataloader_next_batch(&dl), 0, "%s", llmc_errmsg());
    cr_assert_eq(dl.inputs[7], 7 * 15, "batch 1 holds token 15");
    dataloader_free(&dl);
}
