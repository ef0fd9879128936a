#!/usr/bin/env bash
# Offload through the trainer: --offload-optimizer cpu|nvme and --offload-param cpu|nvme give
# bit for bit the losses of the same run without offload, at N=1 and N=2 and stages 1-3; the NVMe
# pipeline with many small sub-groups and few buffers; resume from NVMe-held state;
# the report's host/NVMe bytes and transfers; clear errors for a bad NVMe path.
# Ends with "N passed, N failed".
source "$(dirname "$0")/lib.sh"   # $tmp, ok/bad/finish, run, losses, maxdiff, within, expect_error

if ! $PY test/e2e/ref_gpt2.py "$tmp" > "$tmp/ref.log" 2>&1; then cat "$tmp/ref.log"; echo "0 passed, 1 failed"; exit 1; fi
mkdir -p "$tmp/nvme"
STD="-e $tmp/model.bin -i $tmp/train.bin -j $tmp/train.bin -t 64 -v 0 -s 0 -a 1 -x 8 -l 1e-3 -u 0 -q 1.0 -c 0.1"
# Offload moves the optimizer's state, not its arithmetic: every path updates with the
# same SIMD CPU Adam, whose result does not depend on how a range is split (tiles,
# threads, sub-groups), and the copies are exact. So the losses must be equal to the
# last bit; any difference is a stale copy, a wrong shard or a lost group.
same_losses() {  # a.json b.json -> exit 0 if the losses are bit-identical
    losses "$1" > "$tmp/la"; losses "$2" > "$tmp/lb"
    [ -s "$tmp/la" ] && cmp -s "$tmp/la" "$tmp/lb"
}

for n in 1 2; do
    B=$((8 / n))
    for z in 1 2 3; do
        run "base${n}_$z" $n $STD -b $B -z $z || { bad "N=$n stage $z baseline"; continue; }
        configs=("--offload-optimizer cpu")
        [ $z = 3 ] && configs+=("--offload-optimizer nvme --nvme-path $tmp/nvme"
                                "--offload-optimizer nvme --nvme-path $tmp/nvme --sub-group-size 3000"
                                "--offload-param cpu"
                                "--offload-param cpu --offload-optimizer nvme --nvme-path $tmp/nvme --sub-group-size 5000"
                                "--offload-param nvme --max-in-cpu 0 --param-persistence-threshold 0 --offload-optimizer cpu --nvme-path $tmp/nvme"
                                # the deferred update: the blocks (about 50000 elements) are not
                                # persistent, so the next forward carries the update through them;
                                # the embedding unit and the last layernorm are, and go first
                                "--offload-optimizer nvme --nvme-path $tmp/nvme --sub-group-size 3000 --param-persistence-threshold 30000"
                                "--offload-param nvme --max-in-cpu 0 --offload-optimizer nvme --nvme-path $tmp/nvme --sub-group-size 3000 --param-persistence-threshold 30000"
                                "--offload-param nvme --max-in-cpu 0 --offload-optimizer nvme --nvme-path $tmp/nvme --sub-group-size 3000 --param-persistence-threshold 0"
                                # (last: the report's check below reads this run's)
                                "--offload-param nvme --max-in-cpu 30000 --offload-optimizer nvme --nvme-path $tmp/nvme --sub-group-size 3000")
        for c in "${configs[@]}"; do
            if run off $n $STD -b $B -z $z $c; then
                same_losses "$tmp/base${n}_$z.json" "$tmp/off.json" && ok "N=$n stage $z $c: bit-identical losses to no offload" \
                    || bad "N=$n stage $z $c: losses differ: $(maxdiff "$tmp/la" "$tmp/lb")"
            else
                bad "N=$n stage $z $c run"
            fi
        done
    done
done
# the NVMe pipeline with 2 buffers (the fewest that overlap) and many groups, via JSON
cat > "$tmp/nv.json" <<EOF2
{"zero_optimization": {"stage": 3, "sub_group_size": 2048,
  "offload_optimizer": {"device": "nvme", "nvme_path": "$tmp/nvme", "buffer_count": 2, "pipeline_read": true, "pipeline_write": true}}}
