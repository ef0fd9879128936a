#!/usr/bin/env bash
# Partitioned start-up (zero3/zero.h's [Note: partitioned init]): each rank makes or reads
# only its own shards of the model, and the model is the same whatever the layout.
#   init       the random init of d1 (--seed 7), written by a run of no steps (-x 0 -n 1:
#              the checkpoint of step 0, the fp32 master gathered), is byte for byte the
#              same at N = 1, 2, 4 and every stage, with the parameters on NVMe at stage 3,
#              and in the GPU trainer (emulated, fp32 and bf16 builds, device engine at N = 1
#              and 2 stage 3, the host-staged one at N = 2 stage 1); it has GPT-2's init
#              (checked in numpy: zero biases and padding rows, unit gains, std 0.02 and
#              0.02/sqrt(2L))
#   load       a model file (fp32, and bf16) loaded at N = 1, 2, 4, stages 0 and 3, each
#              rank reading its shards only: the model written back is the file byte for
#              byte (fp32), its values widened to fp32 (bf16, checked in numpy), and the
#              bf16 file again with --save-bf16 1; and in the emulated GPU trainer (device
#              engine, N = 2 stage 3), where a NaN in rank 1's shard stops both ranks with
#              its message
#   memory     N = 4 stage 3 on d4 (16.3M parameters, 65 MB in fp32; the wte unit 51 MB):
#              every rank's peak heap at start-up (build/alloc_peak.so) stays within its
#              shard states, one unit and its activations plus 8 MiB (see below). Measured
#              (2026-11-24): 70.7 MiB on every rank against a bound of 125.5 MiB; the start-up
#              before this one (rank 0 made the whole model and broadcast it) peaked at
#              180.8 MiB on rank 0 and fails it
# Ends with "N passed, N failed".
source "$(dirname "$0")/lib.sh"   # $tmp, ok/bad/finish, run, expect_error

GPU=${GPU:-build/train_gpt2_zero3_emu}
GPU32=${GPU32:-build/train_gpt2_zero3_emu_fp32}
PEAK=${PEAK:-build/alloc_peak.so}

$PY - "$tmp" <<'EOF'
import sys, numpy as np
d = sys.argv[1]
def shard(path, toks):
    h = np.zeros(256, dtype=np.int32); h[0] = 20240520; h[1] = 1; h[2] = len(toks)
    open(path, "wb").write(h.tobytes() + np.asarray(toks, dtype=np.uint16).tobytes())
shard(f"{d}/train.bin", np.random.RandomState(1).randint(0, 256, 4000))
# a model file of random values, V 256 padded to 320, 2 layers, 32 channels: fp32, and bf16
# (the top halves of other random fp32 values)
maxT, V, L, NH, C, Vp = 64, 256, 2, 2, 32, 320
n = Vp*C + maxT*C + L*(12*C*C + 13*C) + 2*C
p = np.random.RandomState(2).randn(n).astype(np.float32)
for version, body in ((3, p.tobytes()), (5, (p.view(np.uint32) >> 16).astype(np.uint16).tobytes())):
    h = np.zeros(256, dtype=np.int32); h[:8] = [20240326, version, maxT, V, L, NH, C, Vp]
    open(f"{d}/file_v{version}.bin", "wb").write(h.tobytes() + body)
p[Vp*C + 7] = np.nan  # wpe element 7: unit 0's element 10247, in rank 1's shard at 2 ranks (6144 a shard)
h[1] = 3
open(f"{d}/nan_v3.bin", "wb").write(h.tobytes() + p.tobytes())
EOF
D="-i $tmp/train.bin -j $tmp/train.bin -b 1 -t 8 -v 0 -s 0 -x 0 -n 1"

# start NAME N BIN ARGS...: a run of no steps on N ranks whose checkpoint of step 0 holds
# the initial model: $tmp/NAME.bin (the rest of the checkpoint removed)
start() {
    local name=$1 n=$2 bin=$3; shift 3
    rm -rf "$tmp/ck"
    if $MPIRUN -np "$n" $bin $D -o "$tmp/ck" "$@" > "$tmp/$name.log" 2>&1 && mv "$tmp/ck/model_00000000.bin" "$tmp/$name.bin"; then
        return 0
    fi
    echo "  ($name: $(grep -m1 -i error "$tmp/$name.log"))"
    return 1
}
# same NAME WANT WHAT: $tmp/NAME.bin is $tmp/WANT.bin byte for byte
same() {
    if cmp -s "$tmp/$1.bin" "$tmp/$2.bin"; then ok "$3"; else bad "$3: $1.bin differs from $2.bin"; fi
    rm -f "$tmp/$1.bin"
}

