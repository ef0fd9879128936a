#!/usr/bin/env bash
# Builds each libFuzzer harness of test/fuzz (the Makefile's build/fuzz/fuzz_<parser>)
# and runs it for a bounded time on a temporary copy of its seed corpus
# (test/fuzz/corpus/<parser>/). A crash, a leak, UB, a timeout or running out of memory is
# a failure; each harness's executions are printed. Ends with "N passed, N failed".
#   FUZZ_TIME=10 (seconds per harness)  FUZZ_ONLY="model shard" (a subset)
# A finding is left in build/fuzz/<parser>/crash-* (libFuzzer's artifact): add it to the
# corpus once fixed, so that every later run replays it.
set -u
cd "$(dirname "$0")/../.."
source test/e2e/lib.sh  # ok, bad, finish; $tmp
FUZZ_TIME=${FUZZ_TIME:-10}
PARSERS=${FUZZ_ONLY:-model shard tokenizer checkpoint ds_config}
out=build/fuzz
mkdir -p "$out"

if ! command -v "${CLANG:-clang}" > /dev/null; then
    bad "clang not found (make deps installs clang and libclang-rt-14-dev)"; finish; exit 1
fi
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

for p in $PARSERS; do
    bin=$out/fuzz_$p
    # the Makefile's rule (clang -fsanitize=fuzzer,address,undefined); nothing when up to date
    if ! make -s "$bin" > "$out/build_$p.log" 2>&1; then
        cat "$out/build_$p.log"; bad "fuzz_$p builds"; continue
    fi
    # the valid seeds are accepted: a reader that refused everything would pass the fuzzing
    if FUZZ_MUST_ACCEPT=1 "$bin" test/fuzz/corpus/$p/ok_* > "$out/accept_$p.log" 2>&1; then
        ok "fuzz_$p: the valid seeds are accepted ($(ls test/fuzz/corpus/$p/ok_* | wc -l) files)"
    else
        grep -m3 'fuzz:\|ERROR' "$out/accept_$p.log"; bad "fuzz_$p: a valid seed refused (log: $out/accept_$p.log)"
    fi
    corpus=$tmp/corpus_$p; mkdir -p "$corpus"
    cp test/fuzz/corpus/$p/* "$corpus"/
    mkdir -p "$out/$p"
    rm -f "$out/$p"/crash-* "$out/$p"/leak-* "$out/$p"/timeout-* "$out/$p"/oom-*
    "$bin" -max_total_time="$FUZZ_TIME" -rss_limit_mb=1024 -timeout=5 -print_final_stats=1 \
        -artifact_prefix="$out/$p/" "$corpus" > "$out/run_$p.log" 2>&1
    rc=$?
    rm -rf "$corpus"
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$out/run_$p.log" | grep -o '[0-9]*$')
    finding=$(ls "$out/$p" 2>/dev/null | head -1)
    if [ $rc -eq 0 ] && [ -z "$finding" ]; then
        ok "fuzz_$p: ${FUZZ_TIME}s, ${execs:-?} executions, no finding"
    else
        grep -E 'ERROR|runtime error|SUMMARY|Test unit written' "$out/run_$p.log" | head -8
        bad "fuzz_$p: exit $rc after ${execs:-?} executions, finding: ${finding:-none saved} (log: $out/run_$p.log)"
    fi
done
finish
