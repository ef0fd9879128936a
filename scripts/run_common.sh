# shellcheck shell=bash
# Shared by scripts/run_gpt2_*.sh and scripts/run_gpt3_*.sh: sourced, not run. A run
# script sets the recipe (the variables below) and calls `run_main "$@"`; this file turns
# it into one `mpirun -np $NGPU ./train_gpt2_zero3 ...` command (or `srun --mpi=pmix ...`
# inside a SLURM job: LAUNCHER=srun, as scripts/slurm/*.sbatch set it), checks it, and runs it.
#
# Set by the run script (the recipe):
#   NAME MODEL T TOTAL_BATCH LR FINAL_LR_FRAC WARMUP WEIGHT_DECAY STEPS
#   DEF_B DEF_RECOMPUTE DEF_STAGE (0..3, or auto: 0 on one GPU, 1 on several)
#   DEF_OFFLOAD_OPT DEF_OFFLOAD_PARAM (none|cpu|nvme) DEF_DATA (shard prefix)
#   VAL_EVERY SAMPLE_EVERY GEN_T CKPT_EVERY
# Environment overrides (all optional):
#   NGPU=1                 ranks (one per GPU) for mpirun -np; under LAUNCHER=srun the
#                          job's tasks (SLURM_NTASKS) when unset
#   LAUNCHER=mpirun        or srun: `srun --mpi=pmix --ntasks=NGPU --kill-on-bad-exit=1`
#                          inside a SLURM allocation (sbatch or salloc); SRUN_ARGS adds
#                          srun options (word-split), as MPI_ARGS does mpirun's
#   REQUEUE=0              1 (LAUNCHER=srun in a batch job): when the trainer stopped early
#                          on a signal (the job's preemption notice, #SBATCH --signal=USR1@T:
#                          a checkpoint and exit 0) and the final checkpoint is not there,
#                          `scontrol requeue` the job, which then resumes (-y 1)
#   TRAIN_DATA, VAL_DATA   shard globs (default ${DEF_DATA}_train_*.bin / _val_*.bin)
#   OUT_DIR                logs and checkpoints (default log_$NAME); re-running resumes (-y 1)
#   MICRO_BATCH RECOMPUTE ZERO_STAGE OFFLOAD_OPTIMIZER OFFLOAD_PARAM NVME_PATH MAX_STEPS
#   EXTRA_ARGS             more trainer flags (word-split); later flags override earlier
#                          ones, and so do the script's own arguments, which come last
#   MPI_ARGS               more mpirun options (word-split); --allow-run-as-root is added
#                          for Open MPI when run as root
#   TRAINER                the binary (default ./train_gpt2_zero3)
#   DRY_RUN=1              print the plan and the command, check nothing on disk, run nothing
#   HELLASWAG=auto         -h 1 (llm.c's HellaSwag eval, as its scripts run it) when the
#                          eval file dev/data/hellaswag/hellaswag_val.bin is there and B >= 4;
#                          0 or 1 to say (make the file: ./tokenize --hellaswag IN.jsonl OUT)
#   MAX_RESTARTS=0         relaunch after a crash this many times (each resumes from the
#                          latest checkpoint, like llm.c's while-true loop)
# Relative paths are relative to the repository root (the scripts cd there).
#
# Memory: both figures come from the trainer itself, `./train_gpt2_zero3_cpu FLAGS
# --estimate 1:NGPU` (no GPU needed): the per-GPU model states from zero3/estimate.h (bf16
# params and grads + fp32 master and Adam moments = 16 bytes/param at stage 0), and the
# activations from llmc/activations.h, the table the GPU trainer allocates from. The
# recipes use the default cuBLAS attention, which keeps the (B, NH, T, T) probabilities of
# every layer, so at T=2048 the attention matrices dominate; EXTRA_ARGS="--attention flash"
# (head sizes 64, 80, 96, 128) keeps a float per row instead. Every recipe is chosen so that
# model states + activations <= FIT_GIB (70 GiB) on one GPU. That leaves about 9 GiB of an
# 80 GB GPU (79.6 GiB usable) for the CUDA context, cuBLAS(Lt) workspaces, NCCL buffers and
# allocator slack. test/e2e/test_scripts.sh checks this for every script.

RUN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FIT_GIB=70
VOCAB_PADDED=50304

die() { echo "error: $*" >&2; exit 1; }

# require_gpu WHAT: stop with a message unless nvidia-smi lists a GPU
require_gpu() {
    if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
        die "no NVIDIA GPU found (nvidia-smi -L lists none): $1 needs one"
    fi
}

