/*
 The trainer's model against the PyTorch float64 reference (test/e2e/ref_gpt2.py).

   /usr/bin/python3 test/e2e/ref_gpt2.py DIR      writes DIR/model.bin, DIR/train.bin, DIR/ref.bin
   build/test_gpt2 DIR

 Uses the trainer's own model code (llm.c's test idiom: #define TESTING and include the
 trainer, whose main() is then left out): gpt2_source_open, gpt2_build,
 gpt2_alloc_activations, gpt2_forward, gpt2_backward inside the engine's passes, and the
 engine's zero_step (global norm, clipping, AdamW) at stage 0 on one process, exactly as
 the training loop does.
 No MPI function is called, so no mpirun is needed.

 Checks (one line each; ref.bin's format is documented in test/e2e/ref_gpt2.py):
   - logits (B,T,Vp), all Vp columns (the padded ones are lnf @ wte[V..Vp-1]^T), and the
     probabilities of the padded columns, which must be exactly 0
   - the mean loss
   - the gradient of every parameter tensor: 16 kinds, the 12 block kinds per layer. The
     C gradients are unit-major (llmc/gpt2.h); gpt2_tensor_ranges maps each tensor to its
     place, the reference is in llm.c file order. Rows V..Vp-1 of dwte must be exactly 0.
   - the same gradients with recompute 0 and 2 (the trainer default, used above, is 1),
     with gradient accumulation (two backward calls with loss_scale 0.5), and the logits of
     a shorter forward (T/2: by causality the first T/2 positions are unchanged)
   - the loss and the same gradients with the classifier in vocabulary tiles (--vocab-tile)
     of 1, 7 (dividing neither V=211 nor Vp=256, a last tile of padding only) and Vp (one
     tile), and the tiled forward without targets: each sequence's last position's
     probabilities against the softmax of the reference logits
   - 10 AdamW steps on the same batch (lr 1e-3, weight decay 0.1, clip 1.0): the loss
     before each update and the global gradient norm of each step

 Tolerances. The C code computes in fp32, the reference in float64, so the C result is
 off by the fp32 rounding accumulated through the network: not zero, and not something
 one can bound tightly by hand. ref_gpt2.py measures it: it runs the same computation in
 PyTorch float32 and stores, per quantity, d = max |fp32 - fp64|. Measured (this model,
 seed 20240917): logits 2.2e-6 (max |logit| 3.4, i.e. 6e-7 relative), loss 1.9e-7,
 gradients 2e-9 .. 2e-8 (1e-7 .. 8e-7 relative to each tensor's largest element), step
 losses 2e-8 .. 6e-7, grad norms 8e-9 .. 3e-7. A correct fp32 implementation differs from
 PyTorch's only in the order of the same roundings (BLAS blocking, summation order), so its
 error is of the same size as d up to a small random factor. The test accepts
     tol = max(TOL_MULT * d, TOL_FLOOR_ULPS * 2^-24 * max |reference|)
 with TOL_MULT = 10 (the spread between two fp32 orderings is a factor of a few; 10 leaves
 margin without going near bug territory) and a floor of TOL_FLOOR_ULPS = 16 fp32 units of
 roundoff of the tensor's largest element (for the quantities where PyTorch's fp32 happened
 to land almost exactly on the fp64 value, e.g. a step loss 1.8e-8 off, below one ulp of
 the loss 4.8: the trainer's fp32 loss cannot do better than half an ulp, 2.4e-7). The
 resulting tolerances are ~1e-6 .. 6e-6 relative; a real bug (wrong index, missing term,
 wrong constant, padded columns in the softmax, wrong bias correction) moves these
 quantities by 1e-4 .. 1 relative, orders of magnitude above. Exact properties (padded
 probabilities and padded dwte rows are 0) are checked with tolerance 0.

 Build: make build/test_gpt2 (the program links the library, build/lib/opt/lib.a)
*/
#define TESTING
#include "train_gpt2_zero3.c"
#include "zero3/engine.h"   // zero_engine_state
#include "zero3/util.h"     // zero_error, zero_errmsg, zero_now_ms
#include "llmc/utils.h"     // llmc_error, llmc_errmsg, the checked wrappers

#define REF_MAGIC 20240917
#define TOL_MULT 10.0
#define TOL_FLOOR_ULPS 16.0
#define FP32_EPS 5.9604644775390625e-08  // 2^-24, unit roundoff of fp32