EOF2
run nvjson 2 $STD -b 4 --ds-config "$tmp/nv.json" && same_losses "$tmp/base2_3.json" "$tmp/nvjson.json" \
    && ok "NVMe via --ds-config, 2 buffers, 2048-element groups: bit-identical" || bad "NVMe via --ds-config: losses differ or the run failed"
# the same without the step's reads ahead and writes behind (DeepSpeed's pipeline_* keys off),
# the update deferred into the next forward: the order of the bytes changes, not one of them
cat > "$tmp/nvsync_cfg.json" <<EOF2
{"zero_optimization": {"stage": 3, "sub_group_size": 2048, "stage3_param_persistence_threshold": 30000,
  "offload_optimizer": {"device": "nvme", "nvme_path": "$tmp/nvme", "buffer_count": 3, "pipeline_read": false, "pipeline_write": false},
  "offload_param": {"device": "nvme", "nvme_path": "$tmp/nvme", "max_in_cpu": 0}}}
EOF2
run nvsync 2 $STD -b 4 --ds-config "$tmp/nvsync_cfg.json" && same_losses "$tmp/base2_3.json" "$tmp/nvsync.json" \
    && ok "NVMe via --ds-config, pipeline_read and pipeline_write false, update deferred: bit-identical" \
    || bad "NVMe without pipelining: losses differ or the run failed"
ls "$tmp/nvme" | grep -q . && bad "swap files left in $tmp/nvme: $(ls "$tmp/nvme")" || ok "swap files removed at exit"

# report: where the bytes are and what moved
$PY - "$tmp/off.json" "$tmp/base2_3.json" <<'EOF2' && ok "report: host and NVMe bytes, transfers per step" || bad "report: offload accounting"
import json, sys
off, base = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
m, b = off["memory"]["per_rank"][0], base["memory"]["per_rank"][0]
shard = b["params"]                                   # fp32 shard bytes at stage 3
assert m["optimizer"] == 0 and b["optimizer"] == 2 * shard, (m, b)      # moments left the device
assert m["params"] == 0 and m["host_params"] == shard                   # --offload-param cpu
assert m["host_grads"] == 0 and m["nvme"] >= 4 * shard                  # master, m, v and the gradients on NVMe
t = off["transfers_per_step"]
assert t["device_to_host"] == shard and t["host_to_device"] >= shard    # grads out, params back (+ gathers)
assert t["nvme_read"] >= 4 * shard and t["nvme_write"] >= 4 * shard     # the step reads p, m, v, g, writes p, m, v
assert 0 <= t["update_nvme_wait_ms"] <= t["nvme_wait_ms"] and t["update_nvme_wait_ms"] <= t["update_ms"], t
assert b["host_params"] == 0 and base["transfers_per_step"]["nvme_read"] == 0
EOF2

# the gradient shards in the swap file, added into it at every micro-step of the accumulation:
# bit for bit the in-memory accumulator's sums, so the same losses and norms as no offload, at 2
# ranks and 3 micro-steps; the same through a skipped non-finite step (the next step's first
# micro-step must overwrite, not add to, what the skipped one left in the file)
A="-e $tmp/model.bin -i $tmp/train.bin -j $tmp/train.bin -t 64 -v 0 -s 0 -x 5 -l 1e-3 -c 0.1 -b 2 -d 768 -z 3"
norms() { $PY -c "import json,sys; [print(repr(s['grad_norm'])) for s in json.load(open(sys.argv[1]))['steps']]" "$1"; }
for nan in "" 2; do
    what="accumulation over 3 micro-steps"; [ -n "$nan" ] && what="$what, step $nan non-finite"
    ZERO3_TEST_NAN_STEP=${nan:--1} run acc_host 2 $A && \
    ZERO3_TEST_NAN_STEP=${nan:--1} run acc_nvme 2 $A --offload-optimizer nvme --nvme-path "$tmp/nvme" --sub-group-size 3000 \
        --offload-param nvme --max-in-cpu 0 || { bad "gradients on NVMe, $what: run failed"; continue; }
    norms "$tmp/acc_host.json" > "$tmp/na"; norms "$tmp/acc_nvme.json" > "$tmp/nb"
    same_losses "$tmp/acc_host.json" "$tmp/acc_nvme.json" && cmp -s "$tmp/na" "$tmp/nb" \
        && ok "gradients on NVMe, $what: bit-identical losses and norms to the host's accumulator" \
        || bad "gradients on NVMe, $what: losses differ by $(maxdiff "$tmp/la" "$tmp/lb"), norms $(tr '\n' ' ' < "$tmp/na") vs $(tr '\n' ' ' < "$tmp/nb")"
