#!/usr/bin/env bash
# Resuming anywhere (universal checkpoints, zero3/reshard.h) and ./checkpoint_tool, on the
# PyTorch reference's small model (test/e2e/ref_gpt2.py: L=2, C=64, V=211, units of odd
# padding at 3 ranks) with a token shard of our own:
#   resume      a checkpoint of step 3 resumed at another world size and/or ZeRO stage, with
#               or without offload, gives the losses of steps 4-6 of an uninterrupted run at
#               the new layout (same global batch): 2 -> 1 ranks (stage 1 -> 0, shuffled),
#               1 -> 4 ranks (stage 0 -> 3, accumulation 2 -> 1 through -d), 2 ranks stage
#               1 -> 3 (plain, optimizer offloaded to the host, everything on NVMe), 3 ranks
#               stage 3 on NVMe -> 2 ranks stage 2 (source offloaded, odd shards)
#   refusals    another -t, another global batch, shuffled chunks of another size, a missing
#               rank's file, a disk that fills while resharding: a message that says why
#               (the full disk: the temporary and the reason), a non-zero exit, the checkpoint's
#               files unchanged and no temporary left
#   version 1   engine sections of 64-byte shards (before the 256-byte plan) resumed at
#               their layout and at another, bit for bit as version 2's; another version,
#               or a header that does not match the layout, refused
#   tool        consolidate equals the trainer's model file byte for byte (fp32 from 2 ranks
#               at stage 1 and 2 ranks at stage 3, bf16 from 4 ranks at stage 3);
#               extract-optimizer's m and v equal the state file of a 1-rank stage-0
#               checkpoint, read here in Python; at one world size they do not depend on the
#               stage that saved them; get's tensors (master, m, v; NumPy files of their
#               shapes) equal consolidate's and extract-optimizer's, and its refusals; set
#               and reset-moments write verified copies (identity byte for byte; new values
#               read back, in the model file, resumed at 2 ranks and resharded at 1; the
#               device engine's bf16 compute copy rounded to nearest), and their refusals;
#               inspect names the world size, stage and positions
# Ends with "N passed, N failed".
source "$(dirname "$0")/lib.sh"   # $tmp, ok/bad/finish, run, losses, maxdiff, within, expect_error
TOOL=./checkpoint_tool

if ! $PY test/e2e/ref_gpt2.py "$tmp" 8 > "$tmp/ref.log" 2>&1; then cat "$tmp/ref.log"; echo "0 passed, 1 failed"; exit 1; fi
# a learnable shard (a successor rule 3 times in 4), long enough for 6 steps of 8 x 32 tokens
$PY - "$tmp/data.bin" <<'EOF'
import sys, numpy as np
rng = np.random.RandomState(2)
t = np.zeros(8192, dtype=np.int64)
for i in range(1, len(t)):
    t[i] = (t[i - 1] * 5 + 1) % 211 if rng.rand() < 0.75 else rng.randint(0, 211)
h = np.zeros(256, dtype=np.int32); h[:3] = [20240520, 1, len(t)]
with open(sys.argv[1], "wb") as f: f.write(h.tobytes()); f.write(t.astype(np.uint16).tobytes())
EOF
mkdir -p "$tmp/nvme"
M="-e $tmp/model.bin -i $tmp/data.bin -j $tmp/data.bin -t 32 -v 0 -s 0 -k constant -u 2 -l 1e-3 -c 0.1 --seed 7"
NVME="--offload-optimizer nvme --nvme-path $tmp/nvme --offload-param nvme --max-in-cpu 0"

