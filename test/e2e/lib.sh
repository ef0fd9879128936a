# Shared by the end-to-end test scripts (test_trainer.sh, test_zero.sh, test_offload.sh):
# sourced, not run. Sets up a temporary directory, the pass/fail counters and the
# helpers below; the script ends with `finish`, which prints "N passed, N failed".
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BIN=${BIN:-./train_gpt2_zero3_cpu}  # BIN=build/train_gpt2_zero3_cpu_asan: the sanitized build (make test)
PY=${PY:-/usr/bin/python3}   # Debian's python3: it has numpy and torch (override where torch lives elsewhere)
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1   # the same arithmetic in every run
tmp=$(mktemp -d)
# (KEEP_TMP=1: the directory stays, for a failure's files, and its path is said at the end)
# shellcheck disable=SC2016  # expanded when the trap runs
trap '[ -n "${KEEP_TMP:-}" ] && echo "kept $tmp" >&2 || rm -rf "$tmp"' EXIT
pass=0; fail=0; skips=0
ok()  { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
# skip WHAT: a check that cannot run here, said by name (never counted as passed;
# test/run_all.sh lists the suites that skipped some)
skip() { echo "SKIP $1"; skips=$((skips + 1)); }
finish() {
    local s=""; [ "$skips" -gt 0 ] && s=", $skips skipped"
    echo "$pass passed, $fail failed$s"; [ "$fail" -eq 0 ]
}

# run NAME N ARGS...: the trainer on N ranks, with --report $tmp/NAME.json and the
# output in $tmp/NAME.log; says why when it fails
run() {
    local name=$1 n=$2; shift 2
    $MPIRUN -np "$n" $BIN "$@" --report "$tmp/$name.json" > "$tmp/$name.log" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || echo "  ($name: exit $rc: $(grep -m1 -i error "$tmp/$name.log"))"
    return $rc
}

# the losses of a report, one per line, as JSON holds them (17 significant digits)
losses() { $PY -c "import json,sys; [print(repr(s['loss'])) for s in json.load(open(sys.argv[1]))['steps']]" "$1"; }

# the largest |a - b| over two files of losses, or "length-mismatch"
maxdiff() { $PY -c "
import sys
a=[float(x) for x in open(sys.argv[1])]; b=[float(x) for x in open(sys.argv[2])]
print(max(abs(x-y) for x,y in zip(a,b)) if len(a)==len(b) and a else 'length-mismatch')" "$1" "$2"; }

# within TOL: exit 0 when a maxdiff result is a number no larger than TOL
within() { $PY -c "import sys; sys.exit(0 if '$1' != 'length-mismatch' and float('$1') <= $2 else 1)"; }

# engine_state FILE: a checkpoint state file from the engine's section on (ZeroStateHeader's
# magic), without the trainer's header (step, data position)
engine_state() { $PY -c "
import sys; b = open(sys.argv[1], 'rb').read(); sys.stdout.buffer.write(b[b.index((20241125).to_bytes(4, 'little')):])" "$1"; }

# expect_error NAME NEEDLE COMMAND...: the command fails with an exit code (not a
# signal) and its output names NEEDLE
expect_error() {
    local name=$1 needle=$2; shift 2
    "$@" > "$tmp/out" 2> "$tmp/err"
    local rc=$?
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && cat "$tmp/out" "$tmp/err" | grep -qF -- "$needle"; then
        ok "error: $name"
    else
        bad "error: $name (exit $rc: $(cat "$tmp/out" "$tmp/err" | grep -m2 -i -E 'error|warn' | tr '\n' ' '))"
    fi
}

# wait_for FILE TEXT SECONDS: until FILE contains TEXT (0), or the time is up (1)
wait_for() {
    local i
    for ((i = 0; i < $3 * 10; i++)); do grep -qF -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    return 1
}