# model_shape DESCRIPTOR -> "layers heads channels max_seq_len". GPT-2 sizes by depth as
# in llm.c (d24 = GPT-2 medium: 1024 channels, 16 heads; d36 = large; d48 = XL), GPT-3
# sizes as llmc/gpt2.h's gpt3_sizes (Brown et al. 2020, table 2.1, 1.3B with 16 heads of 128).
model_shape() {
    case "$1" in
        d12|gpt2:d12) echo "12 12 768 1024" ;;
        d24|gpt2:d24) echo "24 16 1024 1024" ;;
        d36|gpt2:d36) echo "36 20 1280 1024" ;;
        d48|gpt2:d48) echo "48 25 1600 1024" ;;
        gpt3:c768)  echo "12 12 768 2048" ;;
        gpt3:c1024) echo "24 16 1024 2048" ;;
        gpt3:c1536) echo "24 16 1536 2048" ;;
        gpt3:c2048) echo "24 16 2048 2048" ;;
        gpt3:c2560) echo "32 32 2560 2048" ;;
        gpt3:c4096) echo "32 32 4096 2048" ;;
        gpt3:c5120) echo "40 40 5120 2048" ;;
        *) return 1 ;;
    esac
}

# model_params L C MAXT: wte (Vp x C) + wpe (maxT x C) + L blocks (12 C^2 + 13 C) + lnf (2 C)
model_params() {
    awk -v L="$1" -v C="$2" -v M="$3" -v V="$VOCAB_PADDED" \
        'BEGIN { printf "%.0f\n", V*C + M*C + L*(12*C*C + 13*C) + 2*C }'
}

# act_gib FLAGS...: GiB of activations the GPU trainer allocates with these flags, as the
# trainer's --estimate prints them ("unknown" without ./train_gpt2_zero3_cpu: make it first)
act_gib() {
    local est="$RUN_ROOT/train_gpt2_zero3_cpu" gib
    [ -x "$est" ] || { echo unknown; return; }
    gib=$("$est" "$@" --estimate 1:1 2>/dev/null | sed -nE 's/^activations: ([0-9.]+) GiB.*/\1/p')
    echo "${gib:-unknown}"
}

# requeue_if_stopped OUT STEPS: after the trainer exited 0 under REQUEUE=1 in a batch job,
# without its final checkpoint: it stopped on a signal (the preemption notice of #SBATCH
# --signal, a checkpoint written), so the job goes back to the queue to resume from it.
# Exit 0 either way: the job did what it could in its time
requeue_if_stopped() {
    [ "${REQUEUE:-0}" = 1 ] && [ -n "${SLURM_JOB_ID:-}" ] || return 0
    ./checkpoint_tool verify "$1" "$2" > /dev/null 2>&1 && return 0
    echo "the trainer stopped before step $2 (a signal: its checkpoint is in $1): requeueing job $SLURM_JOB_ID to resume"
    scontrol requeue "$SLURM_JOB_ID" || die "scontrol requeue $SLURM_JOB_ID failed: resubmit this job to resume from $1"
}

