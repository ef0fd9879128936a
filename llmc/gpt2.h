/*
 The GPT-2 / GPT-3 model description: configuration, descriptors (d12, gpt3:c768),
 the parameter layout and the units' use schedule, llm.c model files, and random init.
 No compute here: the forward and backward live in the trainer, where the ZeRO hooks are
 woven in.

 Parameter layout. llm.c's file stores the 16 parameter kinds one after another,
 each kind for all layers at once (all ln1w, then all ln1b, ...). ZeRO partitions by
 *layer unit* instead, so in memory the parameters are unit-major:

   unit 0        wte (Vp, C), wpe (maxT, C)                     the embedding
   unit 1 + l    ln1w, ln1b, qkvw, qkvb, attprojw, attprojb,
                 ln2w, ln2b, fcw, fcb, fcprojw, fcprojb        transformer block l
   unit L + 1    lnfw (C), lnfb (C)                            the final layernorm

 Each unit is one contiguous range of the flat buffer, so gathering a unit is one
 collective into one buffer. The file reader and writer permute between the two; the
 reader and the random init make any range of a unit alone (a rank's shard), never the
 whole model.
*/
#ifndef LLMC_GPT2_H
#define LLMC_GPT2_H

#include <stdio.h>    // FILE, fwrite, snprintf
#include <stdint.h>   // int32_t, uint16_t, uint32_t
#include <string.h>   // strcmp, strncmp, memcpy
#include <stddef.h>   // size_t