done
grep -q "grad accumulation 3" "$tmp/acc_nvme.log" && grep -q "skipped" "$tmp/acc_nvme.log" \
    && ok "gradients on NVMe: 3 micro-steps a step, the non-finite step skipped" || bad "gradients on NVMe: no accumulation or no step skipped"

# parameters on NVMe: the units beyond max_in_cpu live in the swap file and are read
# before each gather (with the default reuse distance, once per step) and written after
run pnv 2 $STD -b 4 -z 3 --offload-param nvme --max-in-cpu 0 --param-persistence-threshold 0 --offload-optimizer cpu --nvme-path "$tmp/nvme"
$PY - "$tmp/pnv.json" "$tmp/base2_3.json" <<'EOF2' && ok "report: parameter shards on NVMe, read and written each step" || bad "report: parameter NVMe accounting"
import json, sys
off, base = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
m, shard = off["memory"]["per_rank"][0], base["memory"]["per_rank"][0]["params"]
assert m["params"] == 0 and m["nvme"] >= shard, m           # every shard in the file (4 KiB-padded per unit)
t = off["transfers_per_step"]
assert t["nvme_read"] >= shard and t["nvme_write"] >= shard, t
assert t["param_reads_ahead"] > 0 and 1 <= t["param_reads_ahead_peak"] <= 5, t
assert base["transfers_per_step"]["param_reads_ahead_peak"] == 0
EOF2

# the parameters on NVMe with the optimizer there too: the fp32 compute copy is the master,
# read from its region (zero3/swap_param.c's [Note: the parameters in the master]), so moving the
# parameters there adds reads of it and nothing else: the same swap file and the same NVMe
# writes per step as with the parameters in host memory, and the same losses
PM="$STD -b 4 -z 3 --offload-optimizer nvme --nvme-path $tmp/nvme --sub-group-size 3000 --param-persistence-threshold 0"
if run pm_cpu 2 $PM --offload-param cpu && run pm_nvme 2 $PM --offload-param nvme --max-in-cpu 0; then
    $PY - "$tmp/pm_cpu.json" "$tmp/pm_nvme.json" <<'EOF2' && same_losses "$tmp/pm_cpu.json" "$tmp/pm_nvme.json" \
        && ok "parameters in the optimizer's master on NVMe: no second copy written, the same file, losses bit-identical" \
        || bad "parameters in the master: the bytes above differ, or the losses by $(maxdiff "$tmp/la" "$tmp/lb")"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
for r in range(2):
    ma, mb = a["memory"]["per_rank"][r], b["memory"]["per_rank"][r]
    assert mb["nvme"] == ma["nvme"] and mb["host_params"] < ma["host_params"], (ma, mb)
ta, tb = a["transfers_per_step"], b["transfers_per_step"]
assert tb["nvme_write"] == ta["nvme_write"], (ta, tb)
assert tb["nvme_read"] > ta["nvme_read"] and tb["param_reads_ahead"] > 0, (ta, tb)
EOF2
else
    bad "parameters in the master: a run failed"
fi