# Tolerance of the losses after a resume at another layout: the first 3 steps ran at the
# old one, whose fp32 sums differ from the new one's in order only (sgemm over B/N rows,
# the sum over ranks, accumulation into shards): a few ulps per gradient, which 3 AdamW
# steps at lr 1e-3 turn into about 1e-6 on a loss of 5.4 (test_zero.sh measures the same
# between world sizes). 2e-6 relative (about 1e-5 absolute) holds that with room, while
# a wrong shard offset, a stale moment or a lost step moves the loss by 1e-3 or more.
RTOL=2e-6
maxrel() { $PY -c "
import sys
a=[float(x) for x in open(sys.argv[1])]; b=[float(x) for x in open(sys.argv[2])]
print(max(abs(x-y)/abs(y) for x,y in zip(a,b)) if len(a)==len(b) and a else 'length-mismatch')" "$1" "$2"; }

# resume_case NAME "OLD: ranks flags" "NEW: ranks flags": OLD to step 3 with a checkpoint,
# NEW resumed from it to 6, against NEW uninterrupted to 6
resume_case() {
    local name=$1 old_n=$2 old=$3 new_n=$4 new=$5
    rm -rf "$tmp/$name"
    if ! run "${name}_old" "$old_n" $M $old -x 3 -n 3 -o "$tmp/$name"; then bad "$name: the old run"; return 1; fi
    if ! run "${name}_res" "$new_n" $M $new -x 6 -n 3 -o "$tmp/$name" -y 1; then bad "$name: the resume"; return 1; fi
    if ! grep -q "resumed from .* at step 3 (saved by $old_n ranks)" "$tmp/${name}_res.log"; then bad "$name: did not resume"; return 1; fi
    if ! run "${name}_full" "$new_n" $M $new -x 6; then bad "$name: the uninterrupted run"; return 1; fi
    losses "$tmp/${name}_full.json" | tail -3 > "$tmp/f"; losses "$tmp/${name}_res.json" > "$tmp/r"
    local d r
    d=$(maxdiff "$tmp/f" "$tmp/r"); r=$(maxrel "$tmp/r" "$tmp/f")
    if within "$r" $RTOL; then ok "$name: steps 4-6 equal the uninterrupted run's (max abs $d, rel $r)"
    else bad "$name: $(tr '\n' ' ' < "$tmp/r") vs $(tr '\n' ' ' < "$tmp/f") (abs $d, rel $r)"; fi
}

# ---------------------------------------------------------------------------
# resume at another layout
resume_case w2to1   2 "-b 4 -z 1 --shuffle 1"            1 "-b 8 -z 0 --shuffle 1"
resume_case w1to4   1 "-b 4 -d 256 -z 0 --shuffle 0"     4 "-b 2 -d 256 -z 3 --shuffle 0"
resume_case z1to3   2 "-b 4 -z 1"                         2 "-b 4 -z 3"
resume_case z1to3c  2 "-b 4 -z 1"                         2 "-b 4 -z 3 --offload-optimizer cpu"
resume_case z1to3n  2 "-b 4 -z 1"                         2 "-b 4 -z 3 $NVME"
resume_case w3to2   3 "-b 2 -d 384 -z 3 --shuffle 0 $NVME" 2 "-b 3 -d 384 -z 2 --shuffle 0"

# ---------------------------------------------------------------------------
# refusals: the old checkpoint of w2to1 (2 ranks, -b 4, shuffled), resumed wrongly; its
# files must stay as they were, and no temporary may stay behind
mkdir -p "$tmp/ref_ck"
cp "$tmp/w2to1"/*_00000003* "$tmp/ref_ck/"
(cd "$tmp/ref_ck" && md5sum * > "$tmp/ref.md5")
expect_error "another -t" "the data position would not mean the same sequences" \
    $BIN $M -b 8 -t 16 --shuffle 1 -x 6 -o "$tmp/ref_ck" -y 1
expect_error "another global batch" "a step would not mean the same batch" \
    $MPIRUN -np 2 $BIN $M -b 2 --shuffle 1 -x 6 -o "$tmp/ref_ck" -y 1
expect_error "shuffled chunks of another size" "the shuffled order would not be the same batches" \
    $BIN $M -b 4 -d 256 --shuffle 1 -x 6 -o "$tmp/ref_ck" -y 1
(cd "$tmp/ref_ck" && md5sum -c --quiet "$tmp/ref.md5" > /dev/null 2>&1) && [ -z "$(ls -A "$tmp/ref_ck" | grep reshard)" ] \
    && ok "refused resumes leave the checkpoint as it was, no temporary" || bad "a refused resume changed $tmp/ref_ck: $(ls -A "$tmp/ref_ck")"
mkdir -p "$tmp/miss_ck"
# (the manifest would name the missing file first: test_checkpoint.sh; an earlier version's
# empty marker, taken with --allow-unverified 1, leaves it to the resume's own check)
cp "$tmp/ref_ck"/* "$tmp/miss_ck/"; rm "$tmp/miss_ck/state_00000003_00001.bin"; : > "$tmp/miss_ck/DONE_00000003"
expect_error "a missing rank's state file" "state_00000003_00001.bin (rank 1 of the 2 that saved step 3)" \
    $BIN $M -b 8 --shuffle 1 -x 6 -o "$tmp/miss_ck" -y 1 --allow-unverified 1
# a disk that fills while the resume rebuilds this rank's state (the temporary in -o): the
# message names the temporary and the reason (it was "writing the resharded state failed",
# no path, no errno); the checkpoint stays as it was and verifies, no temporary is left.
# On a tmpfs of the checkpoint's size, when this machine lets us mount one.
full=$tmp/full
mkdir -p "$full"
trap 'mountpoint -q "$full" 2>/dev/null && umount "$full"; rm -rf "$tmp"' EXIT
if mount -t tmpfs -o size=$(( $(du -sk "$tmp/ref_ck" | cut -f1) + 64 ))k tmpfs "$full" 2>/dev/null; then
    cp -r "$tmp/ref_ck" "$full/ck"
    dd if=/dev/zero of="$full/fill" bs=4k 2>/dev/null   # until the disk is full
    expect_error "a full disk while resharding" "resharding step 3 from 2 ranks at stage 1 to rank 0 of 1 at stage 0: zero: writing the resharded state to $full/ck/.reshard_00000_" \
        $BIN $M -b 8 --shuffle 1 -x 6 -o "$full/ck" -y 1 --allow-unverified 1
    grep -qF ": No space left on device" "$tmp/err" && ok "the message gives the reason: No space left on device" \
        || bad "full disk while resharding: $(grep -m1 error "$tmp/err")"
    (cd "$full/ck" && md5sum -c --quiet "$tmp/ref.md5" > /dev/null 2>&1) && [ -z "$(ls -A "$full/ck" | grep reshard)" ] \
        && ok "the full disk left the checkpoint as it was, no temporary" || bad "the full disk changed the checkpoint: $(ls -A "$full/ck")"
    umount "$full"
else
    echo "SKIP a full disk while resharding (cannot mount a tmpfs here)"
fi

# ---------------------------------------------------------------------------
# a checkpoint of engine sections of version 1 (shards padded to 64 bytes, before the
# 256-byte plan of zero3/plan.h): w2to1's old checkpoint (2 ranks, stage 1) rewritten here
# in that layout, with an earlier version's empty marker. Its units pad differently (a
# block of 49984 floats: 1562 x 32 at 2 ranks of 64-byte shards, 391 x 128 at 256), so a
# resume that took the old offsets for the new would misread every unit after the first.
# Read through its own plan and rebuilt in the current one (zero3/reshard.h), at the same
# layout it gives the losses of the same checkpoint in version 2, and at 1 rank stage 0
# those of w2to1's resume, bit for bit (and checkpoint_tool reads it too); a version it
# cannot know is refused by number, a version-1 layout under a version-2 header as not
# belonging together.
to_version1() {  # to_version1 SRC_DIR DST_DIR STEP WORLD: the host engine's sections, rewritten
    $PY - "$@" "$tmp/model.bin" <<'EOF'
import sys, struct, numpy as np
src, dst, step, world, model = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
maxT, V, L, NH, C, Vp = np.fromfile(model, np.int32, 8)[2:8].tolist()
units = [Vp * C + maxT * C] + [12 * C * C + 13 * C] * L + [2 * C]
pad = lambda n, q: -(-n // q) * q
def plan(quantum):  # (padded, shard) of every unit: quantum = world x align_bytes / 4
    return [(pad(n, quantum), pad(n, quantum) // world) for n in units]
new, old = plan(world * 64), plan(world * 16)
files = [open(f"{src}/state_{step:08d}_{r:05d}.bin", "rb").read() for r in range(world)]
HDR, ZH = 88, 72
heads = [struct.unpack("<ii16siiiiQQQQ", f[HDR:HDR + ZH]) for f in files]
magic, version, engine, stage = heads[0][:4]
assert version == 2 and engine.rstrip(b"\0") == b"host", heads[0]
sharded = stage > 0
size = sum(s if sharded else p for p, s in new)
arrays = [[np.frombuffer(f, np.float32, size, HDR + ZH + 4 * size * a) for f in files] for a in range(3)]
def unit_values(a, u):  # the unit's real elements, from the new layout
    p, s = new[u]
    if not sharded:
        at = sum(pp for pp, _ in new[:u])
        return arrays[a][0][at:at + units[u]]
    at = sum(ss for _, ss in new[:u])
    return np.concatenate([arrays[a][r][at:at + s] for r in range(world)])[:units[u]]
for r in range(world):
    out = []
    for a in range(3):
        for u in range(len(units)):
            p, s = old[u]
            full = np.zeros(p, np.float32); full[:units[u]] = unit_values(a, u)
            out.append(full[r * s:(r + 1) * s] if sharded else full)
    payload = np.concatenate(out).tobytes()
    h = list(heads[r]); h[1] = 1
    h[8], h[9], h[10] = sum(p for p, _ in old), sum(s for _, s in old), len(payload)
    with open(f"{dst}/state_{step:08d}_{r:05d}.bin", "wb") as f:
        f.write(files[r][:HDR] + struct.pack("<ii16siiiiQQQQ", *h) + payload)
EOF
}
# set_version FILE V: the engine section's version field rewritten
set_version() { $PY -c "
import sys, struct; f = open(sys.argv[1], 'r+b'); f.seek(88 + 4); f.write(struct.pack('<i', int(sys.argv[2])))" "$1" "$2"; }
rm -rf "$tmp/v1" "$tmp/v2"; mkdir -p "$tmp/v1" "$tmp/v2"
cp "$tmp/ref_ck"/* "$tmp/v2/"
cp "$tmp/ref_ck/model_00000003.bin" "$tmp/v1/"; : > "$tmp/v1/DONE_00000003"
if to_version1 "$tmp/ref_ck" "$tmp/v1" 3 2; then
    cp -r "$tmp/v1" "$tmp/v1b"
    V1="$M -b 4 -z 1 --shuffle 1 -x 6 -n 3 -y 1 --allow-unverified 1"
    if run v2same 2 $V1 -o "$tmp/v2" && run v1same 2 $V1 -o "$tmp/v1" && grep -q "resumed from .* at step 3" "$tmp/v1same.log"; then
        losses "$tmp/v2same.json" > "$tmp/f"; losses "$tmp/v1same.json" > "$tmp/r"; d=$(maxdiff "$tmp/f" "$tmp/r")
        within "$d" 0 && ok "version-1 sections resumed at their layout = the version-2 checkpoint's resume, bit for bit" \
            || bad "version-1 resume at 2 ranks: max diff $d"
    else bad "the resumes of the version-1 and version-2 checkpoints at 2 ranks"; fi
    if run v1to1 1 $M -b 8 -z 0 --shuffle 1 -x 6 -n 3 -o "$tmp/v1b" -y 1 --allow-unverified 1 && [ -f "$tmp/w2to1_res.json" ]; then
        losses "$tmp/w2to1_res.json" > "$tmp/f"; losses "$tmp/v1to1.json" > "$tmp/r"; d=$(maxdiff "$tmp/f" "$tmp/r")
        within "$d" 0 && ok "version-1 sections resumed at 1 rank stage 0 = version 2's (w2to1), bit for bit" \
            || bad "version-1 resume at 1 rank: max diff $d"
    else bad "the version-1 checkpoint resumed on 1 rank"; fi
    $TOOL consolidate "$tmp/v1b" 3 "$tmp/v1.bin" --allow-unverified > "$tmp/v1tool.log" 2>&1 && cmp -s "$tmp/v1.bin" "$tmp/v1b/model_00000003.bin" \
        && ok "consolidate of the version-1 sections equals their model file" || bad "consolidate of the version-1 sections differs"
    rm -rf "$tmp/v1c"; mkdir -p "$tmp/v1c"; cp "$tmp/v1b"/*_00000003* "$tmp/v1c/"
    for r in 0 1; do set_version "$tmp/v1c/state_00000003_0000$r.bin" 3; done
    expect_error "an engine section of an unknown version" "not an engine state of a known version (magic 20241125, version 3" \
        $MPIRUN -np 2 $BIN $V1 -o "$tmp/v1c"
    for r in 0 1; do set_version "$tmp/v1c/state_00000003_0000$r.bin" 2; done
    expect_error "a version-1 layout under a version-2 header" "its engine section (version 2, host engine, stage 1, rank 0 of 2" \
        $MPIRUN -np 2 $BIN $V1 -o "$tmp/v1c"
else
    bad "rewriting w2to1's checkpoint in version 1's layout"
fi

# ---------------------------------------------------------------------------
# the tool
$TOOL consolidate "$tmp/w2to1" 3 "$tmp/c.bin" > /dev/null && cmp -s "$tmp/c.bin" "$tmp/w2to1/model_00000003.bin" \
    && ok "consolidate (2 ranks, stage 1) equals model_S.bin" || bad "consolidate of 2 ranks at stage 1 differs from model_S.bin"
$TOOL consolidate "$tmp/z1to3" 6 "$tmp/c.bin" > /dev/null && cmp -s "$tmp/c.bin" "$tmp/z1to3/model_00000006.bin" \
    && ok "consolidate (2 ranks, stage 3) equals model_S.bin" || bad "consolidate of 2 ranks at stage 3 differs from model_S.bin"
rm -rf "$tmp/bf"; cp -r "$tmp/w1to4" "$tmp/bf"
if run bf16 4 $M -b 2 -d 256 -z 3 --shuffle 0 -x 7 -n 7 -o "$tmp/bf" -y 1 --save-bf16 1; then
    $TOOL consolidate "$tmp/bf" 7 "$tmp/c.bin" --bf16 > /dev/null && cmp -s "$tmp/c.bin" "$tmp/bf/model_00000007.bin" \
        && ok "consolidate --bf16 (4 ranks, stage 3) equals the bf16 model_S.bin" || bad "consolidate --bf16 differs"
else bad "the bf16 run"; fi
# m and v of a 1-rank stage-0 checkpoint (w2to1's step 6), read straight from its state
# file (host layout: params, m, v, each the padded model, units padded to 64 floats: 256
# bytes) and put in llm.c's kind-major order here, against extract-optimizer
$TOOL extract-optimizer "$tmp/w2to1" 6 "$tmp/opt.bin" > /dev/null
$PY - "$tmp/w2to1/state_00000006_00000.bin" "$tmp/opt.bin" <<'EOF' && ok "extract-optimizer equals the 1-rank state's m and v" || bad "extract-optimizer"
import sys, numpy as np
L, C, maxT, Vp = 2, 64, 64, 256
block = [("ln1w", C), ("ln1b", C), ("qkvw", 3*C*C), ("qkvb", 3*C), ("attprojw", C*C), ("attprojb", C), ("ln2w", C),
         ("ln2b", C), ("fcw", 4*C*C), ("fcb", 4*C), ("fcprojw", 4*C*C), ("fcprojb", C)]
units = [[("wte", Vp*C), ("wpe", maxT*C)]] + [[(k, n) for k, n in block] for _ in range(L)] + [[("lnfw", C), ("lnfb", C)]]
kinds = ["wte", "wpe"] + [k for k, _ in block] + ["lnfw", "lnfb"]
raw = open(sys.argv[1], "rb").read()
off = 88 + 72   # CheckpointHeader, ZeroStateHeader
padded = sum(-(-sum(n for _, n in u) // 64) * 64 for u in units)
numel = sum(n for u in units for _, n in u)
def kind_major(arr):   # unit-major padded -> kind-major unpadded
    parts, at = {}, 0
    for li, u in enumerate(units):
        o = at
        for k, n in u: parts.setdefault(k, []).append(arr[o:o+n]); o += n
        assert not arr[o:at + -(-sum(n for _, n in u) // 64) * 64].any(), "padding is not zero"
        at += -(-sum(n for _, n in u) // 64) * 64
    return np.concatenate([p for k in kinds for p in parts[k]])
m = np.frombuffer(raw, np.float32, padded, off + 4*padded); v = np.frombuffer(raw, np.float32, padded, off + 8*padded)
out = open(sys.argv[2], "rb").read()
magic, version, step, _, n = np.frombuffer(out[:16], np.int32).tolist() + [int(np.frombuffer(out[16:24], np.uint64)[0])]
assert (magic, version, step, n) == (20241126, 1, 6, numel), (magic, version, step, n)
em = np.frombuffer(out, np.float32, numel, 24); ev = np.frombuffer(out, np.float32, numel, 24 + 4*numel)
assert np.array_equal(kind_major(m), em) and np.array_equal(kind_major(v), ev) and em.any() and ev.any()
EOF
# the same 2-rank trajectory saved at stages 1 and 3 (z1to3's uninterrupted run is stage 3;
# the same at stage 1 here): the arithmetic is the same, the layouts are not
if run s1 2 $M -b 4 -z 1 -x 6 -n 6 -o "$tmp/s1" && run s3 2 $M -b 4 -z 3 -x 6 -n 6 -o "$tmp/s3" &&
   $TOOL extract-optimizer "$tmp/s1" 6 "$tmp/o1.bin" > /dev/null && $TOOL extract-optimizer "$tmp/s3" 6 "$tmp/o3.bin" > /dev/null; then
    cmp -s "$tmp/o1.bin" "$tmp/o3.bin" && ok "extract-optimizer: stage 1 and stage 3 of one run give the same m and v" \
        || bad "extract-optimizer: stages 1 and 3 differ"
else bad "the stage 1 / stage 3 runs"; fi
# get: one tensor whole, in fp32, as a NumPy file of its shape, from the 2-rank stage-3
# checkpoint's shards: against consolidate's model file (the master) and extract-optimizer's
# m and v, at offsets of llm.c's kind-major order computed here from the file's header
if $TOOL consolidate "$tmp/s3" 6 "$tmp/c3.bin" > /dev/null &&
   $TOOL get "$tmp/s3" 6 wte "$tmp/g_wte_master.npy" > /dev/null && $TOOL get "$tmp/s3" 6 lnfb "$tmp/g_lnfb_master.npy" --state master > /dev/null &&
   $TOOL get "$tmp/s3" 6 qkvw.1 "$tmp/g_qkvw.1_m.npy" --state m > /dev/null && $TOOL get "$tmp/s3" 6 fcprojw.0 "$tmp/g_fcprojw.0_v.npy" --state v > /dev/null &&
   $TOOL get "$tmp/s3" 6 attprojb.1 "$tmp/g_attprojb.1_v.npy" --state v > /dev/null; then
    $PY - "$tmp" <<'EOF' && ok "get: master, m and v of 5 tensors (2 ranks, stage 3) = consolidate's and extract-optimizer's, in their shapes" || bad "get"
import sys, numpy as np
t = sys.argv[1]
h = np.fromfile(t + "/c3.bin", np.int32, 256)
maxT, V, L, NH, C, Vp = (int(x) for x in h[2:8])
block = {"ln1w": C, "ln1b": C, "qkvw": 3*C*C, "qkvb": 3*C, "attprojw": C*C, "attprojb": C, "ln2w": C, "ln2b": C,
         "fcw": 4*C*C, "fcb": 4*C, "fcprojw": 4*C*C, "fcprojb": C}
sizes = [("wte", Vp*C, 1), ("wpe", maxT*C, 1)] + [(k, n, L) for k, n in block.items()] + [("lnfw", C, 1), ("lnfb", C, 1)]
def where(name):  # (offset, size) in the kind-major body
    kind, _, layer = name.partition("."); at = 0
    for k, n, count in sizes:
        if k == kind: return at + n * (int(layer) if layer else 0), n
        at += n * count
numel = sum(n * count for _, n, count in sizes)
master = np.fromfile(t + "/c3.bin", np.float32, offset=1024)
opt = np.fromfile(t + "/o3.bin", np.float32, offset=24)
state = {"master": master, "m": opt[:numel], "v": opt[numel:]}
shapes = {"wte": (Vp, C), "lnfb": (C,), "qkvw.1": (3*C, C), "fcprojw.0": (C, 4*C), "attprojb.1": (C,)}
for name, which in [("wte", "master"), ("lnfb", "master"), ("qkvw.1", "m"), ("fcprojw.0", "v"), ("attprojb.1", "v")]:
    got = np.load(f"{t}/g_{name}_{which}.npy")
    o, n = where(name)
    assert got.dtype == np.float32 and got.shape == shapes[name], (name, got.dtype, got.shape)
    assert np.array_equal(got.reshape(-1), state[which][o:o+n]) and got.any(), (name, which)
EOF
else bad "get or consolidate of the stage-3 checkpoint"; fi
expect_error "get: an unknown kind" "no tensor kind 'qkv'" $TOOL get "$tmp/s3" 6 qkv.0 "$tmp/x.npy"
expect_error "get: a layer past the last" "the layer must be 0..1" $TOOL get "$tmp/s3" 6 qkvw.2 "$tmp/x.npy"
expect_error "get: a block's kind without its layer" "needs its layer" $TOOL get "$tmp/s3" 6 fcw "$tmp/x.npy"
expect_error "get: a layer on wte" "not a block's" $TOOL get "$tmp/s3" 6 wte.0 "$tmp/x.npy"
expect_error "get: --state other than master, m, v" "it is master, m or v" $TOOL get "$tmp/s3" 6 wte "$tmp/x.npy" --state grad
expect_error "get: into the checkpoint's directory" "refusing to write" $TOOL get "$tmp/s3" 6 wte "$tmp/s3/wte.npy"
[ ! -e "$tmp/x.npy" ] && [ ! -e "$tmp/s3/wte.npy" ] && ok "get: nothing written by the refused calls" || bad "get: a refused call left a file"
# set and reset-moments: copies of the stage-3 checkpoint with state replaced, DIR untouched.
# The identity (a tensor set to its own master) copies every file byte for byte, the marker
# too; new values of qkvw.1 come back through get, reach consolidate and model_S.bin alike,
# and reach the trainer: resumed at 2 ranks (its layout) and at 1 (resharded) the step-7
# losses agree (RTOL) and differ from the untouched checkpoint's by more than 1e-4, ten
# times what two layouts' sums can part them by (the change moves it by 1.1e-3); m of
# fcw.0 likewise
E="$tmp/edit"; mkdir -p "$E"
$TOOL get "$tmp/s3" 6 qkvw.1 "$E/q_master.npy" > /dev/null
$PY -c "
import numpy as np, sys
q = np.load(sys.argv[1]); np.save(sys.argv[2], (q * 2 + 0.5).astype('<f4')); np.save(sys.argv[3], q.T.copy())
np.save(sys.argv[4], np.where(np.arange(q.size).reshape(q.shape) == 7, np.nan, q).astype('<f4')); np.save(sys.argv[5], q.astype('<f8'))
np.save(sys.argv[6], -np.ones(q.shape, '<f4'))" "$E/q_master.npy" "$E/q_new.npy" "$E/q_T.npy" "$E/q_nan.npy" "$E/q_f8.npy" "$E/q_neg.npy"
if $TOOL set "$tmp/s3" 6 qkvw.1 "$E/q_master.npy" "$E/same" > "$E/same.log" 2>&1; then
    same=1; for f in DONE_00000006 model_00000006.bin state_00000006_00000.bin state_00000006_00001.bin; do cmp -s "$tmp/s3/$f" "$E/same/$f" || same=0; done
    [ $same = 1 ] && [ "$(ls "$E/same" | wc -l)" = 4 ] && ok "set: a tensor set to its own master copies the checkpoint byte for byte (its 4 files, nothing else)" \
        || bad "set: the identity changed a file: $(ls "$E/same")"
else bad "set (identity): $(cat "$E/same.log")"; fi
if $TOOL set "$tmp/s3" 6 qkvw.1 "$E/q_new.npy" "$E/new" > /dev/null && $TOOL get "$E/new" 6 qkvw.1 "$E/q_back.npy" > /dev/null &&
   $TOOL consolidate "$E/new" 6 "$E/c_new.bin" > /dev/null && $TOOL consolidate "$tmp/s3" 6 "$E/c_old.bin" > /dev/null; then
    cmp -s "$E/c_new.bin" "$E/new/model_00000006.bin" && $PY - "$E" <<'EOF' && ok "set: new values of qkvw.1 come back through get, and consolidate = model_S.bin = the old model but for qkvw.1" || bad "set: new values"
import sys, numpy as np
e = sys.argv[1]
new, back = np.load(e + "/q_new.npy"), np.load(e + "/q_back.npy")
assert np.array_equal(new, back)
a, b = np.fromfile(e + "/c_old.bin", np.float32, offset=1024), np.fromfile(e + "/c_new.bin", np.float32, offset=1024)
h = np.fromfile(e + "/c_old.bin", np.int32, 256); maxT, L, C, Vp = int(h[2]), int(h[4]), int(h[6]), int(h[7])
o = Vp*C + maxT*C + 2*L*C + 3*C*C*1   # wte, wpe, ln1w and ln1b of every layer, qkvw of layer 0
changed = np.flatnonzero(a != b)
assert changed.size > 0 and changed.min() >= o and changed.max() < o + 3*C*C, (changed.min(), changed.max(), o)
assert np.array_equal(b[o:o + 3*C*C], new.reshape(-1))
EOF
else bad "set (new values) or its get/consolidate"; fi
if run e_old 2 $M -b 4 -z 3 -x 7 -n 0 -o "$tmp/s3" -y 1 && run e_new2 2 $M -b 4 -z 3 -x 7 -n 0 -o "$E/new" -y 1 &&
   run e_new1 1 $M -b 8 -z 0 -x 7 -n 0 -o "$E/new" -y 1; then
    losses "$tmp/e_old.json" > "$tmp/l_o"; losses "$tmp/e_new2.json" > "$tmp/l_2"; losses "$tmp/e_new1.json" > "$tmp/l_1"
    r=$(maxrel "$tmp/l_1" "$tmp/l_2"); d=$(maxdiff "$tmp/l_o" "$tmp/l_2")
    within "$r" $RTOL && ! within "$d" 1e-4 && ok "set: the copy resumes at 2 ranks (its layout) and at 1 (resharded) alike (rel $r) and not as the original (diff $d)" \
        || bad "set: resumes of the copy: 2 vs 1 rank rel $r, against the original $d"
else bad "set: a resume of the copy"; fi
$TOOL get "$tmp/s3" 6 fcw.0 "$E/fm.npy" --state m > /dev/null
$PY -c "
import numpy as np, sys
m = np.load(sys.argv[1]); np.save(sys.argv[2], (m * -3).astype('<f4'))" "$E/fm.npy" "$E/fm_new.npy"
if $TOOL set "$tmp/s3" 6 fcw.0 "$E/fm_new.npy" "$E/m" --state m > /dev/null && $TOOL get "$E/m" 6 fcw.0 "$E/fm_back.npy" --state m > /dev/null &&
   $TOOL reset-moments "$tmp/s3" 6 "$E/r_all" > /dev/null && $TOOL reset-moments "$tmp/s3" 6 "$E/r_one" attprojb.1 > /dev/null &&
   $TOOL extract-optimizer "$E/m" 6 "$E/o_m.bin" > /dev/null && $TOOL extract-optimizer "$E/r_all" 6 "$E/o_all.bin" > /dev/null &&
   $TOOL extract-optimizer "$E/r_one" 6 "$E/o_one.bin" > /dev/null && cmp -s "$E/m/model_00000006.bin" "$tmp/s3/model_00000006.bin"; then
    $PY - "$E" "$tmp/o3.bin" <<'EOF' && ok "set --state m and reset-moments (all, one tensor): m and v as asked, the rest and the model as they were" || bad "set --state m / reset-moments"
import sys, numpy as np
e, o3 = sys.argv[1], sys.argv[2]
rd = lambda p: np.fromfile(p, np.float32, offset=24)
old, m, alln, one = rd(o3), rd(e + "/o_m.bin"), rd(e + "/o_all.bin"), rd(e + "/o_one.bin")
assert np.array_equal(np.load(e + "/fm_back.npy"), np.load(e + "/fm_new.npy"))
d = np.flatnonzero(old != m); assert d.size > 0 and d.max() < old.size // 2   # only m changed
assert not alln.any() and old.any()
d = np.flatnonzero(old != one); assert 0 < d.size <= 2 * 64 and not one[d].any(), d.size  # attprojb.1's m and v (C each)
EOF
else bad "set --state m or reset-moments"; fi
expect_error "set: another shape" "shape (64, 192), but qkvw.1 is (192, 64)" $TOOL set "$tmp/s3" 6 qkvw.1 "$E/q_T.npy" "$E/x"
expect_error "set: a NaN" "value 7 is nan" $TOOL set "$tmp/s3" 6 qkvw.1 "$E/q_nan.npy" "$E/x"
expect_error "set: float64" "not little-endian fp32" $TOOL set "$tmp/s3" 6 qkvw.1 "$E/q_f8.npy" "$E/x"
expect_error "set: a negative v" "must be finite and not negative" $TOOL set "$tmp/s3" 6 qkvw.1 "$E/q_neg.npy" "$E/x" --state v
expect_error "set: OUTDIR holding the step" "already holds a checkpoint of step 6" $TOOL set "$tmp/s3" 6 qkvw.1 "$E/q_new.npy" "$E/new"
expect_error "set: into the checkpoint's own directory" "refusing to write" $TOOL set "$tmp/s3" 6 qkvw.1 "$E/q_new.npy" "$tmp/s3"
[ ! -e "$E/x" ] && [ -z "$(ls "$E"/*/*.tmp 2> /dev/null)" ] && $TOOL verify "$tmp/s3" 6 > /dev/null \
    && ok "set: the refused calls made nothing, left no temporary, and the checkpoint still verifies" || bad "set: a refused call left something"
