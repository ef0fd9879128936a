# shellcheck shell=bash
# shellcheck disable=SC2317  # the helpers are called from the scripts' step functions
# The driver of the scripts that spend a lent GPU's minutes (scripts/gpu_first_contact.sh:
# is it correct; scripts/gpu_speed.sh: how fast), sourced, not run. A script defines its
# steps and hands over:
#
#   GS_NAME=gpu_speed                   # its name, in messages and the summary
#   GS_STEPS="a b c"                    # the steps in order (FC_STEPS overrides)
#   step_table() { ... }                # "ID MAX_S MIN_S TITLE" of a step, by its ID
#   step_a() { ... }                    # each step's body: says what it found with kv and check
#   source scripts/gpu_steps.sh; gpu_steps_main "$@"
#
# `SCRIPT DIR` then sets up the bundle (when BUNDLE/bundle.tar.gz is there, default .gpu;
# else it runs what is built here), runs the steps in order, each as `SCRIPT --step ID DIR`
# under its own time limit (the smaller of MAX_S and the time left), never stopping at a
# failure, a step skipped when less than MIN_S is left (FC_BUDGET seconds in all, counted
# from the start, the set-up included). Results: DIR/summary.json (rewritten after every
# step, so a run cut short still leaves one), DIR/log (every step's output), DIR/logs.tar.gz
# (each step's and run's logs, reports and files). The console gets a line per step and the
# summary's table at the end (summary_print, which a script may define for its own figures).
# Exit 0 whatever the steps found (the summary says it); 2 on a usage error.
#
# The driver's knobs, the same for every script: FC_BUDGET (seconds, default GS_BUDGET),
# FC_STEPS, FC_MAX_<id> and FC_MIN_<id> (a step's limit, and the time it must have left to
# start), FC_TRAINER (what `ours` starts, default ./train_gpt2_zero3), FC_GPU_MIB (the GPU's
# memory when neither the probe nor nvidia-smi says), FC_TEST_HANG (a step that hangs, to
# rehearse the limits), PY (the Python with torch, default python3).

# ---------------------------------------------------------------------------
# what a step's body uses