# ---------------------------------------------------------------------------
# init: one model at every layout
I="-e d1 --seed 7"
if start init_n1z0 1 $BIN $I -z 0; then
    $PY - "$tmp/init_n1z0.bin" <<'EOF' && ok "init: GPT-2's init (biases and padding 0, gains 1, std 0.02 and 0.02/sqrt(2L))" || bad "init: not GPT-2's init"
import sys, numpy as np
b = open(sys.argv[1], "rb").read()
h = np.frombuffer(b[:1024], dtype=np.int32); maxT, V, L, NH, C, Vp = h[2:8]
p = np.frombuffer(b[1024:], dtype=np.float32)
sizes = [Vp*C, maxT*C] + [L*s for s in (C, C, 3*C*C, 3*C, C*C, C, C, C, 4*C*C, 4*C, 4*C*C, C)] + [C, C]
k = dict(zip("wte wpe ln1w ln1b qkvw qkvb attprojw attprojb ln2w ln2b fcw fcb fcprojw fcprojb lnfw lnfb".split(),
             np.split(p, np.cumsum(sizes)[:-1])))
assert len(p) == sum(sizes)
for g in ("ln1w", "ln2w", "lnfw"): assert (k[g] == 1).all(), g
for z in ("ln1b", "qkvb", "attprojb", "ln2b", "fcb", "fcprojb", "lnfb"): assert (k[z] == 0).all(), z
wte = k["wte"].reshape(Vp, C)
assert (wte[V:] == 0).all() and (wte[:V] != 0).mean() > 0.999
# n samples: a sample std is within 5 standard errors (std / sqrt(2n)) of the truth
for name, std in (("wte", .02), ("wpe", .02), ("qkvw", .02), ("fcw", .02), ("attprojw", .02 / np.sqrt(2 * L)), ("fcprojw", .02 / np.sqrt(2 * L))):
    x = k[name] if name != "wte" else wte[:V].ravel()
    s = x.astype(np.float64).std()
    assert abs(s - std) < 5 * std / np.sqrt(2 * len(x)), (name, s, std)
    assert abs(x.mean()) < 5 * std / np.sqrt(len(x)), (name, x.mean())
EOF
    for n in 1 2 4; do
        for z in 0 1 2 3; do
            [ "$n$z" = 10 ] && continue
            start "init_n${n}z$z" $n $BIN $I -z $z && same "init_n${n}z$z" init_n1z0 "init: N=$n stage $z equals N=1 stage 0"
        done
    done
    start init_nvme 2 $BIN $I -z 3 --offload-optimizer nvme --offload-param nvme --nvme-path "$tmp" && \
        same init_nvme init_n1z0 "init: N=2 stage 3, parameters and optimizer on NVMe, equals N=1 stage 0"
    if [ -x "$GPU" ] && [ -x "$GPU32" ]; then
        export EMU_SEED=1
        start init_gpu32_n1 1 $GPU32 $I -z 3 --zero-backend device && same init_gpu32_n1 init_n1z0 "init: GPU trainer (fp32, emulated), device engine N=1 stage 3"
        start init_gpu32_n2 2 $GPU32 $I -z 3 --zero-backend device && same init_gpu32_n2 init_n1z0 "init: GPU trainer (fp32, emulated), device engine N=2 stage 3"
        start init_gpu_n2 2 $GPU $I -z 3 --zero-backend device && same init_gpu_n2 init_n1z0 "init: GPU trainer (bf16, emulated), device engine N=2 stage 3 (its fp32 master)"
        start init_gpu_host 2 $GPU $I -z 1 --zero-backend host && same init_gpu_host init_n1z0 "init: GPU trainer (bf16, emulated), host-staged engine N=2 stage 1"
    else
        bad "init: the emulated GPU trainers $GPU, $GPU32 are not built (make $GPU $GPU32)"
    fi
else
    bad "init: the N=1 stage 0 run"
fi

