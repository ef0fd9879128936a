#!/usr/bin/env bash
# Profiles a few training steps of the GPU trainer ./train_gpt2_zero3 under Nsight Systems:
# CUDA API and kernel traces plus the trainer's NVTX ranges (step, forward, backward,
# layer, optimizer), then prints `nsys stats` summaries (NVTX ranges, GPU kernels, CUDA
# API calls, memory copies). The default run is small: GPT-2 124M (d12), B=16, T=1024,
# 10 steps on tinyshakespeare, no validation or samples. It builds nothing: make
# train_gpt2_zero3 data first (or run it through scripts/gpu_bundle.sh exec).
#
#   scripts/profile.sh [trainer flags]   # appended to the defaults; later flags win,
#                                        # e.g. scripts/profile.sh -e gpt3:c768 -t 2048 -b 4
# Environment: OUT_DIR (default profile_out: the .nsys-rep, .sqlite and the stats go there),
#   NAME (report name, default d12), NSYS (the nsys binary), NGPU (default 1: one rank;
#   more runs the trainer under mpirun -np NGPU with one report per rank, NAME_rankR),
#   LAUNCHER (mpirun, or srun: `srun --mpi=pmix --ntasks=NGPU` inside a SLURM allocation),
#   NSYS_ARGS (more `nsys profile` options, word-split), TRAINER (default ./train_gpt2_zero3).
# Needs an NVIDIA GPU and Nsight Systems (nsys, in the CUDA toolkit or
# /opt/nvidia/nsight-systems/*/bin); stops with a message naming what is missing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run_common.sh"   # die, require_gpu, RUN_ROOT
cd "$RUN_ROOT"

OUT_DIR=${OUT_DIR:-profile_out}
NAME=${NAME:-d12}
NGPU=${NGPU:-1}

# nsys: $NSYS, the PATH, or the usual install places
nsys_bin=${NSYS:-}
if [ -z "$nsys_bin" ]; then
    nsys_bin=$(command -v nsys || true)
fi
if [ -z "$nsys_bin" ]; then
    for c in /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/nsight-systems-*/bin/nsys; do
        if [ -x "$c" ]; then nsys_bin=$c; break; fi
    done
fi
if [ -z "$nsys_bin" ] || [ ! -x "$nsys_bin" ]; then
    die "nsys (Nsight Systems) not found: install it (the CUDA toolkit's nsight-systems package) or set NSYS=/path/to/nsys"
fi
require_gpu "scripts/profile.sh"

# nothing here builds: on a GPU machine that cannot, these come in scripts/gpu_bundle.sh's bundle
data=dev/data/tinyshakespeare/tiny_shakespeare_train.bin
TRAINER=${TRAINER:-./train_gpt2_zero3}
[ -x "$TRAINER" ] || die "$TRAINER is not built: make train_gpt2_zero3 (or scripts/gpu_bundle.sh exec DIR scripts/profile.sh)"
[ -f "$data" ] || die "$data is missing: make data"

args=(-e d12 -b 16 -t 1024 -x 10 -v 0 -s 0 -r 0 -i "$data" -j "$data" "$@")
mkdir -p "$OUT_DIR"
nsys_extra=()
read -r -a nsys_extra <<< "${NSYS_ARGS:-}"
# one rank: nsys runs the trainer; several: the launcher runs one nsys per rank, each
# writing its own report, NAME_rankR. nsys expands %q{VAR} from the rank's environment; R
# is PROFILE_RANK, which a shell around nsys sets in each rank from the variable its
# launcher gives it (mpirun: OMPI_COMM_WORLD_RANK, srun: SLURM_PROCID)
rep="$OUT_DIR/$NAME"
mpi=() rank=()
if [ "$NGPU" != 1 ]; then
    case ${LAUNCHER:-mpirun} in
        mpirun)
            mpi=(mpirun -np "$NGPU")
            if [ "$(id -u)" = 0 ] && mpirun --version 2>&1 | grep -q "Open MPI"; then mpi+=(--allow-run-as-root); fi ;;
        srun)
            [ -n "${SLURM_JOB_ID:-}" ] || die "LAUNCHER=srun outside a SLURM allocation: run it under salloc or in a batch job"
            mpi=(srun --mpi=pmix --ntasks="$NGPU") ;;
        *) die "LAUNCHER=$LAUNCHER: mpirun or srun" ;;
    esac
    # shellcheck disable=SC2016  # expanded by the shell in each rank
    rank=(sh -c 'PROFILE_RANK=${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:-}}
[ -n "$PROFILE_RANK" ] || { echo "error: profile.sh: neither OMPI_COMM_WORLD_RANK nor SLURM_PROCID is set: start the ranks with mpirun or srun" >&2; exit 1; }
export PROFILE_RANK; exec "$@"' sh)
    rep="$OUT_DIR/${NAME}_rank%q{PROFILE_RANK}"
fi
profile=("${rank[@]}" "$nsys_bin" profile "--trace=cuda,nvtx,cublas" --sample=none --cpuctxsw=none
         --cuda-memory-usage=true --force-overwrite=true --output="$rep" "${nsys_extra[@]}")

echo "profiling: ${mpi[*]:+${mpi[*]} }$TRAINER ${args[*]}"
if ! "${mpi[@]}" "${profile[@]}" "$TRAINER" "${args[@]}" 2>&1 | tee "$OUT_DIR/$NAME.log"; then
    die "the profiled run failed (its output: $OUT_DIR/$NAME.log)"
fi

# report names changed in Nsight Systems 2023.x (nvtxsum -> nvtx_sum, ...): use what this one has
if "$nsys_bin" stats --help-reports 2>&1 | grep -q cuda_gpu_kern_sum; then
    reports=nvtx_sum,cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum,cuda_gpu_mem_size_sum
else
    reports=nvtxsum,gpukernsum,cudaapisum,gpumemtimesum,gpumemsizesum
fi
shopt -s nullglob
reps=("$OUT_DIR/$NAME"*.nsys-rep)
[ ${#reps[@]} -gt 0 ] || die "nsys wrote no .nsys-rep in $OUT_DIR"
for r in "${reps[@]}"; do
    echo "=== $r"
    "$nsys_bin" stats --force-export=true --report "$reports" "$r" | tee "${r%.nsys-rep}_stats.txt"
done
echo "reports: ${reps[*]} (open them in nsys-ui); summaries: $OUT_DIR/*_stats.txt"
