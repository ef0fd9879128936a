#!/usr/bin/env bash
# The first contact with a GPU, rehearsed without one (make test): scripts/gpu_bundle.sh
# packs the emulated GPU binaries (test/emu) in place of the CUDA ones, with the CPU
# trainer built for x86-64-v3, the real build/gpu_probe (it links cuBLAS, cuBLASLt and
# NCCL) and Open MPI; then, in a copy of the source such as the device tool sends, inside
# test/gpu/bare_machine.sh's mount namespace (Open MPI, libgomp, cJSON, liburing, OpenMP
# OpenBLAS, ssh hidden; cuBLAS and NCCL only as CUDA 13's wheels lay them out; numpy not
# importable), scripts/gpu_first_contact.sh runs every step with nvidia-smi and
# compute-sanitizer stand-ins (test/gpu/standin) and make, apt and the compilers replaced
# by programs that record being called. Checked:
#   the bundle       gzip, the flags it was built with, libgomp and mpirun in it
#   the set-up       cuBLAS, cuBLASLt and NCCL found in the wheels, the carried mpirun, no
#                    library missing, numpy missing said by name
#   the steps        every program starts; (c) the trainer suite runs, the PyTorch
#                    comparisons skipped naming numpy; (d) mpirun -np 2 as root through
#                    the carried Open MPI; (e), (f), (g) their runs and figures; a step that
#                    hangs is stopped at its limit and the next steps still run; a step
#                    without the time it needs is skipped; (b) the kernels' tests
#   the results      summary.json with every step, DIR holding 3 files (the device tool
#                    brings back 8), nothing built or installed
# Ends with "N passed, N failed". Skipped by name without root, mount namespaces or nvcc.
# shellcheck disable=SC2015,SC2154  # `check && ok || bad`: ok never fails; $tmp is lib.sh's
source "$(dirname "$0")/../e2e/lib.sh"   # $tmp, ok/bad/skip/finish
ROOT=$(pwd)
if [ "$(id -u)" != 0 ] || ! unshare --mount true 2> /dev/null; then
    echo "SKIP GPU bundle rehearsal: needs root and mount namespaces (unshare --mount)"; finish; exit 0
fi
if ! command -v "${NVCC:-nvcc}" > /dev/null; then
    echo "SKIP GPU bundle rehearsal: nvcc not found (build/gpu_probe is a CUDA program)"; finish; exit 0
fi
for b in build/train_gpt2_zero3_emu build/train_gpt2_zero3_emu_fp32 build/test_kernels_emu build/test_kernels_emu_fp32 \
         build/test_kernels2_emu build/test_kernels2_emu_fp32 build/bench_attention_emu; do
    [ -x "$b" ] || { bad "missing $b (make $b)"; finish; exit 1; }
done

# ---------------------------------------------------------------------------
# pack, as a session would before its GPU call (-O1: the build's time, not its speed, counts here)
M=$tmp/machine
mkdir -p "$M"
OPT_USED="-O1 -march=x86-64-v3"
if PACK_EMULATED=1 PACK_OPT="$OPT_USED" scripts/gpu_bundle.sh pack "$M/.gpu" > "$tmp/pack.log" 2>&1; then
    ok "gpu_bundle.sh pack (emulated stand-ins): $(tail -1 "$tmp/pack.log" | cut -d';' -f1)"
else
    bad "gpu_bundle.sh pack: $(tail -3 "$tmp/pack.log" | tr '\n' ' ')"; finish; exit 1
fi
listing=$(tar -tzf "$M/.gpu/bundle.tar.gz")
[ ! -e "$M/.gpu/bundle.tar.xz" ] && grep -q "^built: make OPT='$OPT_USED' CUDA_ARCH='-gencode arch=compute_90" "$M/.gpu/info.txt" \
    && ok "the bundle is gzip, built with the flags asked for (x86-64-v3, sm_90)" || bad "the bundle: $(cat "$M/.gpu/info.txt")"
grep -qx './lib/libgomp.so.1' <<< "$listing" && grep -q '^./ompi/bin/mpirun$' <<< "$listing" \
    && grep -q '^./tree/build/gpu_probe$' <<< "$listing" && ok "the bundle carries libgomp, Open MPI's mpirun and build/gpu_probe" \
    || bad "the bundle lacks libgomp, mpirun or gpu_probe"

# the machine's working tree: the source as git sees it, as the device tool copies it
git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    xargs -0 cp -a --parents -t "$M"
# make, apt and the compilers: nothing run on the GPU machine may call them
mkdir -p "$tmp/stubs"
for p in make apt apt-get dpkg gcc cc g++ c++ nvcc clang mpicc; do
    printf '#!/bin/sh\necho "%s $*" >> %s/called\nexit 1\n' "$p" "$tmp" > "$tmp/stubs/$p"
    chmod +x "$tmp/stubs/$p"
