#!/bin/bash
# The trainer against the PyTorch float64 reference, end to end.
#
# Run from the repository root, after building ./train_gpt2_zero3_cpu and build/test_gpt2
# (build lines in test/e2e/test_gpt2.c and the project's README):
#     test/e2e/test_reference.sh
#
#  1. test/e2e/ref_gpt2.py writes into a temporary directory a small random model (model.bin),
#     a token shard (train.bin) and the reference values (ref.bin): logits, loss, every
#     gradient and the losses / grad norms of 10 AdamW steps on one batch.
#  2. build/test_gpt2 checks the model code (forward, backward, update) against ref.bin.
#  3. The trainer binary runs the same 10 steps (-a 1 overfits the shard's first batch,
#     -u 0 -q 1.0 makes the cosine schedule a constant 1e-3, -c 0.1 weight decay, the
#     default --grad-clip 1.0) and every loss and grad norm of its --report JSON is checked.
#  4. The project's standard overfit run (-x 8, validation and sampling left at their
#     defaults; -i/-j point at the test shard, since the default data is not this model's
#     vocabulary) must reproduce the first 8 reference losses.
#
# Tolerances: as in test/e2e/test_gpt2.c, tol = max(10 * d, 16 * 2^-24 * |reference|), where d
# is the measured PyTorch float32-vs-float64 discrepancy of that same quantity (stored in
# ref.bin by ref_gpt2.py). The trainer is an fp32 program whose results differ from an
# fp32 PyTorch run only in the order of the roundings, so its error is of the size of d up
# to a small factor; the 16-ulp floor covers the steps where PyTorch's fp32 landed almost
# exactly on the fp64 value (the logged loss is an fp32 number: it cannot be closer than
# half an ulp). A wrong loss or update moves these numbers by 1e-4 relative or more.
#
# Ends with "N passed, N failed" over all checks (those of build/test_gpt2 included);
# exit status 1 on any failure.
set -u
PY=/usr/bin/python3  # Debian's python3, which has torch
TRAINER=./train_gpt2_zero3_cpu
TEST_BIN=build/test_gpt2

passed=0
failed=0
pass() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }

finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ] && exit 0 || exit 1
}

for f in "$TRAINER" "$TEST_BIN"; do
    if [ ! -x "$f" ]; then
        echo "error: $f not built (run from the repository root after building it)"
        failed=$((failed + 1))
        finish
    fi
done

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# 1. the reference
if ! $PY test/e2e/ref_gpt2.py "$TMP" > "$TMP/ref.log" 2>&1; then
    cat "$TMP/ref.log"
    fail "test/e2e/ref_gpt2.py"
    finish
fi
pass
echo "ok: test/e2e/ref_gpt2.py wrote model.bin, train.bin, ref.bin"

# 2. the model code against the reference
"$TEST_BIN" "$TMP" > "$TMP/test_gpt2.log" 2>&1
rc=$?
cat "$TMP/test_gpt2.log"
summary=$(tail -n 1 "$TMP/test_gpt2.log")
if [[ "$summary" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
    passed=$((passed + BASH_REMATCH[1]))
    failed=$((failed + BASH_REMATCH[2]))
    if [ "$rc" -ne 0 ] && [ "${BASH_REMATCH[2]}" -eq 0 ]; then fail "$TEST_BIN exited with $rc"; fi
else
    fail "$TEST_BIN did not finish (exit $rc)"
fi

# compares the "steps" of a --report JSON with the first N reference steps; prints one
# line per check and a last line "P F" (passed, failed)
check_report() {  # report N what
    $PY test/e2e/check_report.py "$TMP/ref.bin" "$1" "$2" "$3"
}

run_trainer() {  # name N args...
    local name=$1 n=$2
    shift 2
    echo "running: $TRAINER $* --report $TMP/$name.json"
    if ! "$TRAINER" "$@" --report "$TMP/$name.json" > "$TMP/$name.log" 2>&1; then
        tail -n 20 "$TMP/$name.log"
        fail "$name: the trainer exited with an error"
        return
    fi
    check_report "$TMP/$name.json" "$n" "$name" > "$TMP/$name.check" 2>&1
    sed '$d' "$TMP/$name.check"
    read -r p f < <(tail -n 1 "$TMP/$name.check")
    if [[ "$p" =~ ^[0-9]+$ && "$f" =~ ^[0-9]+$ ]]; then
        passed=$((passed + p))
        failed=$((failed + f))
    else
        fail "$name: could not check the report"
    fi
}

# 3. the trainer, 10 steps, validation and sampling off
run_trainer trainer10 10 -e "$TMP/model.bin" -i "$TMP/train.bin" -j "$TMP/train.bin" \
    -b 8 -t 64 -a 1 -x 10 -l 1e-3 -u 0 -q 1.0 -c 0.1 -v 0 -s 0

# 4. the standard overfit run, 8 steps
run_trainer overfit8 8 -e "$TMP/model.bin" -i "$TMP/train.bin" -j "$TMP/train.bin" \
    -b 8 -t 64 -a 1 -x 8 -l 1e-3 -u 0 -q 1.0 -c 0.1

finish