# jq_get JSON KEY: one value of a flat JSON object (no jq on the GPU machine)
jq_get() { "$PY" -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
kv() { printf '%s=%s\n' "$1" "$2" >> "$WORK/steps/$STEP.kv"; }
check() { printf '%s %s\n' "$1" "$2" | tee -a "$WORK/steps/$STEP.checks"; }  # check PASS|FAIL|SKIP TEXT
left() { echo $(( STEP_DEADLINE - $(date +%s) )); }
# time_for MARGIN: the seconds a run may take, leaving MARGIN of the step's time (at least 1)
time_for() { local t=$(( $(left) - $1 )); echo $(( t > 0 ? t : 1 )); }
# figures NAME REPORT WARMUP: tokens/s, MFU, ms per step of a run, as kv NAME.*
figures() {
    local f
    f=$("$PY" dev/report_figures.py "$2" "$3" 2>&1) || { check FAIL "$1: no figures ($f)"; return 1; }
    "$PY" -c 'import json,sys; [print(k, v) for k, v in json.loads(sys.argv[1]).items()]' "$f" |
        while read -r k v; do kv "$1.$k" "$v"; done
}
# shape DESCRIPTOR: "layers heads channels" of a GPT-2 depth descriptor (llmc/gpt2.h's rule:
# llm.c's published sizes, else N heads of 64 channels)
shape() {
    case "$1" in
        d12) echo "12 12 768" ;; d24) echo "24 16 1024" ;; d36) echo "36 20 1280" ;; d48) echo "48 25 1600" ;;
        d*) local n=${1#d}; echo "$n $n $((64 * n))" ;;
    esac
}
gpu_mib() {  # the GPU's memory in MiB: the probe's, nvidia-smi's, or FC_GPU_MIB
    local m
    m=$(sed -n 's/^probe\.gpu0\.mem_total_mib=//p' "$WORK/steps/a.kv" 2>/dev/null | head -1)
    [ -n "$m" ] || m=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -dc 0-9)
    echo "${m:-${FC_GPU_MIB:-0}}"
}
# batch_that_fits MODEL T "B..." RECOMPUTE [FLAGS...]: the largest B whose model states (the
# larger of stage 0's and 3's) plus activations, per the trainer's --estimate (with FLAGS:
# --attention flash keeps less), take at most 85% of the GPU's memory (the rest: CUDA's
# context, cuBLASLt's workspace, NCCL, the allocator)
batch_that_fits() {
    local model=$1 t=$2 bs=$3 r=$4 mib b est
    shift 4
    mib=$(gpu_mib)
    [ "$mib" -gt 0 ] || { echo "the GPU's memory is not known (no GPU found?)" >&2; return 1; }
    for b in $bs; do
        est=$(./train_gpt2_zero3 -e "$model" -b "$b" -t "$t" -r "$r" "$@" --estimate 1:1 2>&1)
        if awk -v mib="$mib" '
            $1 == "0" && $2 == "none" && $3 == "none" { s0 = $4 }
            $1 == "3" && $2 == "none" && $3 == "none" { s3 = $4 }
            /^activations:/ { a = $2 }
            END { need = (s0 > s3 ? s0 : s3) + a; exit !(a > 0 && need * 1024 <= 0.85 * mib) }' <<< "$est"; then
            echo "$b"; return 0
        fi
    done
    return 1
}
# ours NAME SECONDS FLAGS...: a run of ./train_gpt2_zero3 (FC_TRAINER) FLAGS under its time
# limit, its report in $WORK/reports/NAME.json, its output in $WORK/logs/NAME.log. A run
# stopped by the limit after it wrote the report of all its -x steps (a d48 run spends
# seconds starting and ending) counts, with a line saying so; `why NAME` says why one failed.
ours() {
    local name=$1 t=$2 rc; shift 2
    echo "--- $name: ./train_gpt2_zero3 $*"
    timeout -k 5 "$t" "${FC_TRAINER:-./train_gpt2_zero3}" "$@" --report "$WORK/reports/$name.json" > "$WORK/logs/$name.log" 2>&1
    rc=$?
    tail -4 "$WORK/logs/$name.log"
    local done_steps want
    done_steps=$("$PY" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["steps"]))' "$WORK/reports/$name.json" 2>/dev/null || echo 0)
    want=$(printf '%s\n' "$@" | grep -A1 -x -- -x | tail -1)
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        if [ -n "$want" ] && [ "$done_steps" = "$want" ]; then
            echo "--- $name: stopped by its ${t} s limit after its last step and its report: counted"
            return 0
        fi
        echo "timed out after ${t} s, ${done_steps} of ${want:-?} steps done" > "$WORK/logs/$name.why"
    elif [ "$rc" -ne 0 ]; then
        echo "exit $rc: $(grep -m1 -i -E 'error|out of memory' "$WORK/logs/$name.log")" > "$WORK/logs/$name.why"
    fi
    [ "$rc" -eq 0 ] || echo "--- $name: $(cat "$WORK/logs/$name.why")"
    return "$rc"
}
why() { cat "$WORK/logs/$1.why" 2>/dev/null; }
# kernel_test PROGRAM SECONDS: a kernel-test program under its limit; its result line (and
# seconds) as kv, its exit as a PASS or FAIL check
kernel_test() {
    local t=$1 limit=$2 out=$WORK/logs/b_${1##*/}.log t0 rc
    t0=$(date +%s)
    echo "--- $t"
    timeout -k 5 "$limit" "./$t" > "$out" 2>&1; rc=$?
    grep -E '^(FAIL|[0-9]+ passed)' "$out" | head -20
    kv "${t##*/}" "$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out" | tail -1) in $(( $(date +%s) - t0 )) s"
    if [ "$rc" -eq 0 ]; then check PASS "$t: $(tail -1 "$out")"
    elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then check FAIL "$t: timed out after $limit s"
    else check FAIL "$t (exit $rc): $(grep -m3 '^FAIL' "$out" | tr '\n' ' ')$(tail -1 "$out")"; fi
}
# the offload flags of a run, by name: the optimizer on the CPU, the parameters too, both on
# NVMe (a swap file under the work directory: d48's is about 28 GB)
offload_args() {
    case $1 in
        cpu) echo "--offload-optimizer cpu" ;;
        param) echo "--offload-optimizer cpu --offload-param cpu" ;;
        nvme) mkdir -p "$WORK/swap"; echo "--offload-optimizer nvme --offload-param nvme --max-in-cpu 0 --nvme-path $WORK/swap" ;;
    esac
}

# ---------------------------------------------------------------------------
# the driver