done

# the second contact below, then the speed script's, run while the first does (make test's
# 2 cores; each is mostly one emulated run at a time), each on a copy of the machine of its
# own: each sets the bundle up in place (.gpu/x and the built files put in the tree)
M2=$tmp/machine2 M3=$tmp/machine3
cp -a "$M" "$M2"
cp -a "$M" "$M3"

# [MACHINE=DIR] [SCRIPT=...] contact DIR NSDIR ENV...: scripts/gpu_first_contact.sh DIR (or
# SCRIPT) on the bare machine (MACHINE: the copy of the machine's tree it runs in, $M unless said)
contact() {
    local dir=$1 ns=$2; shift 2
    mkdir -p "$ns"
    (cd "${MACHINE:-$M}" && HIDE_PY_MODULES=numpy "$ROOT/test/gpu/bare_machine.sh" "$ns" \
        env PATH="$tmp/stubs:$M/test/gpu/standin:$PATH" PY=/usr/bin/python3 FC_GPU_MIB=81559 \
        FC_SANITIZER="$M/test/gpu/standin/compute-sanitizer" FC_TORCH_DEVICE=cpu "$@" \
        "${SCRIPT:-scripts/gpu_first_contact.sh}" "$dir")
}

# the whole flow, scaled down: d2 for (f) and (g), the reference section for (c), one
# sanitizer run of each tool (their stand-in reporting what the real one found on an H100
# that is the libraries' own), and step b made to hang past its 3-second limit
contact "$tmp/fc" "$tmp/ns1" STANDIN_SANITIZER_REPORTS=library FC_BUDGET=900 FC_TEST_HANG=b FC_MAX_b=3 FC_MAX_c=300 FC_MAX_d=300 FC_MAX_f=300 FC_MAX_g=300 \
    FC_C_SECTIONS=reference FC_E_RUNS="memcheck:cpu racecheck:none" FC_F_MODEL=d2 FC_F_T=32 FC_F_BATCHES="4 2" FC_F_STEPS=2 FC_F_WARMUP=1 \
    FC_G_MODEL=d2 FC_G_T=32 FC_G_BATCHES=2 FC_G_STEPS=2 FC_G_WARMUP=1 > "$tmp/fc.log" 2>&1 &
pid1=$!
# step b's own runs (the first run hung it; the kernels' first tests: the second ones take
# 13 s each emulated), a sanitizer report of ours, and a step without the time it needs
# skipped: checked after the first contact's results
# (f)'s runs through a trainer that lingers after its report: the first is stopped by its
# limit after its last step and counts; the second, left 1 s, times out and says so
printf '#!/usr/bin/env bash\n./train_gpt2_zero3 "$@" || exit\nexec sleep 1000\n' > "$tmp/slow_exit"; chmod +x "$tmp/slow_exit"
# then scripts/gpu_speed.sh, every step scaled down: d2 for d12 and d48, PyTorch on the CPU,
# two kernel tests (the one testing the "changed" matmul first), Nsight Compute's stand-in
{
    MACHINE=$M2 contact "$tmp/fc2" "$tmp/ns2" FC_STEPS="a b e f g" FC_KERNEL_TESTS="build/test_kernels_gpu_fp32 build/test_kernels_gpu" \
        STANDIN_SANITIZER_REPORTS=ours FC_E_RUNS=memcheck:none FC_MIN_g=100000 FC_TRAINER="$tmp/slow_exit" FC_MAX_f=45 \
        FC_F_MODEL=d2 FC_F_T=32 FC_F_BATCHES=2 FC_F_STEPS=2 FC_F_WARMUP=1 > "$tmp/fc2.log" 2>&1
    echo $? > "$tmp/fc2.rc"
    MACHINE=$M3 SCRIPT=scripts/gpu_speed.sh contact "$tmp/sp" "$tmp/ns3" FC_BUDGET=900 FC_MAX_b=200 FC_MAX_c=300 FC_MAX_d=200 \
        FC_MAX_e=300 FC_MAX_f=100 SP_ADAM_N=1000000 SP_RATES="8 8" SP_CHANGED="llmc/matmul.cuh zero3/device.cuh" \
        SP_KERNEL_TESTS="build/test_kernels_gpu_fp32 build/test_kernels2_gpu_fp32" SP_C_MODEL=d2 SP_C_B=2 SP_C_T=32 \
        SP_C_STEPS=3 SP_C_WARMUP=1 SP_C_PROFILE=1 SP_TORCH_DEVICE=cpu SP_TORCH_STEPS=3 SP_BA_SHAPES="2:2:32:64 1:2:40:80" BA_ITERS=2 \
        SP_E_MODEL=d2 SP_E_BATCHES=2 SP_E_T=32 \
        SP_E_STEPS=3 SP_E_WARMUP=1 SP_F_STEPS=1 > "$tmp/sp.log" 2>&1
} &
pid2=$!
wait $pid1
rc=$?
[ $rc -eq 0 ] && [ -f "$tmp/fc/summary.json" ] && ok "gpu_first_contact.sh ran to its end (exit 0, summary.json)" \
    || bad "gpu_first_contact.sh: exit $rc, $(tail -3 "$tmp/fc.log" | tr '\n' ' ')"
