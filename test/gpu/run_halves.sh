#!/usr/bin/env bash
# run_halves.sh "SECTIONS A" "SECTIONS B": test/gpu/test_gpu_trainer.sh as two processes at
# once, each with SECTIONS set to one half (make test on 2 cores: the emulated trainer's runs
# are single-threaded, OMP_NUM_THREADS=1, so one half a core). Every section the script has
# must be in exactly one half (else a FAIL); the sections a half compares against that
# the other half makes, and the three runs every section compares against, each half makes
# for itself (test_gpu_trainer.sh's `baseline`), so each check runs once and asserts what it
# asserts in one process. Both outputs are printed whole, one after the other; the closing
# "N passed, N failed" is their sum, and a half that printed no result line, or exited
# non-zero, fails the run. The environment (GPU, GPU32, EMU_SEED, MAX_RANKS...) passes on.
set -u
cd "$(dirname "$0")/../.."
SCRIPT=test/gpu/test_gpu_trainer.sh
[ $# -eq 2 ] || { echo "usage: $0 \"SECTIONS A\" \"SECTIONS B\""; echo "0 passed, 1 failed"; exit 1; }
halves=("$1" "$2")
# the script's sections, as its `if section NAME` lines name them
mapfile -t all < <(sed -nE 's/^if section ([a-z_0-9]+)[ ;].*/\1/p' "$SCRIPT")
[ ${#all[@]} -gt 0 ] || { echo "FAIL no sections found in $SCRIPT"; echo "0 passed, 1 failed"; exit 1; }
pass=0; fail=0
for s in "${all[@]}"; do
    n=0
    for h in "${halves[@]}"; do [[ " $h " == *" $s "* ]] && n=$((n + 1)); done
    [ $n -eq 1 ] || { echo "FAIL section $s is in $n halves, not 1"; fail=$((fail + 1)); }
done
for h in "${halves[@]}"; do
    for s in $h; do
        [[ " ${all[*]} " == *" $s "* ]] || { echo "FAIL $s is not a section of $SCRIPT"; fail=$((fail + 1)); }
    done
done
[ $fail -eq 0 ] || { echo "0 passed, $fail failed"; exit 1; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pids=()
for i in 0 1; do
    SECTIONS="${halves[$i]}" bash "$SCRIPT" > "$out/$i" 2>&1 &
    pids+=($!)
done
rc=0
for i in 0 1; do
    wait "${pids[$i]}"; r=$?
    echo "--- sections: ${halves[$i]} (exit $r)"
    # the half's own closing line is summed below, not repeated
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out/$i" | tail -1)
    grep -vxF -- "$line" "$out/$i"
    if [ -z "$line" ]; then
        echo "FAIL the half \"${halves[$i]}\" printed no result line"; fail=$((fail + 1))
    else
        pass=$((pass + $(sed -E 's/^([0-9]+) passed.*/\1/' <<< "$line")))
        fail=$((fail + $(sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/' <<< "$line")))
    fi
    [ "$r" -eq 0 ] || rc=1
done
# (the halves' SKIP lines are printed above; test/run_all.sh counts them by name)
echo "$pass passed, $fail failed"
[ $rc -eq 0 ] && [ $fail -eq 0 ]