# summarize: DIR/summary.json from the steps so far (written aside, then renamed)
gs_summarize() {
    "$PY" - "$WORK" "$DIR" "$START" "$BUDGET" "${FC_SETUP:-}" "${FC_SETUP_FAILED:-0}" "$BUNDLE" "scripts/$GS_NAME.sh" <<'EOF'
import json, os, sys, time
work, out, start, budget, setup, setup_failed, bundle, script = sys.argv[1:9]
NUMERIC = ("tokens_per_s", "mfu", "ms_per_step", "steps", "B", "T", "recompute", "compile", "cpus", "mem_gib",
           "gpus", "sms", "mem_total_mib", "mem_free_mib", "l2_mib", "configs")
def number(k, v):  # figures as numbers; versions, names and the rest as the strings they are
    if v in ("None", "null"):
        return None
    last = k.rsplit(".", 1)[-1]
    if last in NUMERIC or last.endswith(("_gbps", "_ms", "_s", "_tflops", "_ratio", "_mib", "_gib", "_mhz", "_x")):
        try:
            return float(v) if any(c in v for c in ".e") else int(v)
        except ValueError:
            pass
    return v
steps = []
for line in open(os.path.join(work, "steps", "order")):
    sid, title = line.rstrip("\n").split(" ", 1)
    st = {"id": sid, "title": title}
    path = os.path.join(work, "steps", sid)
    if os.path.exists(path + ".status"):
        status, seconds, limit = open(path + ".status").read().split(" ", 2)
        st.update(status=status, seconds=int(seconds), limit_s=int(limit))
    else:
        st.update(status="not run")
    if os.path.exists(path + ".kv"):
        res = {}
        for l in open(path + ".kv"):
            if "=" in l:
                k, v = l.rstrip("\n").split("=", 1)
                res[k] = number(k, v)
        st["results"] = res
    if os.path.exists(path + ".checks"):
        st["checks"] = [{"result": l[:4], "what": l[5:].rstrip("\n")} for l in open(path + ".checks") if l[:4] in ("PASS", "FAIL", "SKIP")]
    steps.append(st)
info = open(os.path.join(bundle, "x", "info.txt")).read().splitlines() if os.path.exists(os.path.join(bundle, "x", "info.txt")) else []
summary = {
    "script": script, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(start))),
    "elapsed_s": int(time.time()) - int(start), "budget_s": int(budget),
    "bundle": {"info": info, "setup": open(setup).read().splitlines() if setup and os.path.exists(setup) else [],
               "setup_failed": setup_failed == "1"},
    "steps": steps,
    "counts": {s: sum(1 for x in steps if x["status"] == s) for s in ("ok", "failed", "timeout", "skipped", "not run")},
}
tmp = os.path.join(out, ".summary.json.tmp")
with open(tmp, "w") as f:
    json.dump(summary, f, indent=1)
os.replace(tmp, os.path.join(out, "summary.json"))
EOF
    tar -C "$WORK" -czf "$DIR/logs.tar.gz" logs reports steps files 2> /dev/null
}

# gs_run_step ID MAX_S MIN_S TITLE: the step under min(MAX_S, the time left); status ok,
# failed, timeout or skipped (less than MIN_S left)
gs_run_step() {
    local id=$1 max=$2 min=$3 title=$4 left limit rc status t0
    max=$(eval echo "\${FC_MAX_$id:-$max}") min=$(eval echo "\${FC_MIN_$id:-$min}")
    left=$(( BUDGET - ($(date +%s) - START) - RESERVE ))
    echo "$id $title" >> "$WORK/steps/order"
    if [ "$left" -lt "$min" ]; then
        echo "skipped 0 $min" > "$WORK/steps/$id.status"
        printf '[%s] %-52s skipped: %d s left, it needs %d\n' "$id" "$title" "$left" "$min" | tee -a "$DIR/log"
        gs_summarize; return
    fi
    limit=$(( max < left ? max : left ))
    t0=$(date +%s)
    printf '\n=== [%s] %s (limit %d s)\n' "$id" "$title" "$limit" >> "$DIR/log"
    STEP_DEADLINE=$(( t0 + limit )) timeout -k 5 "$limit" bash "$GS_SELF" --step "$id" "$DIR" > "$WORK/logs/$id.log" 2>&1
    rc=$?
    case $rc in 0) status=ok ;; 124|137) status=timeout ;; *) status=failed ;; esac
    # a step that could check nothing here (every check a SKIP) was skipped
    if [ "$status" = ok ] && grep -q '^SKIP' "$WORK/steps/$id.checks" 2> /dev/null \
        && ! grep -qE '^(PASS|FAIL)' "$WORK/steps/$id.checks"; then status=skipped; fi
    echo "$status $(( $(date +%s) - t0 )) $limit" > "$WORK/steps/$id.status"
    cat "$WORK/logs/$id.log" >> "$DIR/log"
    printf '[%s] %-52s %s (%d s)%s\n' "$id" "$title" "$status" "$(( $(date +%s) - t0 ))" \
        "$(grep -m1 '^FAIL' "$WORK/steps/$id.checks" 2>/dev/null | cut -c1-100 | sed 's/^/: /')" | tee -a "$DIR/log"
    gs_summarize
}