[ "$(cd "$tmp/fc" && echo *)" = "log logs.tar.gz summary.json" ] && ok "its directory holds summary.json, log and logs.tar.gz" \
    || bad "its directory holds: $(cd "$tmp/fc" && echo *)"
tar -tzf "$tmp/fc/logs.tar.gz" 2> /dev/null | grep -q '^logs/c_trainer.log$' && ok "logs.tar.gz has each step's logs" \
    || bad "logs.tar.gz lacks logs/c_trainer.log"
$PY - "$tmp/fc/summary.json" "$tmp/ns1" > "$tmp/check.log" 2>&1 <<'EOF'
import json, sys
s = json.load(open(sys.argv[1])); ns = sys.argv[2]
st = {x["id"]: x for x in s["steps"]}
def checks(i, r): return [c["what"] for c in st[i].get("checks", []) if c["result"] == r]
def res(i): return st[i].get("results", {})
def expect(cond, what):
    print(("PASS " if cond else "FAIL ") + what)
expect([x["id"] for x in s["steps"]] == list("abcdefg"), "summary: steps a-g in order")
setup = "\n".join(s["bundle"]["setup"])
expect(f"libcublas.so.13: {ns}/site/nvidia/cu13/lib/libcublas.so.13 (linked in)" in setup
       and f"libcublasLt.so.13: {ns}/site/nvidia/cu13/lib/libcublasLt.so.13" in setup
       and f"libnccl.so.2: {ns}/site/nvidia/nccl/lib/libnccl.so.2" in setup,
       "set-up: cuBLAS, cuBLASLt and NCCL found in the wheel tree")
expect("mpirun: the carried Open MPI" in setup and "gpu_bundle: missing:" not in setup, "set-up: the carried mpirun, no library missing")
expect("python module missing: numpy" in setup, "set-up: numpy missing, by name")
a = st["a"]
fails = checks("a", "FAIL")
expect(a["status"] == "failed" and len(fails) == 2 and fails[0].startswith("build/gpu_probe (exit 2)")
       and "python module missing: numpy" in fails[1] and "every library the carried programs load was found" in checks("a", "PASS"),
       "(a) no GPU and numpy missing, said by name; every library found")
expect(res("a").get("probe.cublaslt", "").startswith("13.") and res("a").get("probe.nccl", "").startswith("2.")
       and res("a").get("smi", "").startswith("NVIDIA H100"), "(a) the probe's cuBLASLt and NCCL versions, nvidia-smi's GPU")
expect(st["b"]["status"] == "timeout" and st["b"]["seconds"] <= 3 + 10, "(b) a hanging step stopped at its limit")
c = st["c"]
expect(c["status"] == "ok" and any("numpy" in w for w in checks("c", "SKIP"))
       and any(w.startswith("fp32 GPU losses = CPU losses") for w in checks("c", "PASS"))
       and any(w.startswith("bf16 losses = CPU") for w in checks("c", "PASS")),
       "(c) the trainer suite: the PyTorch comparisons skipped naming numpy, the rest passed")
expect(st["d"]["status"] == "ok" and any(w.startswith("host backend N=2 stage 3 = single-rank") for w in checks("d", "PASS")),
       "(d) mpirun -np 2 as root, carried Open MPI: 2 ranks = 1")
expect(st["e"]["status"] == "ok" and checks("e", "PASS") == ["memcheck, offload cpu: no errors of ours (1 of the libraries' own set apart)",
       "racecheck, offload none: no errors of ours (1 of the libraries' own set apart)"],
       "(e) the sanitizer's runs: NCCL's API probe and a race in cuBLAS's kernel set apart")
f = res("f")
expect(st["f"]["status"] == "ok" and f.get("B") == 4 and all((f.get(k) or 0) > 0 for k in ("z0.tokens_per_s", "z3.tokens_per_s", "torch.tokens_per_s")),
       "(f) B chosen by the estimate, -z 0, -z 3 and PyTorch measured")
