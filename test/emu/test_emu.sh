#!/usr/bin/env bash
# The emulator's own test (build/test_emu, test/emu/test_emu.cc): the launch limits, copy
# kinds, shared-memory poison and the runtime's error answers; then each deliberate ordering
# bug stops the run with the race checker's message on every seed, and the same program
# with its wait in place runs through. ("thread": a second host thread, as --dpu's CPU Adam.)
source "$(dirname "$0")/../e2e/lib.sh"
T=./build/test_emu
if $T > "$tmp/limits.log" 2>&1; then ok "limits and answers ($(tail -1 "$tmp/limits.log"))"
else bad "limits and answers"; grep FAIL "$tmp/limits.log" | sed 's/^/  /'; fi
for c in kernels copy stale-event host-pinned host-device thread legacy; do
    for seed in 1 2 3; do
        bash -c 'EMU_SEED=$0 "$1" "$2" bug; exit $?' "$seed" "$T" "$c" > "$tmp/$c.log" 2>&1   # (its "Aborted" in the log)
        rc=$?
        if [ $rc -ne 0 ] && grep -q "emulated CUDA: \(RACE\|host code\|a host thread\)" "$tmp/$c.log"; then ok "$c, seed $seed: caught ($(grep -m1 -o 'RACE[^,]*\|host code [a-z]* device memory\|host thread [a-z]* device memory' "$tmp/$c.log"))"
        else bad "$c, seed $seed: not caught (exit $rc)"; fi
        if EMU_SEED=$seed $T $c ok > "$tmp/$c.ok.log" 2>&1 && grep -q "no race" "$tmp/$c.ok.log"; then ok "$c, seed $seed: with the wait, no race"
        else bad "$c, seed $seed: with the wait, stopped"; head -3 "$tmp/$c.ok.log" | sed 's/^/  /'; fi
    done
done
finish