# the device engine's compute copy (bf16, emulated GPU trainer, 1 rank, stage 0: every array
# full): set writes the master as given and the compute copy rounded to nearest, read here
# from the state file (master, m, v, then the copy, units padded to 256 bytes)
EMU=${EMU:-build/train_gpt2_zero3_emu}
if [ ! -x "$EMU" ]; then bad "missing $EMU (make build/train_gpt2_zero3_emu)"
elif "$EMU" $M -b 4 -z 0 --zero-backend device -x 2 -n 2 -o "$E/dev" > "$E/dev.log" 2>&1 &&
     $PY -c "
import numpy as np, sys
C = int(np.fromfile(sys.argv[2], np.int32, 256)[6])
np.save(sys.argv[1], (np.linspace(-1, 1, C) + 1e-3).astype('<f4'))" "$E/lnfw.npy" "$tmp/model.bin" &&
     $TOOL set "$E/dev" 2 lnfw "$E/lnfw.npy" "$E/dev2" > /dev/null; then
    $PY - "$E/dev2/state_00000002_00000.bin" "$E/lnfw.npy" "$tmp/model.bin" <<'EOF' && ok "set on the device engine's bf16 state: the master as given, the compute copy rounded to nearest" || bad "set on the device engine's state"
import sys, numpy as np
raw = open(sys.argv[1], "rb").read(); x = np.load(sys.argv[2])
h = np.fromfile(sys.argv[3], np.int32, 256); maxT, L, C, Vp = int(h[2]), int(h[4]), int(h[6]), int(h[7])
assert raw[88 + 8:88 + 14] == b"device", raw[88:120]
P = int(np.frombuffer(raw[88 + 48:88 + 56], np.uint64)[0])   # padded_total
pad = lambda n: -(-n // 128) * 128                          # units to 256 bytes of bf16
units = [Vp*C + maxT*C] + [12*C*C + 13*C] * L + [2*C]
off = sum(pad(n) for n in units[:-1])                       # lnfw: the last unit's first tensor
base = 88 + 72
master = np.frombuffer(raw, np.float32, C, base + 4*off)
copy = np.frombuffer(raw, np.uint16, C, base + 12*P + 2*off)
u = x.view(np.uint32).astype(np.uint64)
rne = ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype(np.uint16)
assert np.array_equal(master, x), "master"
assert np.array_equal(copy, rne), "compute copy"
assert (copy != (u >> 16).astype(np.uint16)).any(), "no value where nearest and truncation differ: a weak test"
EOF
else bad "the device engine's checkpoint or set on it: $(grep -m1 -i error "$E/dev.log")"; fi
$TOOL inspect "$tmp/w3to2" 3 > "$tmp/insp" 2>&1
grep -q "world size   3" "$tmp/insp" && grep -q "ZeRO stage   3" "$tmp/insp" && grep -q "section version 2: shards padded to 256 bytes" "$tmp/insp" && grep -q "rank 2 .*data position: epoch 0, shard 0, batch 6" "$tmp/insp" \
    && grep -q "step        3  complete    3 state files" "$tmp/insp" && grep -q "step        6  complete    2 state files" "$tmp/insp" \
    && ok "inspect: steps, world size, stage, section version, data position" || bad "inspect: $(cat "$tmp/insp")"
expect_error "inspect: a step not there" "state_00000004_00000.bin" $TOOL inspect "$tmp/w3to2" 4
expect_error "consolidate: no checkpoint" "DONE_00000009" $TOOL consolidate "$tmp/w3to2" 9 "$tmp/x.bin"

finish