g = res("g")
expect(st["g"]["status"] == "ok" and all((g.get(k + ".tokens_per_s") or 0) > 0 for k in ("none", "cpu", "dpu")),
       "(g) no offload, CPU offload, --dpu measured")
expect(s["counts"] == {"ok": 5, "failed": 1, "timeout": 1, "skipped": 0, "not run": 0}, f"counts {s['counts']}")
EOF
grep -E '^(PASS|FAIL) ' "$tmp/check.log" | while IFS= read -r l; do echo "$l"; done
pass=$((pass + $(grep -c '^PASS ' "$tmp/check.log"))); fail=$((fail + $(grep -c '^FAIL ' "$tmp/check.log")))
grep -qE '^(PASS|FAIL) ' "$tmp/check.log" || bad "summary.json could not be checked: $(tail -2 "$tmp/check.log" | tr '\n' ' ')"
for s in a b c d e f g; do grep -q "^=== \[$s\]" "$tmp/fc/log" || grep -q "^\[$s\] .*skipped" "$tmp/fc/log" || bad "log: no step $s"; done

# the second contact's checks
wait $pid2
[ "$(cat "$tmp/fc2.rc")" = 0 ] || bad "the second contact: exit $(cat "$tmp/fc2.rc"), $(tail -3 "$tmp/fc2.log" | tr '\n' ' ')"
if $PY - "$tmp/fc2/summary.json" "$tmp/fc2/log" <<'EOF' > "$tmp/check2.log" 2>&1
import json, sys
s = json.load(open(sys.argv[1]))
st = {x["id"]: x for x in s["steps"]}
b = [c["what"] for c in st["b"].get("checks", []) if c["result"] == "PASS"]
assert st["b"]["status"] == "ok" and len(b) == 2 and all(w.endswith(" passed, 0 failed") for w in b), st["b"]
assert st["g"]["status"] == "skipped" and "results" not in st["g"], st["g"]
e = [c["what"] for c in st["e"].get("checks", []) if c["result"] == "FAIL"]
assert st["e"]["status"] == "failed" and len(e) == 1 and "1 errors of ours" in e[0] and "Invalid __global__ read" in e[0], st["e"]
f = {c["result"] + " " + c["what"] for c in st["f"].get("checks", [])}
assert any(w.startswith("PASS -z 0 at B=2: ") for w in f), f
assert "FAIL -z 3 at B=2: timed out after 1 s, 0 of 2 steps done" in f, f
import re
assert re.search(r"f_z0: stopped by its [0-9]+ s limit after its last step and its report: counted", open(sys.argv[2]).read())
EOF
then ok "(b) the kernel tests (emulated) pass; (e) a report of ours fails; a step without its minimum time is skipped; (f) a run stopped after its report counts, one that timed out says so"
else bad "limits: $(tail -1 "$tmp/check2.log")"; fi

# the speed script's: every step's figures where the stand-ins allow them
grep -q '^figures:' "$tmp/sp.log" && grep -q '^  stage 3 / stage 0 (cublas): ' "$tmp/sp.log" \
    && ok "gpu_speed.sh ran to its end, its figures and ratios printed" || bad "gpu_speed.sh: $(tail -3 "$tmp/sp.log" | tr '\n' ' ')"
tar -xzf "$tmp/sp/logs.tar.gz" -C "$tmp/sp" files/f_table.txt 2> /dev/null
$PY - "$tmp/sp/summary.json" "$tmp/sp/files/f_table.txt" "$(env -u OMP_NUM_THREADS nproc)" > "$tmp/check3.log" 2>&1 <<'EOF'
import json, sys
s = json.load(open(sys.argv[1])); table = open(sys.argv[2]).read(); cores = int(sys.argv[3])
st = {x["id"]: x for x in s["steps"]}
def checks(i, r): return [c["what"] for c in st[i].get("checks", []) if c["result"] == r]
def res(i): return st[i].get("results", {})
def expect(cond, what):
    print(("PASS " if cond else "FAIL ") + what)
def pos(x): return isinstance(x, (int, float)) and x > 0
expect(s["script"] == "scripts/gpu_speed.sh" and [x["id"] for x in s["steps"]] == list("abcdef"), "speed: steps a-f in order")
a = res("a")
few = max(cores - 2, 1)
expect(st["a"]["status"] == "failed" and checks("a", "FAIL")[0].startswith("build/gpu_probe (exit 2)")
       and "rates.h2d_pinned_gbps" not in a, "speed (a): no GPU said, no copy rates made up")