# the table at the end: a line per step with its figures, the first failures; a script may
# define summary_print for its own figures (it reads DIR/summary.json)
gs_summary_print() {
    "$PY" - "$DIR/summary.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"\nsummary ({s['elapsed_s']} s of {s['budget_s']}): " + ", ".join(f"{v} {k}" for k, v in s["counts"].items() if v))
for st in s["steps"]:
    r = st.get("results", {})
    figs = " ".join(f"{k}={v}" for k, v in r.items() if k.endswith(("tokens_per_s", "mfu")) or k in ("B", "probe.gpu0.name"))
    fails = [c["what"] for c in st.get("checks", []) if c["result"] == "FAIL"]
    print(f"  [{st['id']}] {st['status']:<8} {st['title']}" + (f"  {figs}" if figs else ""))
    for f in fails[:4]:
        print(f"        FAIL {f[:150]}")
EOF
}

# gpu_steps_main "$@": the script's command line: --step ID DIR (a step's body), or DIR
gpu_steps_main() {
    GS_SELF=$(pwd)/scripts/$GS_NAME.sh  # (the scripts source this file from the repository's root)
    if [ "${1:-}" = --step ]; then
        STEP=$2
        : > "$WORK/steps/$STEP.kv"; : > "$WORK/steps/$STEP.checks"
        if [ "${FC_TEST_HANG:-}" = "$STEP" ]; then echo "FC_TEST_HANG: step $STEP hangs"; sleep 100000; fi
        "step_$STEP"
        ! grep -q '^FAIL' "$WORK/steps/$STEP.checks"
        exit $?
    fi
    if [ $# -ne 1 ] || [ -z "$1" ]; then echo "usage: scripts/$GS_NAME.sh DIR" >&2; exit 2; fi
    DIR=$1
    mkdir -p "$DIR" || { echo "$GS_NAME: cannot make $DIR" >&2; exit 2; }
    DIR=$(cd "$DIR" && pwd)
    BUNDLE=${BUNDLE:-.gpu}
    [ ! -d "$BUNDLE" ] || BUNDLE=$(cd "$BUNDLE" && pwd)
    export BUNDLE
    if [ -z "${FC_INNER:-}" ]; then
        export FC_START=${FC_START:-$(date +%s)}
        rm -f "$DIR/summary.json"
        if [ -f "$BUNDLE/bundle.tar.gz" ]; then
            echo "$GS_NAME: setting up $BUNDLE"
            FC_INNER=1 FC_SETUP="$BUNDLE/x/setup.txt" scripts/gpu_bundle.sh exec "$BUNDLE" bash "$GS_SELF" "$DIR"
            [ -f "$DIR/summary.json" ] && exit 0
            echo "$GS_NAME: the bundle's set-up failed (above); going on with what is here"
            FC_SETUP_FAILED=1 FC_INNER=1 exec bash "$GS_SELF" "$DIR"
        fi
        echo "$GS_NAME: no $BUNDLE/bundle.tar.gz: running what is built here"
        FC_INNER=1 exec bash "$GS_SELF" "$DIR"
    fi

    export PY=${PY:-python3} START=${FC_START:-$(date +%s)} BUDGET=${FC_BUDGET:-$GS_BUDGET}
    RESERVE=15
    WORK=$(mktemp -d) || exit 1
    export WORK
    trap 'rm -rf "$WORK"' EXIT
    mkdir -p "$WORK/steps" "$WORK/logs" "$WORK/reports" "$WORK/files"
    : > "$DIR/log"
    echo "$GS_NAME: budget $BUDGET s, $(( $(date +%s) - START )) s used by the set-up; results in $DIR"
    local id row
    for id in ${FC_STEPS:-$GS_STEPS}; do
        row=$(step_table "$id")
        if [ -z "$row" ]; then echo "$GS_NAME: no step '$id' ($GS_STEPS)" | tee -a "$DIR/log"; continue; fi
        # shellcheck disable=SC2086  # ID MAX MIN, then the title as one word
        set -- $row
        gs_run_step "$1" "$2" "$3" "${row#* * * }"
    done
    if declare -F summary_print > /dev/null; then summary_print; else gs_summary_print; fi
    exit 0
}