# offload_param.buffer_count: the shards read ahead at once. With no window ahead
# (--prefetch 0) every gather is one the pass driver hints first, so the reads run as far
# ahead as the buffers allow: the report's peak is the count itself (the test model has
# more units than 3), and the losses do not move.
for bc in 1 3; do
    printf '{"zero_optimization": {"offload_param": {"device": "nvme", "nvme_path": "%s", "buffer_count": %d, "max_in_cpu": 0}}}\n' \
        "$tmp/nvme" $bc > "$tmp/pbc_cfg.json"
    if run pbc 2 $STD -b 4 -z 3 --ds-config "$tmp/pbc_cfg.json" --prefetch 0 --param-persistence-threshold 0 --offload-optimizer cpu; then
        $PY - "$tmp/pbc.json" $bc <<'EOF2' && same_losses "$tmp/base2_3.json" "$tmp/pbc.json" \
            && ok "offload_param.buffer_count $bc: $bc shards read ahead at most and at once, losses bit-identical" \
            || bad "offload_param.buffer_count $bc: $(grep -o '"param_reads_ahead[a-z_]*":[[:space:]]*[0-9.e+]*' "$tmp/pbc.json" | tr '\n' ' ') $(maxdiff "$tmp/la" "$tmp/lb")"
import json, sys
t = json.load(open(sys.argv[1]))["transfers_per_step"]
assert t["param_reads_ahead_peak"] == int(sys.argv[2]) and t["param_reads_ahead"] > 0, t
EOF2
    else
        bad "offload_param.buffer_count $bc: run failed"
    fi
done

# resume with the moments and most parameter shards on NVMe: bit-identical to running straight through
R="-e $tmp/model.bin -i $tmp/train.bin -j $tmp/train.bin -t 64 -v 0 -s 0 -b 4 --shuffle 1 -k constant -u 2 -l 1e-3 -c 0.1 -z 3 --offload-optimizer nvme --nvme-path $tmp/nvme --sub-group-size 4096 --offload-param nvme --max-in-cpu 30000"
run full 2 $R -x 6 > /dev/null
$MPIRUN -np 2 $BIN $R -x 3 -o "$tmp/ck" -n 3 > "$tmp/part.log" 2>&1
run res 2 $R -x 6 -o "$tmp/ck" -n 3 -y 1
losses "$tmp/full.json" | tail -3 > "$tmp/f"; losses "$tmp/res.json" > "$tmp/r" 2>/dev/null
[ -s "$tmp/r" ] && cmp -s "$tmp/f" "$tmp/r" && ok "resume with NVMe-held optimizer state and parameters is bit-identical" || bad "NVMe resume: $(tr '\n' ' ' < "$tmp/f") vs $(tr '\n' ' ' < "$tmp/r" 2>/dev/null)"

# The deferred update meets every other reader of the states: validation and samples between
# steps (their forwards carry it through), checkpoints saved while it is in flight (steps 2
# and 4, where no evaluation ran first: the save carries it to the end), and a resume from
# step 4's.
D="-e $tmp/model.bin -i $tmp/train.bin -j $tmp/train.bin -t 64 -b 4 -x 6 -v 3 -s 5 -g 8 -l 1e-3 -c 0.1 -z 3 --param-persistence-threshold 30000"
DN="--offload-optimizer nvme --offload-param nvme --max-in-cpu 0 --nvme-path $tmp/nvme --sub-group-size 3000"
evals() { grep -a -E "^val loss|^generating|^---" "$1" | tr -d '\0'; grep -a -A1 "^generating" "$1" | tail -n +2; }
if run dbase 2 $D -o "$tmp/ckb" -n 2 && run ddef 2 $D $DN -o "$tmp/ckd" -n 2; then
    same_losses "$tmp/dbase.json" "$tmp/ddef.json" && cmp -s <(evals "$tmp/dbase.log") <(evals "$tmp/ddef.log") \
        && grep -qa "^val loss" "$tmp/ddef.log" \
        && cmp -s "$tmp/ckb/model_00000002.bin" "$tmp/ckd/model_00000002.bin" \
        && cmp -s "$tmp/ckb/model_00000004.bin" "$tmp/ckd/model_00000004.bin" \
        && ok "deferred update: validation, samples and checkpoints between steps, losses, evaluations and model files bit-identical" \
        || bad "deferred update with evaluations: $(maxdiff "$tmp/la" "$tmp/lb"); $(diff <(evals "$tmp/dbase.log") <(evals "$tmp/ddef.log") | head -3 | tr '\n' ' ')"
    rm -f "$tmp/ckd/DONE_00000006" "$tmp/ckd/"*_00000006*  # resume from step 4's, saved with the update in flight
    run dres 2 $D $DN -o "$tmp/ckd" -n 2 -y 1 -v 0 -s 0
    losses "$tmp/dbase.json" | tail -2 > "$tmp/f"; losses "$tmp/dres.json" > "$tmp/r" 2>/dev/null
    [ -s "$tmp/r" ] && cmp -s "$tmp/f" "$tmp/r" && ok "deferred update: resume from a checkpoint saved while it was in flight is bit-identical" \
        || bad "deferred update resume: $(tr '\n' ' ' < "$tmp/f") vs $(tr '\n' ' ' < "$tmp/r" 2>/dev/null)"