expect(all(pos(a.get(f"host.threads_{n}.{k}")) for n in (cores, few) for k in ("triad_gbps", "cpu_adam_gbps")),
       f"speed (a): the host's triad and CPU Adam at {cores} and {few} threads")
expect(a.get("tool.ncu", "").endswith("/test/gpu/standin/ncu") and a.get("tool.nsys") is not None and a.get("smi", "").startswith("NVIDIA H100"),
       "speed (a): ncu found (the stand-in), nsys looked for, nvidia-smi's answer")
b = res("b")
expect(st["b"]["status"] == "ok" and b.get("order", "").split() == ["build/test_kernels2_gpu_fp32", "build/test_kernels_gpu_fp32"]
       and len(checks("b", "PASS")) == 2, "speed (b): the kernel tests of the changed matmul first, both passed")
c = res("c")
runs = ["z0_cublas", "z0_flash", "z3_cublas", "z3_flash"]
expect(st["c"]["status"] == "ok" and c.get("attention_paths") == "cublas flash"
       and all(pos(c.get(f"{r}.ms_per_step")) and pos(c.get(f"{r}.startup_s")) for r in runs)
       and all(pos(c.get(f"{p}.stage3_vs_stage0_x")) for p in ("cublas", "flash"))
       and c.get("per_op_timer", "").startswith("on") and all(f"{r}.op.qkv" in c and f"{r}.op.attention" in c for r in runs),
       "speed (c): -z 0 and -z 3 for each attention path, figures, start-up, stage 3 / stage 0, the per-op timer's rows")
expect(pos(c.get("tuned_z0_flash.ms_per_step")) and pos(c.get("matmul_tune.untuned_vs_tuned_x"))
       and c.get("tuned_z0_flash.tuning", "").startswith("matmul tuning: "),
       "speed (c): -z 0 again with --matmul-tune 8, its tuning line, against the untuned run")
expect(pos(c.get("ge2_z0_flash.ms_per_step")) and pos(c.get("gelu_fusion.ge1_vs_ge2_x")),
       "speed (c): -z 0 again with -ge 2, against -ge 1")
d = res("d")
expect(st["d"]["status"] == "ok" and all(f"attention.{s}.{p}" in d for s in ("2:2:32:64", "1:2:40:80") for p in ("flash", "cublas"))
       and all(pos(d.get(f"attention.{s}.flash_vs_sdpa_x")) for s in ("2:2:32:64", "1:2:40:80")) and pos(d.get("torch_eager.ms_per_step"))
       and any("compiled: not on cpu" in w for w in checks("d", "SKIP")),
       "speed (d): the attention alone (both paths, heads of 64 and 80) against SDPA, PyTorch eager; compiled skipped on the CPU")
e = res("e")
expect(st["e"]["status"] == "ok" and all(pos(e.get(f"e_{n}.ms_per_step")) for n in ("none", "cpu", "dpu", "par", "nvme"))
       and all(pos(e.get(f"{n}.vs_none_x")) for n in ("cpu", "dpu", "par", "nvme")) and "e_cpu.update_ms" in e
       and "e_nvme.comm_wait_ms" in e, "speed (e): every offload against none, with the update and wait figures")
expect(all(pos(e.get(f"e_{n}.mover.{m}_ms")) for n, m in (("cpu", "cpu_adam"), ("cpu", "copy_out"), ("par", "gather"), ("par", "upload_shard")))
       and not any(k.startswith("e_none.mover.") for k in e),
       "speed (e): the profiled step's movers (CPU Adam, copies, gathers, uploads), none without offload at stage 0")
rows = {l.split()[0]: l.split() for l in table.splitlines()[2:]}
expect(st["f"]["status"] == "ok" and res("f").get("configs") == 3 and table.startswith("3 launch configurations")
       and rows["attention_softmax_kernel"][3:6] == ["400.0", "1200.0", "3000"], "speed (f): the stand-in's 3 configurations, their rates")
EOF
grep -E '^(PASS|FAIL) ' "$tmp/check3.log"
pass=$((pass + $(grep -c '^PASS ' "$tmp/check3.log"))); fail=$((fail + $(grep -c '^FAIL ' "$tmp/check3.log")))
grep -qE '^(PASS|FAIL) ' "$tmp/check3.log" || bad "speed: summary.json could not be checked: $(tail -2 "$tmp/check3.log" | tr '\n' ' ')"

[ ! -s "$tmp/called" ] && ok "nothing on the machine called make, apt or a compiler" || bad "called: $(sort -u "$tmp/called" | head -3 | tr '\n' ';')"
finish