#ifdef __cplusplus
extern "C" {
#endif

#define GPT2_MODEL_MAGIC 20240326
#define GPT2_MODEL_VERSION_FP32 3
#define GPT2_MODEL_VERSION_BF16 5
#define GPT2_VOCAB_SIZE 50257
#define GPT2_PADDED_VOCAB_SIZE 50304  // 50257 rounded up to a multiple of 128

typedef struct {
    int max_seq_len;       // maxT: 1024 for GPT-2, 2048 for GPT-3
    int vocab_size;        // V: 50257
    int padded_vocab_size; // Vp: V padded for aligned matmuls; rows V..Vp-1 of wte are unused
    int num_layers;        // L
    int num_heads;         // NH
    int channels;          // C
} GPT2Config;

// the 16 parameter kinds, in llm.c's file order
enum {
    P_WTE, P_WPE,
    P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
    P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB,
    P_LNFW, P_LNFB,
    NUM_PARAM_KINDS
};
#define NUM_BLOCK_TENSORS 12  // P_LN1W .. P_FCPROJB, the tensors of one block

static const char* const gpt2_param_names[NUM_PARAM_KINDS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

// weight decay applies to the matrices and embeddings only, not to biases and norms
static const int gpt2_param_decay[NUM_PARAM_KINDS] = {
    1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};

// elements of one tensor of each kind: per layer for the block kinds
void gpt2_param_sizes(const GPT2Config* c, size_t sizes[NUM_PARAM_KINDS]);

static inline int gpt2_is_block_kind(int k) { return k >= P_LN1W && k <= P_FCPROJB; }

// ----------------------------------------------------------------------------
// units

static inline int gpt2_num_units(const GPT2Config* c) { return c->num_layers + 2; }

// elements in unit u
size_t gpt2_unit_size(const GPT2Config* c, int u);

// element offset of unit u in the unpadded flat buffer (u == num_units gives the total)
size_t gpt2_unit_offset(const GPT2Config* c, int u);

static inline size_t gpt2_num_params(const GPT2Config* c) {
    return gpt2_unit_offset(c, gpt2_num_units(c));
}

// The order in which the forward and backward use the units. Forward: the embedding,
// the blocks, the final layernorm, then the embedding again as the classifier (tied
// weights). Backward: the classifier (adjacent to its forward use, so never gathered
// twice there), the final layernorm, the blocks in reverse. The encoder's backward
// needs only the token ids, not wte, so it is not a use. Whether wte stays gathered
// from the encoder to the classifier is the schedule's reuse-distance rule.
int gpt2_schedule(const GPT2Config* c, int* out, int train);

// FLOPs of a training step per token at sequence length T (for MFU): 6 per parameter in a
// matmul (forward 2, backward 4), the matmul parameters being the 12 C^2 of each block's
// qkv, attproj, fc and fcproj weights plus the classifier's Vp x C (the padded columns are
// computed too), and 12 L T C for the attention's Q K^T and att V (forward + backward)
static inline double gpt2_flops_per_token(const GPT2Config* c, int T) {
    double C = c->channels, L = c->num_layers;
    double matmul_params = L * 12.0 * C * C + (double)c->padded_vocab_size * C;
    return 6.0 * matmul_params + 12.0 * L * T * C;
}

// A parameter tensor as the optimizer and the ZeRO engine see it: a range of one unit.
typedef struct {
    int kind;       // P_WTE ...
    int layer;      // block index, or -1 outside the blocks
    int unit;       // the unit that holds it
    size_t offset;  // element offset inside the unit
    size_t size;    // elements
    int decay;      // 1 if AdamW weight decay applies
} TensorRange;

static inline int gpt2_num_tensors(const GPT2Config* c) { return 4 + NUM_BLOCK_TENSORS * c->num_layers; }

// fills out[gpt2_num_tensors(c)] in unit order
void gpt2_tensor_ranges(const GPT2Config* c, TensorRange* out);

// [Note: units and files] A rank's shard is a range of one unit (zero3/plan.h), but an
// llm.c file is kind-major: one unit's range is up to NUM_BLOCK_TENSORS separate runs of
// the file. Partitioned init, load and save all walk a shard through these parts, so a
// rank touches only its own elements and never a whole-model buffer.
//
// One part of a unit's element range: n elements lying in one tensor (index `tensor` in
// gpt2_tensor_ranges' order, of `kind`, block `layer` or -1), starting at element `elem` of
// that tensor, at unit-local offset unit_off and at element file_off of a model file's body.
typedef struct { int tensor, kind, layer; size_t elem, unit_off, file_off, n; } Gpt2Part;

// the index (gpt2_tensor_ranges' order) of unit u's first tensor
static inline int gpt2_unit_first_tensor(const GPT2Config* c, int u) {
    if (u == 0) { return 0; }
    if (u == c->num_layers + 1) { return 2 + NUM_BLOCK_TENSORS * c->num_layers; }
    return 2 + NUM_BLOCK_TENSORS * (u - 1);
}

// The parts of unit u's elements [begin, end) (end <= gpt2_unit_size(c, u)), in unit order,
// empty ones left out: at most NUM_BLOCK_TENSORS. Returns how many were written to out.
int gpt2_unit_parts(const GPT2Config* c, int u, size_t begin, size_t end, Gpt2Part out[NUM_BLOCK_TENSORS]);

// Pointers into one unit's flat buffer; the same helpers serve parameters and gradients.
typedef struct { float *wte, *wpe; } EmbedTensors;
typedef struct {
    float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
    float *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} BlockTensors;
typedef struct { float *lnfw, *lnfb; } FinalTensors;

static inline EmbedTensors gpt2_embed_tensors(const GPT2Config* c, float* unit) {
    return (EmbedTensors){unit, unit + (size_t)c->padded_vocab_size * c->channels};
}

// where each tensor of a block starts inside the block's unit, in elements, indexed by
// kind - P_LN1W (the same for every block; the GPU trainer's views use it too)
static inline void gpt2_block_offsets(const GPT2Config* c, size_t off[NUM_BLOCK_TENSORS]) {
    size_t sizes[NUM_PARAM_KINDS];
    gpt2_param_sizes(c, sizes);
    size_t o = 0;
    for (int k = P_LN1W; k <= P_FCPROJB; k++) {
        off[k - P_LN1W] = o;
        o += sizes[k];
    }
}

static inline BlockTensors gpt2_block_tensors(const GPT2Config* c, float* unit) {
    size_t o[NUM_BLOCK_TENSORS];
    gpt2_block_offsets(c, o);
    BlockTensors t = {unit + o[0], unit + o[1], unit + o[2], unit + o[3], unit + o[4], unit + o[5],
                      unit + o[6], unit + o[7], unit + o[8], unit + o[9], unit + o[10], unit + o[11]};
    return t;
}

static inline FinalTensors gpt2_final_tensors(const GPT2Config* c, float* unit) {
    return (FinalTensors){unit, unit + c->channels};
}

// ----------------------------------------------------------------------------
// configuration: validation and descriptors

// 0 when every size of c is in range (what: the source, for the message); else -1
int gpt2_config_validate(const GPT2Config* c, const char* what);

// The GPT-3 family by channel width (Brown et al. 2020, table 2.1). Two entries of the
// paper's table cannot be built as written and are mended the way common
// reimplementations do: 1.3B lists 24 heads of 128 for 2048 channels (we use 16 heads of
// 128), and 13B lists 5140 channels (we use 5120 = 40 heads of 128).
typedef struct { int channels, layers, heads; const char* name; } GPT3Size;
static const GPT3Size gpt3_sizes[] = {
    {768, 12, 12, "125M"},   {1024, 24, 16, "350M"},  {1536, 24, 16, "760M"},
    {2048, 24, 16, "1.3B"},  {2560, 32, 32, "2.7B"},  {4096, 32, 32, "6.7B"},
    {5120, 40, 40, "13B"},   {12288, 96, 96, "175B"},
};

// "dN" or "gpt2:dN": GPT-2 family of depth N, maxT 1024. The published sizes take llm.c's
// widths (d6 384, d12 768 = 124M, d24 1024 = 350M, d36 1280 = 774M, d48 1600 = 1558M,
// and its d60, d72, d84); any other depth N gets N heads of 64 channels.
// "gpt3:cC": the GPT-3 size of channel width C, maxT 2048.
int gpt2_config_from_descriptor(const char* desc, GPT2Config* c);

// ----------------------------------------------------------------------------
// llm.c model files

// [Note: partitioned reads] A model file is never read whole: each rank reads the byte
// ranges of its own shard (gpt2_unit_parts maps a unit's elements to the file's), so no
// rank ever holds more than its shard of the model. gpt2_source_open checks the header and
// the size once; gpt2_source_read then reads, converts and checks any range of a unit.

// Where a model's initial parameters come from: an llm.c file open for reading (fd >= 0),
// or GPT-2's random init from a seed (fd < 0). path is the caller's string, kept for
// messages (it must outlive the source).
typedef struct {
    GPT2Config config;
    int fd;              // the open model file, or -1: random init
    size_t elem;         // bytes per parameter in the file: 4 (version 3, fp32) or 2 (version 5, bf16)
    uint64_t seed;       // random init
    const char* path;
} GPT2Source;

// a source of random init from seed for the model c
void gpt2_source_random(GPT2Source* s, const GPT2Config* c, uint64_t seed);

// closes a GPT2Source's file, if any (safe twice)
void gpt2_source_close(GPT2Source* s);

// Opens an llm.c model file (version 3 fp32 or version 5 bf16): its header must describe
// a valid model and the file's size exactly its parameters. Nothing of the body is read.
// On failure nothing stays open.
int gpt2_source_open(GPT2Source* s, const char* path);

// Unit u's parameters [begin, begin + n) (unit-local, unpadded, unit order) into out:
// read from the file, or made by the random init.
int gpt2_source_read(const GPT2Source* s, int u, size_t begin, size_t n, float* out);

// fp32 -> bf16 bits, rounded to nearest even as torch's .to(bfloat16) does (llm.c's
// Python writes its bf16 files that way); a NaN stays a NaN
static inline uint16_t gpt2_bf16_round(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof(bits));
    if ((bits & 0x7fffffffu) > 0x7f800000u) { return (uint16_t)((bits >> 16) | 0x40u); }  // a carry could make it infinite
    uint32_t lsb = (bits >> 16) & 1u;  // ties go to the even neighbour
    return (uint16_t)((bits + 0x7fffu + lsb) >> 16);
}

// writes n parameters as bf16 through a small buffer (no bf16 copy of the model); 1 if
// all were written
int gpt2_fwrite_bf16(const float* src, size_t n, FILE* fp);

// Writes n parameters at element file_off of a model file's body (fd: open for writing,
// the file already at its full size) as `version` stores them: fp32 as they are, bf16
// rounded through a small buffer. How each rank writes its own parts of one file
// (llmc/checkpoint.h). Returns 0, or -1 with errno.
int gpt2_pwrite_params(int fd, const float* src, size_t n, size_t file_off, int version);

// writes the 1024-byte header of a model file of `version`; 1 if it was written
int gpt2_fwrite_header(FILE* fp, const GPT2Config* c, int version);

// element offset of tensor r in a model file's body (kind-major: every tensor of a kind by
// layer, the kinds in llm.c's order)
size_t gpt2_file_offset(const GPT2Config* c, const TensorRange* r);

// Writes an llm.c model file from the unit-major buffer: version 3 (fp32), or version 5
// (bf16), the one llm.c's default (bf16) GPU trainer requires. Both have the same
// header (llm.c's reader takes maxT, V, L, NH, C and Vp from it) and the same kind-major
// order with wte padded to Vp rows; version 5 stores every parameter, layernorms
// included, as bf16. The file is written whole or not at all (AtomicFile).
int gpt2_write_model_version(const char* path, const GPT2Config* c, const float* params, int version);

// the version 3 (fp32) file: llm.c's CPU trainer and its fp32 GPU build read it
int gpt2_write_model(const char* path, const GPT2Config* c, const float* params);

#ifdef __cplusplus
}
#endif

#endif // LLMC_GPT2_H