// the host engine behind the model's interface: its stage-0 gradient buffer is what the
// test compares
static ZeroHost* host_engine(const GPT2* m) { return (ZeroHost*)zero_engine_state(m->zero); }

static int num_passed = 0, num_failed = 0;

static void check(const char* name, double err, double tol) {
    int ok = err <= tol;  // a NaN error fails
    printf("%-34s max abs err %.3e  tol %.3e  %s\n", name, err, tol, ok ? "OK" : "FAIL");
    if (ok) { num_passed++; } else { num_failed++; }
}

static double tolerance(double d, double ref_max) {
    double a = TOL_MULT * d, b = TOL_FLOOR_ULPS * FP32_EPS * ref_max;
    return a > b ? a : b;
}

static double max_abs_d(const double* x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) { if (fabs(x[i]) > m) { m = fabs(x[i]); } }
    return m;
}

// max |a - b| over n, a float (C) and b double (reference); NaN propagates as a failure
static double max_err(const float* a, const double* b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= m)) { m = e; }  // also picks up NaN
    }
    return m;
}

static void read_exact(void* dst, size_t size, size_t n, FILE* fp, const char* what) {
    if (fread(dst, size, n, fp) != n) {
        fprintf(stderr, "error: ref.bin is truncated (reading %s)\n", what);
        exit(EXIT_FAILURE);
    }
}

static double* read_doubles(size_t n, FILE* fp, const char* what) {
    double* p = (double*)mallocCheck((n ? n : 1) * sizeof(double));
    read_exact(p, sizeof(double), n, fp, what);
    return p;
}

typedef struct {
    int B, T, V, Vp, L, NH, C, maxT, nsteps, num_tensors;
    size_t num_params;
    double lr, wd, clip;
    int *inputs, *targets;
    double *logits, loss, *grads, *step_loss, *step_norm;
    double err_logits, err_loss, *err_grads, *err_step_loss, *err_step_norm;
} Ref;

static void read_ref(const char* path, Ref* r) {
    FILE* fp = fopen(path, "rb");
    if (fp == NULL) { fprintf(stderr, "error: cannot open %s\n", path); exit(EXIT_FAILURE); }
    int32_t h[256];
    read_exact(h, sizeof(int32_t), 256, fp, "header");
    if (h[0] != REF_MAGIC || h[1] != 1) {
        fprintf(stderr, "error: %s is not a ref.bin of test/e2e/ref_gpt2.py (magic %d version %d)\n", path, h[0], h[1]);
        exit(EXIT_FAILURE);
    }
    r->B = h[2]; r->T = h[3]; r->V = h[4]; r->Vp = h[5]; r->L = h[6]; r->NH = h[7]; r->C = h[8];
    r->maxT = h[9]; r->nsteps = h[10]; r->num_params = (size_t)h[11]; r->num_tensors = h[12];
    double hyper[8];
    read_exact(hyper, sizeof(double), 8, fp, "hyper");
    r->lr = hyper[0]; r->wd = hyper[1]; r->clip = hyper[2];
    if (hyper[3] != 0.9 || hyper[4] != 0.95 || hyper[5] != 1e-8) {
        fprintf(stderr, "error: ref.bin uses betas/eps the trainer does not\n");
        exit(EXIT_FAILURE);
    }
    size_t BT = (size_t)r->B * r->T;
    r->inputs = (int*)mallocCheck(BT * sizeof(int));
    r->targets = (int*)mallocCheck(BT * sizeof(int));
    read_exact(r->inputs, sizeof(int32_t), BT, fp, "inputs");
    read_exact(r->targets, sizeof(int32_t), BT, fp, "targets");
    r->logits = read_doubles(BT * r->Vp, fp, "logits");
    read_exact(&r->loss, sizeof(double), 1, fp, "loss");
    r->grads = read_doubles(r->num_params, fp, "grads");
    r->step_loss = read_doubles(r->nsteps, fp, "step_loss");
    r->step_norm = read_doubles(r->nsteps, fp, "step_norm");
    read_exact(&r->err_logits, sizeof(double), 1, fp, "err_logits");
    read_exact(&r->err_loss, sizeof(double), 1, fp, "err_loss");
    r->err_grads = read_doubles(r->num_tensors, fp, "err_grads");
    r->err_step_loss = read_doubles(r->nsteps, fp, "err_step_loss");
    r->err_step_norm = read_doubles(r->nsteps, fp, "err_step_norm");
    char extra;
    if (fread(&extra, 1, 1, fp) != 0) { fprintf(stderr, "error: %s has trailing bytes\n", path); exit(EXIT_FAILURE); }
    fclose(fp);
}