# ---------------------------------------------------------------------------
# load: every rank reads its shards only, and the model is the file
cp "$tmp/file_v3.bin" "$tmp/want_v3.bin"
cp "$tmp/file_v5.bin" "$tmp/want_v5.bin"
$PY - "$tmp/file_v5.bin" "$tmp/want_v5w.bin" <<'EOF'
import sys, numpy as np
b = open(sys.argv[1], "rb").read()
h = np.frombuffer(b[:1024], dtype=np.int32).copy(); h[1] = 3
w = (np.frombuffer(b[1024:], dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
open(sys.argv[2], "wb").write(h.tobytes() + w.tobytes())
EOF
for n in 1 2 4; do
    for z in 0 3; do
        start "load_v3_n${n}z$z" $n $BIN -e "$tmp/file_v3.bin" -z $z && same "load_v3_n${n}z$z" want_v3 "load: fp32 file at N=$n stage $z written back byte for byte"
        start "load_v5_n${n}z$z" $n $BIN -e "$tmp/file_v5.bin" -z $z && same "load_v5_n${n}z$z" want_v5w "load: bf16 file at N=$n stage $z is its values widened to fp32"
    done
done
start load_v5_bf16 4 $BIN -e "$tmp/file_v5.bin" -z 3 --save-bf16 1 && same load_v5_bf16 want_v5 "load: bf16 file at N=4 stage 3 written back as bf16 byte for byte"
if [ -x "$GPU32" ]; then
    expect_error "load: a NaN in rank 1's shard stops the GPU trainer (emulated, device engine) on every rank" \
        "nan_v3.bin: parameter wpe element 7 (byte offset $((1024 + 4 * (320 * 32 + 7)))) is nan, not a finite number (rank 1's shard)" \
        env EMU_SEED=1 timeout 300 $MPIRUN -np 2 $GPU32 $D -o "$tmp/ck_nan" -e "$tmp/nan_v3.bin" -z 3 --zero-backend device
    EMU_SEED=1 start load_gpu32 2 $GPU32 -e "$tmp/file_v3.bin" -z 3 --zero-backend device && \
        same load_gpu32 want_v3 "load: fp32 file in the GPU trainer (fp32, emulated), device engine N=2 stage 3, written back byte for byte"
fi

# ---------------------------------------------------------------------------
# memory: N=4 stage 3 on d4, -x 0 without a checkpoint (start-up only). Each rank's bound,
# from the model's shape (numpy, zero3/plan.h's padding: each unit to a multiple of
# 4 ranks x 64 floats) and the report's activations:
#   16 S     its fp32 shard of every unit (S elements) four times: parameters, gradients, m, v
#   4 U      one unit gathered (U: the largest padded unit, wte's), the most start-up holds
#   A        the activations (the report's "activations")
#   8 MiB    the rest of the heap: Open MPI, the data loader, the persistent units' buffers,
#            the tables (measured 3.3 MiB over 16 S + A on each rank)
# A start-up that makes the whole model on rank 0 exceeds it there by 65 MB (the model)
if [ -f "$PEAK" ]; then
    rm -rf "$tmp/peak"; mkdir -p "$tmp/peak"
    if $MPIRUN -np 4 -x ALLOC_PEAK_DIR="$tmp/peak" -x LD_PRELOAD="$PWD/$PEAK" $BIN -e d4 -z 3 \
            -i $tmp/train.bin -j $tmp/train.bin -b 1 -t 8 -v 0 -s 0 -x 0 --report "$tmp/peak.json" > "$tmp/peak.log" 2>&1; then
        $PY - "$tmp/peak" "$tmp/peak.json" <<'EOF' && ok "memory: every rank's start-up within its shard states, one unit and activations" || bad "memory: a rank's start-up heap exceeds its bound"
import sys, json
d, rep = sys.argv[1], json.load(open(sys.argv[2]))
C, L, V, Vp, maxT, N = 256, 4, 50257, 50304, 1024, 4
units = [Vp*C + maxT*C] + [12*C*C + 13*C] * L + [2*C]
q = N * 64
padded = [(u + q - 1) // q * q for u in units]
S, U = sum(p // N for p in padded), max(padded)
failed = False
for row in rep["memory"]["per_rank"]:
    r = row["rank"]
    got = dict(l.split() for l in open(f"{d}/rank_{r}.txt"))
    peak, largest = int(got["peak_live_bytes"]), int(got["largest_alloc_bytes"])
    bound = 16 * S + 4 * U + row["activations"] + 8 * 2**20
    print(f"  rank {r}: peak heap {peak / 2**20:.1f} MiB (largest allocation {largest / 2**20:.1f} MiB), bound {bound / 2**20:.1f} MiB "
          f"= 16 S {16 * S / 2**20:.1f} + 4 U {4 * U / 2**20:.1f} + activations {row['activations'] / 2**20:.1f} + 8")
    failed |= peak > bound
sys.exit(1 if failed else 0)
EOF
    else
        bad "memory: the N=4 stage 3 run ($(grep -m1 -i error "$tmp/peak.log"))"
    fi
else
    bad "memory: $PEAK is not built (make $PEAK)"
fi

finish
