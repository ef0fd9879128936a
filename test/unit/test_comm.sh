#!/usr/bin/env bash
# Runs the zero3/comm.h tests at world sizes 1..4, for the plain build and for the one
# compiled with a tiny ZERO_COMM_CHUNK (the chunked all-gather / reduce-scatter layouts).
# Builds nothing; expects
#   build/test_comm_mpi        mpicc -O2 -Wall -Wextra -I. test/unit/test_comm_mpi.c -o build/test_comm_mpi
#   build/test_comm_mpi_chunk  the same with -DZERO_COMM_CHUNK=7
# (COMM_EXES="build/asan/test_comm_mpi": other builds, the sanitized one in make test)
# Sums every run's "N passed, N failed" into one closing line of that form and exits
# non-zero when anything failed, a run exited non-zero, or a run printed no result line.
set -u
cd "$(dirname "$0")/../.."
passed=0; failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# as root mpirun needs --allow-run-as-root; more ranks than cores needs --oversubscribe
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)

for exe in ${COMM_EXES:-build/test_comm_mpi build/test_comm_mpi_chunk}; do
    for np in 1 2 3 4; do
        echo "=== $exe, $np rank(s)"
        if [ ! -x "$exe" ]; then
            echo "!!! $exe is missing (build it first)"
            failed=$((failed + 1)); continue
        fi
        # a hung collective must not hang the suite
        timeout 300 "${MPIRUN[@]}" -np "$np" "$exe" 2>&1 | tee "$log"
        rc=${PIPESTATUS[0]}
        if line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1) && [ -n "$line" ]; then
            p=$(sed -E 's/^([0-9]+) passed.*/\1/' <<< "$line")
            f=$(sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/' <<< "$line")
            passed=$((passed + p)); failed=$((failed + f))
            # a run that reported no failure but exited non-zero still counts as one
            if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
                echo "!!! exit code $rc"; failed=$((failed + 1))
            fi
        else
            echo "!!! no result line (exit code $rc)"
            failed=$((failed + 1))
        fi
    done
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
