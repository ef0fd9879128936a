#!/usr/bin/env bash
# The body of every job script in scripts/slurm/ (sourced by none: the .sbatch files exec it):
#   scripts/slurm/job.sh RUN_SCRIPT [trainer flags...]
# runs scripts/RUN_SCRIPT (a run_gpt2_*.sh / run_gpt3_*.sh recipe, scripts/run_common.sh)
# inside the batch job with srun instead of mpirun: LAUNCHER=srun (`srun --mpi=pmix
# --ntasks=$SLURM_NTASKS --kill-on-bad-exit=1`, one task per GPU as the job script asked),
# REQUEUE=1 (a run stopped by the job's preemption signal requeues the job, which resumes
# from its checkpoint: the run scripts always pass -y 1), and --stop-grace $STOP_GRACE (how
# long a rank may take to reach the step boundary after the signal before it is ended
# without a checkpoint: less than the signal's lead time, by what a checkpoint takes to
# write). Every setting of the run scripts (TRAIN_DATA, OUT_DIR, EXTRA_ARGS, ...) reaches
# the run: sbatch passes the submitting shell's environment (--export=ALL, the default).
# OUT_DIR (default log_NAME in the repository) must be on storage every node sees: each
# rank writes its own shard of every checkpoint there.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "error: $*" >&2; exit 1; }

[ $# -ge 1 ] || die "usage: scripts/slurm/job.sh RUN_SCRIPT [trainer flags...] (the job scripts in scripts/slurm/ call it)"
run=$here/../$1; shift
[ -f "$run" ] || die "no run script $run"
if [ "${DRY_RUN:-0}" != 1 ]; then
    [ -n "${SLURM_JOB_ID:-}" ] || die "not inside a SLURM job: submit the job script, sbatch scripts/slurm/NAME.sbatch (DRY_RUN=1 prints the command)"
    echo "job ${SLURM_JOB_ID} (restart ${SLURM_RESTART_COUNT:-0}) on ${SLURM_JOB_NODELIST:-?}: ${SLURM_NTASKS:-?} tasks"
fi
export LAUNCHER=srun REQUEUE=${REQUEUE:-1}
export EXTRA_ARGS="--stop-grace ${STOP_GRACE:-60}${EXTRA_ARGS:+ $EXTRA_ARGS}"
exec bash "$run" "$@"
