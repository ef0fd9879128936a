/*
 Multiple-choice evaluation (HellaSwag) in llm.c's eval file format: the file, how its
 examples are laid out in batches over the ranks, and how they are scored.

 File (little-endian), as llm.c's dev/data/hellaswag.py writes it:
   header: 256 int32; [0] = 20240522 (magic), [1] = 1 (version), [2] = number of
           examples, [3] = the longest example in bytes; the rest 0
   then each example as uint16:
     65535 (start of an example), its size in bytes (these fields included), its index
     in the file (0, 1, ...), the label (the correct completion's index), the number of
     completions K, then the context: its length and its tokens, then K times a
     completion: its length and its tokens.
 A completion is encoded with the space before it (" " + ending), the context without.

 Batches. An example takes K rows of a (B, T) batch, one per completion: the context, the
 completion right after it, the rest of the row padding (token 0). Rank r of `world`
 takes examples r, r + world, r + 2 world, ... and packs them in order, as many whole
 examples as fit in B rows. Every rank runs the same number of batches (the most any
 rank needs; at stage 3 each forward gathers from every rank), the surplus ones empty.

 Score (llm.c's acc_norm): a completion's loss is the mean of the per-position losses
 over its own tokens (position p predicts token p + 1, so the positions from the last
 context token to the completion's last but one); the completion with the lowest loss is
 the prediction (the first of equals), and the example counts as correct when that is
 the label.
*/
#ifndef LLMC_HELLASWAG_H
#define LLMC_HELLASWAG_H

#include <stdint.h>     // uint16_t
#include <stddef.h>     // size_t

#ifdef __cplusplus
extern "C" {
#endif

#define EVAL_MAGIC 20240522
#define EVAL_VERSION 1
#define EVAL_HEADER_INTS 256
#define EVAL_START 65535u   // the uint16 that opens every example

typedef struct {
    int n;              // examples
    int completions;    // all examples' completions together
    int* label;         // (n) the correct completion of each
    int* first;         // (n + 1) example i's completions are first[i] .. first[i+1]-1
    int* ctx_at;        // (n) where example i's context starts in tokens
    int* ctx_len;       // (n)
    int* comp_at;       // (completions) where each completion starts in tokens
    int* comp_len;      // (completions)
    uint16_t* tokens;   // every context's and completion's tokens
    int longest;        // the most tokens one row needs (context + completion)
} EvalSet;

// Reads and checks an eval file: magic, version, every example's fields and sizes, labels
// within their completions, ids below vocab_size, each row within T tokens and each
// example within B rows. 0, or -1 with llmc_errmsg() naming the file, the example and the
// problem. Safe to free after a failure.
int evalset_load(EvalSet* s, const char* path, int B, int T, int vocab_size);

void evalset_free(EvalSet* s);

// Writes an eval file whole or not at all (path.tmp renamed once complete): n examples,
// with label, first, ctx_at/ctx_len, comp_at/comp_len into tokens as in EvalSet. Checks
// what the format can hold (65535 examples, examples of under 64 KiB, ids below 65535).
int evalset_write(const EvalSet* s, const char* path);

// the batches every rank runs over the whole set at B rows (the same on every rank)
int evalset_num_batches(const EvalSet* s, int B, int world);

// Batch k of rank `rank` into inputs and targets (B, T): its examples' rows and padding.
// Returns how many examples it holds (0 for a surplus batch); their indices in ex.
int evalset_batch(const EvalSet* s, int B, int T, int rank, int world, int k, int* inputs, int* targets, int* ex);

// Scores of the examples ex[0..count) of a batch laid out by evalset_batch, from its
// per-position losses (B, T): the mean loss of each completion into scores[first[i] + j].
void evalset_score(const EvalSet* s, int T, const int* ex, int count, const float* losses, double* scores);

// the prediction of example i from its completions' scores: the lowest (the first of equals)
int evalset_predict(const EvalSet* s, int i, const double* scores);

#ifdef __cplusplus
}
#endif

#endif // LLMC_HELLASWAG_H