else
    bad "deferred update with evaluations: a run failed"
fi

# --estimate knows the engine: for a run's own configuration, the host engine's bytes per rank
# (states, the pool of units, gradients and reduce-scatter staging at its largest, NVMe
# buffers) equal the report's accounting of the same run, and the activations the
# trainer's, to the byte
for c in "1 -z 3" "2 -z 3 --offload-optimizer nvme --offload-param nvme --max-in-cpu 0 --sub-group-size 3000 --reduce-bucket-size 2e5" \
         "2 -z 3 --offload-optimizer cpu --offload-param nvme --max-in-cpu 30000 --param-persistence-threshold 0" \
         "2 -z 2 --offload-optimizer cpu" "2 -z 3 --prefetch 1 --max-reuse-distance 0 --param-persistence-threshold 0" "2 -z 1" "2 -z 0"; do
    n=${c%% *}; flags=${c#* }
    run est $n $STD -b 4 -x 2 $flags --nvme-path "$tmp/nvme" \
        && $MPIRUN -np 1 $BIN $STD -b 4 -x 2 $flags --nvme-path "$tmp/nvme" --estimate 1:$n > "$tmp/est.txt" 2>&1 \
        && $PY - "$tmp/est.json" "$tmp/est.txt" <<'EOF2' && ok "--estimate at $n ranks $flags: the engine's bytes and the activations equal the report's" \
            || bad "--estimate at $n ranks $flags: $(tail -1 "$tmp/est.txt")"
import json, re, sys
r = json.load(open(sys.argv[1])); text = open(sys.argv[2]).read()
est = dict((k, float(v)) for k, v in re.findall(r"(\w+)=([0-9.e+]+)", text.split("host_estimate:")[1]))
for m in r["memory"]["per_rank"]:
    engine = sum(m[k] for k in ("params", "grads", "optimizer", "buffers", "host_params", "host_grads", "host_optimizer", "host_buffers"))
    assert engine == est["engine_bytes_per_rank"], (engine, est)
    assert m["activations"] == est["activation_bytes"], (m["activations"], est)
    assert m["nvme"] == est["swap_bytes_per_rank"], (m["nvme"], est)
EOF2
done

# bad NVMe settings fail clearly, naming the path
expect_error "missing NVMe directory"  "$tmp/none"   $MPIRUN -np 1 $BIN $STD -b 8 -z 3 --offload-optimizer nvme --nvme-path "$tmp/none"
expect_error "NVMe without a path"     "nvme"        $MPIRUN -np 1 $BIN $STD -b 8 -z 3 --offload-optimizer nvme
expect_error "NVMe below stage 3"      "stage"       $MPIRUN -np 1 $BIN $STD -b 8 -z 2 --offload-optimizer nvme --nvme-path "$tmp/nvme"
expect_error "offload at stage 0"      "stage"       $MPIRUN -np 1 $BIN $STD -b 8 -z 0 --offload-optimizer cpu
expect_error "param nvme, optimizer on device" "offload_param nvme" $MPIRUN -np 1 $BIN $STD -b 8 -z 3 --offload-param nvme --nvme-path "$tmp/nvme"

finish