// The tensors in llm.c file order (kind, then layer), each with where it lives in the C
// unit-major buffer and where its reference gradient starts in file order.
typedef struct { char name[32]; size_t c_off, ref_off, size; int kind, index; } FileTensor;

static int file_tensors(const GPT2* m, FileTensor* out) {
    const GPT2Config* c = &m->config;
    int nt = gpt2_num_tensors(c), n = 0;
    TensorRange* tensors = (TensorRange*)mallocCheck(nt * sizeof(TensorRange));
    gpt2_tensor_ranges(c, tensors);
    size_t ref_off = 0;
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        int nl = gpt2_is_block_kind(k) ? c->num_layers : 1;
        for (int l = 0; l < nl; l++) {
            int found = -1;
            for (int i = 0; i < nt; i++) {
                if (tensors[i].kind == k && (tensors[i].layer == (gpt2_is_block_kind(k) ? l : -1))) { found = i; }
            }
            if (found < 0) { fprintf(stderr, "error: no tensor range for %s layer %d\n", gpt2_param_names[k], l); exit(EXIT_FAILURE); }
            TensorRange r = tensors[found];
            FileTensor* f = &out[n];
            if (gpt2_is_block_kind(k)) { snprintf(f->name, sizeof(f->name), "%s[%d]", gpt2_param_names[k], l); }
            else { snprintf(f->name, sizeof(f->name), "%s", gpt2_param_names[k]); }
            f->c_off = host_engine(m)->plan.units[r.unit].full_offset + r.offset;  // stage 0: the full padded buffer
            f->ref_off = ref_off;
            f->size = r.size;
            f->kind = k;
            f->index = n;
            ref_off += r.size;
            n++;
        }
    }
    if (ref_off != m->num_params || n != nt) { fprintf(stderr, "error: tensor ranges do not cover the parameters\n"); exit(EXIT_FAILURE); }
    free(tensors);
    return n;
}

// per tensor: (error / tolerance) of m->grads against the reference; prints one line per
// tensor when verbose, else returns the worst ratio (a single summary check)
static double compare_grads(const GPT2* m, const Ref* r, const FileTensor* ft, int nt, const char* prefix, int verbose) {
    double worst = 0.0;
    for (int i = 0; i < nt; i++) {
        const double* ref = r->grads + ft[i].ref_off;
        size_t n = ft[i].size;
        if (ft[i].kind == P_WTE) { n = (size_t)r->V * r->C; }  // padding rows: checked apart
        double err = max_err(host_engine(m)->full_grads + ft[i].c_off, ref, n);
        double tol = tolerance(r->err_grads[i], max_abs_d(ref, n));
        if (verbose) {
            char name[64];
            snprintf(name, sizeof(name), "%sd%s", prefix, ft[i].name);
            check(name, err, tol);
        }
        double ratio = err / tol;
        if (!(ratio <= worst)) { worst = ratio; }
    }
    return worst;
}

// dwte rows V..Vp-1 must be exactly zero: the padded columns take no part in the loss
static double padded_dwte(const GPT2* m, const Ref* r, const FileTensor* ft) {
    const float* g = host_engine(m)->full_grads + ft[0].c_off + (size_t)r->V * r->C;
    double worst = 0.0;
    for (size_t i = 0; i < (size_t)(r->Vp - r->V) * r->C; i++) {
        double e = fabs(g[i]);
        if (!(e <= worst)) { worst = e; }
    }
    return worst;
}

// one training micro-step as the trainer makes it: the forward and the backward in one pass
static void train_pass(GPT2* m, const Ref* r, float loss_scale, int last_micro) {
    zeroCheck(zero_begin(m->zero, ZERO_PASS_TRAIN, last_micro));
    gpt2_forward(m, r->inputs, r->targets, r->B, r->T);
    gpt2_backward(m, r->inputs, r->targets, r->B, r->T, loss_scale);
    zeroCheck(zero_end(m->zero));
}