# run_main [trainer flags...]: build the command from the recipe and the environment,
# print it, and run it (or only print it with DRY_RUN=1)
run_main() {
    local ngpu=${NGPU:-1}
    local b=${MICRO_BATCH:-$DEF_B} r=${RECOMPUTE:-$DEF_RECOMPUTE}
    local stage=${ZERO_STAGE:-$DEF_STAGE}
    local opt=${OFFLOAD_OPTIMIZER:-$DEF_OFFLOAD_OPT} param=${OFFLOAD_PARAM:-$DEF_OFFLOAD_PARAM}
    local steps=${MAX_STEPS:-$STEPS}
    local train=${TRAIN_DATA:-${DEF_DATA}_train_*.bin} val=${VAL_DATA:-${DEF_DATA}_val_*.bin}
    local out=${OUT_DIR:-log_$NAME} trainer=${TRAINER:-./train_gpt2_zero3}
    local dry=${DRY_RUN:-0} launcher=${LAUNCHER:-mpirun}
    cd "$RUN_ROOT" || die "cannot cd to $RUN_ROOT"
    case $launcher in
        mpirun) ;;
        srun) if [ -z "${NGPU:-}" ] && [ -n "${SLURM_NTASKS:-}" ]; then ngpu=$SLURM_NTASKS; fi ;;
        *) die "LAUNCHER=$launcher: mpirun or srun" ;;
    esac

    [[ $ngpu =~ ^[1-9][0-9]*$ ]] || die "NGPU=$ngpu: a positive number of GPUs"
    [[ $b =~ ^[1-9][0-9]*$ ]] || die "MICRO_BATCH=$b: a positive integer"
    if [ "$stage" = auto ]; then stage=$((ngpu > 1 ? 1 : 0)); fi
    local per_micro=$((b * T * ngpu))
    if [ $((TOTAL_BATCH % per_micro)) -ne 0 ]; then
        die "total batch $TOTAL_BATCH tokens is not a multiple of B*T*NGPU = $b*$T*$ngpu = $per_micro: change MICRO_BATCH or NGPU"
    fi

    local args=(-i "$train" -j "$val" -o "$out" -e "$MODEL"
                -b "$b" -t "$T" -d "$TOTAL_BATCH" -x "$steps"
                -k cosine -l "$LR" -q "$FINAL_LR_FRAC" -u "$WARMUP" -c "$WEIGHT_DECAY" --grad-clip 1.0
                -v "$VAL_EVERY" -s "$SAMPLE_EVERY" -g "$GEN_T" -n "$CKPT_EVERY" -y 1
                -r "$r" -z "$stage")
    local hs=${HELLASWAG:-auto} hs_file=dev/data/hellaswag/hellaswag_val.bin
    if [ "$hs" = auto ]; then
        hs=0
        if [ "$b" -ge 4 ] && [ -f "$hs_file" ]; then hs=1; fi
        if [ "$hs" = 0 ]; then echo "# no HellaSwag eval (-h 0): $hs_file is not there, or B < 4 (HELLASWAG=1 to insist)"; fi
    fi
    [[ $hs =~ ^[01]$ ]] || die "HELLASWAG=$hs: auto, 0 or 1"
    args+=(-h "$hs")
    if [ "$opt" != none ]; then args+=(--offload-optimizer "$opt"); fi
    if [ "$param" != none ]; then args+=(--offload-param "$param"); fi
    if [ "$opt" = nvme ] || [ "$param" = nvme ]; then
        [ -n "${NVME_PATH:-}" ] || die "NVMe offload needs NVME_PATH=/a/directory/on/nvme"
        args+=(--nvme-path "$NVME_PATH")
    fi
    local extra=()
    read -r -a extra <<< "${EXTRA_ARGS:-}"
    args+=("${extra[@]}" "$@")

    local mpi mpi_extra=()
    if [ "$launcher" = srun ]; then
        # PMIx: how Open MPI's ranks find each other under srun (without it every task is a
        # world of one, which the trainer refuses); a rank that dies ends the step at once
        # rather than leaving the others waiting in a collective
        mpi=(srun --mpi=pmix --ntasks="$ngpu" --kill-on-bad-exit=1)
        read -r -a mpi_extra <<< "${SRUN_ARGS:-}"
    else
        mpi=(mpirun -np "$ngpu")
        if [ "$(id -u)" = 0 ] && mpirun --version 2>&1 | grep -q "Open MPI"; then mpi+=(--allow-run-as-root); fi
        read -r -a mpi_extra <<< "${MPI_ARGS:-}"
    fi
    mpi+=("${mpi_extra[@]}")
    local cmd=("${mpi[@]}" "$trainer" "${args[@]}")

    local shape L NH C M
    shape=$(model_shape "$MODEL") || die "no shape known for model $MODEL (scripts/run_common.sh: model_shape)"
    read -r L NH C M <<< "$shape"
    echo "# plan: name=$NAME model=$MODEL layers=$L heads=$NH channels=$C max_seq_len=$M" \
         "params=$(model_params "$L" "$C" "$M") B=$b T=$T recompute=$r ngpu=$ngpu" \
         "grad_accum=$((TOTAL_BATCH / per_micro)) stage=$stage offload_optimizer=$opt offload_param=$param" \
         "act_gib=$(act_gib "${args[@]}") fit_gib=$FIT_GIB"
    if [ "$dry" = 1 ]; then
        printf '%q ' "${cmd[@]}"
        echo
        return 0
    fi

    # a real run: the GPU, the binary, the data
    require_gpu "$trainer (DRY_RUN=1 prints the command instead)"
    if [ "$launcher" = srun ]; then
        command -v srun > /dev/null || die "srun not found: LAUNCHER=srun runs inside a SLURM job (sbatch scripts/slurm/...)"
        [ -n "${SLURM_JOB_ID:-}" ] || die "LAUNCHER=srun outside a SLURM allocation: submit with sbatch (scripts/slurm/) or run under salloc"
    else
        command -v mpirun > /dev/null || die "mpirun not found: install Open MPI (scripts/install_deps.sh)"
    fi
    if [ ! -x "$trainer" ]; then
        if [ "$trainer" = ./train_gpt2_zero3 ]; then make train_gpt2_zero3; else die "trainer $trainer not found"; fi
    fi
    compgen -G "$train" > /dev/null || die "no training shards match $train: make them with llm.c's dev/data/fineweb.py (same format), or set TRAIN_DATA"
    if [ "$VAL_EVERY" != 0 ] && ! compgen -G "$val" > /dev/null; then
        die "no validation shards match $val: set VAL_DATA, or add -v 0"
    fi
    local done_file
    done_file=$(printf '%s/DONE_%08d' "$out" "$steps")
    # complete only when the final checkpoint verifies: an empty or damaged marker is not one
    # (the trainer then resumes from the newest checkpoint that passes its checks)
    if [ -e "$done_file" ] || [ -L "$done_file" ]; then
        if ./checkpoint_tool verify "$out" "$steps" > /dev/null 2>&1; then
            echo "$done_file verifies: this run is complete"; return 0
        fi
        echo "$done_file is there but does not verify (./checkpoint_tool verify $out $steps says why): resuming"
    fi

    local tries=0
    while true; do
        echo "+ ${cmd[*]}"
        if "${cmd[@]}"; then requeue_if_stopped "$out" "$steps"; return 0; fi
        tries=$((tries + 1))
        if [ "$tries" -gt "${MAX_RESTARTS:-0}" ]; then die "the trainer failed (re-run this script to resume from the latest checkpoint in $out)"; fi
        echo "the trainer failed: restart $tries of ${MAX_RESTARTS:-0}, resuming from the latest checkpoint"
        sleep 1
    done
}