static void build(GPT2* m, const char* model_path, const Ref* r, int recompute, int vocab_tile) {
    GPT2Source source;
    if (gpt2_source_open(&source, model_path) != 0) {
        fprintf(stderr, "error: %s\n", llmc_errmsg());
        exit(EXIT_FAILURE);
    }
    GPT2Config config = source.config;
    if (config.vocab_size != r->V || config.padded_vocab_size != r->Vp || config.num_layers != r->L ||
        config.num_heads != r->NH || config.channels != r->C || config.max_seq_len != r->maxT) {
        fprintf(stderr, "error: %s and ref.bin describe different models\n", model_path);
        exit(EXIT_FAILURE);
    }
    // one process, stage 0: the engine holds the full parameters and gradients
    ZeroConfig zc;
    zero_config_defaults(&zc);
    ZeroModel spec;
    gpt2_engine_model(&config, &spec);
    ZeroInit in;
    memset(&in, 0, sizeof(in));
    in.cfg = &zc;
    in.model = &spec;
    in.fill = trainer_fill;  // the trainer's: the engine reads the file's ranges
    in.fill_ctx = &source;
    in.beta1 = 0.9f; in.beta2 = 0.95f; in.eps = 1e-8f;
    in.comm = MPI_COMM_SELF;
    if (gpt2_build(m, &config, &in) != 0) {
        fprintf(stderr, "error: %s\n", zero_errmsg());
        exit(EXIT_FAILURE);
    }
    gpt2_engine_model_free(&spec);
    gpt2_source_close(&source);
    if (m->num_params != r->num_params) { fprintf(stderr, "error: parameter count differs from ref.bin\n"); exit(EXIT_FAILURE); }
    gpt2_alloc_activations(m, r->B, r->T, recompute, vocab_tile);
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR   (DIR written by test/e2e/ref_gpt2.py)\n", argv[0]);
        return 2;
    }
    char model_path[4096], ref_path[4096];
    snprintf(model_path, sizeof(model_path), "%s/model.bin", argv[1]);
    snprintf(ref_path, sizeof(ref_path), "%s/ref.bin", argv[1]);
    MPI_Init(&argc, &argv);  // the engine's communicator; one process, no mpirun needed
    char blas_note[256];
    if (blas_select_kernels(blas_note, sizeof(blas_note))) { printf("note: %s\n", blas_note); }  // the trainer's kernels
    Ref r;
    read_ref(ref_path, &r);
    int B = r.B, T = r.T, V = r.V, Vp = r.Vp;
    size_t BT = (size_t)B * T;
    char name[64];

    // ---- forward and backward, recompute 1 (what the CPU trainer takes for its default -r -1)
    GPT2 m;
    build(&m, model_path, &r, 1, 0);
    int nt = gpt2_num_tensors(&m.config);
    if (nt != r.num_tensors) { fprintf(stderr, "error: tensor count differs from ref.bin\n"); return EXIT_FAILURE; }
    FileTensor* ft = (FileTensor*)mallocCheck(nt * sizeof(FileTensor));
    file_tensors(&m, ft);

    zeroCheck(zero_begin(m.zero, ZERO_PASS_TRAIN, 1));
    gpt2_forward(&m, r.inputs, r.targets, B, T);
    check("logits (B,T,Vp)", max_err(m.acts.logits, r.logits, BT * Vp), tolerance(r.err_logits, max_abs_d(r.logits, BT * Vp)));
    double pad_prob = 0.0;
    for (size_t i = 0; i < BT; i++) {
        for (int v = V; v < Vp; v++) {
            double p = fabs(m.acts.probs[i * Vp + v]);
            if (!(p <= pad_prob)) { pad_prob = p; }
        }
    }
    check("probs of padded columns == 0", pad_prob, 0.0);
    check("loss", fabs((double)m.mean_loss - r.loss), tolerance(r.err_loss, fabs(r.loss)));

    gpt2_backward(&m, r.inputs, r.targets, B, T, 1.0f);
    zeroCheck(zero_end(m.zero));
    compare_grads(&m, &r, ft, nt, "", 1);
    check("dwte padded rows == 0", padded_dwte(&m, &r, ft), 0.0);

    // gradient accumulation: two half-weighted backward passes add up to one
    zero_host_clear_grads(host_engine(&m));
    train_pass(&m, &r, 0.5f, 0);
    train_pass(&m, &r, 0.5f, 1);
    check("grads, 2 x loss_scale 0.5 (err/tol)", compare_grads(&m, &r, ft, nt, "", 0), 1.0);

    // a shorter sequence in the same activations: the first T/2 positions are unchanged
    {
        int Th = T / 2;
        int* in_h = (int*)mallocCheck((size_t)B * Th * sizeof(int));
        double* ref_h = (double*)mallocCheck((size_t)B * Th * Vp * sizeof(double));
        for (int b = 0; b < B; b++) {
            memcpy(in_h + (size_t)b * Th, r.inputs + (size_t)b * T, Th * sizeof(int));
            memcpy(ref_h + (size_t)b * Th * Vp, r.logits + (size_t)b * T * Vp, (size_t)Th * Vp * sizeof(double));
        }
        zeroCheck(zero_begin(m.zero, ZERO_PASS_FORWARD, 1));
        gpt2_forward(&m, in_h, NULL, B, Th);
        zeroCheck(zero_end(m.zero));
        snprintf(name, sizeof(name), "logits, forward with T=%d", Th);
        check(name, max_err(m.acts.logits, ref_h, (size_t)B * Th * Vp), tolerance(r.err_logits, max_abs_d(r.logits, BT * Vp)));
        free(in_h);
        free(ref_h);
    }

    // the other recompute modes give the same gradients
    for (int rc = 0; rc <= 2; rc += 2) {
        GPT2 mr;
        build(&mr, model_path, &r, rc, 0);
        train_pass(&mr, &r, 1.0f, 1);
        snprintf(name, sizeof(name), "grads, recompute %d (err/tol)", rc);
        check(name, compare_grads(&mr, &r, ft, nt, "", 0), 1.0);
        gpt2_free(&mr);
    }

    // the classifier in vocabulary tiles: the same loss and gradients; without targets, the
    // last positions' probabilities (what sampling reads)
    for (int k = 0; k < 3; k++) {
        int tile = k == 0 ? 1 : k == 1 ? 7 : Vp;
        GPT2 mt;
        build(&mt, model_path, &r, 1, tile);
        train_pass(&mt, &r, 1.0f, 1);
        snprintf(name, sizeof(name), "loss, vocab tile %d", tile);
        check(name, fabs((double)mt.mean_loss - r.loss), tolerance(r.err_loss, fabs(r.loss)));
        snprintf(name, sizeof(name), "grads, vocab tile %d (err/tol)", tile);
        check(name, compare_grads(&mt, &r, ft, nt, "", 0), 1.0);
        zeroCheck(zero_begin(mt.zero, ZERO_PASS_FORWARD, 1));
        gpt2_forward(&mt, r.inputs, NULL, B, T);
        zeroCheck(zero_end(mt.zero));
        // softmax of the reference's last-position logits; an fp32 probability is within a
        // few ulp of itself plus the logits' error (d) times its derivative (<= 1/4)
        double worst = 0.0, tol = tolerance(r.err_logits, 1.0);
        for (int b = 0; b < B; b++) {
            const double* x = r.logits + ((size_t)b * T + T - 1) * Vp;
            double mx = x[0], sum = 0.0;
            for (int v = 1; v < V; v++) { if (x[v] > mx) { mx = x[v]; } }
            for (int v = 0; v < V; v++) { sum += exp(x[v] - mx); }
            for (int v = 0; v < Vp; v++) {
                double ref = v < V ? exp(x[v] - mx) / sum : 0.0;
                double err = fabs((double)mt.acts.probs[(size_t)b * Vp + v] - ref);
                if (!(err <= worst)) { worst = err; }
            }
        }
        snprintf(name, sizeof(name), "last-position probs, vocab tile %d", tile);
        check(name, worst, tol);
        gpt2_free(&mt);
    }

    // ---- training: the trainer's step, on the same batch, from the initial parameters
    gpt2_free(&m);
    build(&m, model_path, &r, 1, 0);
    for (int step = 0; step < r.nsteps; step++) {
        train_pass(&m, &r, 1.0f, 1);
        float loss = m.mean_loss;
        // the engine's step: global norm, clipping, AdamW, as in training
        ZeroStep st = {(float)r.lr, (float)r.wd, (float)r.clip, step + 1, 0, 0, 0.0f};  // no -sg limit
        ZeroStats zs;
        if (zero_step(m.zero, &st) != 0 || zero_stats(m.zero, &zs) != 0) {
            fprintf(stderr, "error: %s\n", zero_errmsg());
            return EXIT_FAILURE;
        }
        float norm = zs.norm;
        snprintf(name, sizeof(name), "step %d loss", step);
        check(name, fabs((double)loss - r.step_loss[step]), tolerance(r.err_step_loss[step], fabs(r.step_loss[step])));
        snprintf(name, sizeof(name), "step %d grad norm", step);
        check(name, fabs((double)norm - r.step_norm[step]), tolerance(r.err_step_norm[step], fabs(r.step_norm[step])));
    }
    gpt2_free(&m);
    free(ft);

    printf("%d passed, %d failed\n", num_passed, num_failed);
    MPI_Finalize();
    return num_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
