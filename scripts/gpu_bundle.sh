#!/usr/bin/env bash
# Carries what the GPU tests and benchmarks run to a GPU machine that can install nothing
# (such as the machines lent to this project's sessions: a bare image with the driver,
# CUDA, PyTorch and NCCL and cuBLAS as Python wheels; no Open MPI, no network, no
# compiler we may rely on). Nothing run there builds anything.
#
#   scripts/gpu_bundle.sh pack [DIR]
#       here, where `make deps` works: builds, in a copy of this checkout's source (so that
#       neither the flags below nor the stand-ins touch this checkout's own builds), the
#       kernels' GPU tests, both GPU trainer builds, build/bench_attention, build/gpu_probe, build/bench_cpu_adam
#       (the host's memory rate and CPU Adam, scripts/gpu_speed.sh), the CPU trainer,
#       tokenize, checkpoint_tool and the data, for a portable x86-64 level (PACK_OPT,
#       default -O3 -march=x86-64-v3: not -march=native, the GPU machine's processor is not
#       this one) and for Hopper (PACK_CUDA_ARCH, default sm_90 with its PTX); then writes
#       DIR/bundle.tar.gz (default DIR .gpu, git-ignored; gzip, which every image has)
#       holding the built files, every shared library they and Open MPI's programs and
#       plugins load except glibc's, the C++ runtime's and CUDA's (the GPU machine has those
#       in its own versions; cuBLAS and NCCL are hundreds of MB), and Open MPI's programs,
#       plugins and help files. DIR/info.txt says what was built, how, from which commit, and
#       which GPU code changed since the last GPU run (scripts/gpu_runs.txt).
#       PACK_EMULATED=1 (the rehearsal in make test, test/gpu/test_gpu_bundle.sh): the
#       emulated builds of this checkout (build/*_emu*, test/emu) stand in for the CUDA
#       binaries, under their names.
#   scripts/gpu_bundle.sh run [DIR]
#       there, from the repository root with DIR carried: the set-up below, then the steps
#       of `make test-gpu` (the kernels' tests, test/gpu/test_gpu_trainer.sh).
#   scripts/gpu_bundle.sh exec DIR COMMAND...
#       the set-up, then COMMAND (scripts/gpu_first_contact.sh, scripts/bench_gpu.sh, ...)
#
# The set-up: unpacks the bundle into DIR/x and puts the built files in place; for every
# library a carried program cannot load, links one into DIR/x/need (on LD_LIBRARY_PATH):
# cuBLAS, cuBLASLt, NCCL and the CUDA runtime from the machine (the CUDA toolkit's lib64,
# $CUDA_HOME, or the Python wheels nvidia/*/lib of $PY's sys.path, e.g. CUDA 13's
# nvidia/cu13/lib), any other from the carried copies; a library the loader finds is never
# shadowed (the machine's Python needs its own newer ones). With no mpirun on the machine,
# the carried Open MPI (OPAL_PREFIX), with shared-memory single-copy off (a container
# without CAP_SYS_PTRACE refuses process_vm_readv), no remote-shell agent needed, and, as
# root, root allowed. It prints one `gpu_bundle: ...` line per fact (where each CUDA
# library came from, each library still missing, each Python module missing) and carries
# on; PY (default python3) is the Python with torch.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
mode=${1:-}
DIR=${2:-.gpu}
GPU_BINS="build/test_kernels_gpu build/test_kernels_gpu_fp32 build/test_kernels2_gpu build/test_kernels2_gpu_fp32"
BINS="$GPU_BINS build/bench_attention build/gpu_probe build/bench_cpu_adam train_gpt2_zero3 train_gpt2_zero3_fp32 train_gpt2_zero3_cpu tokenize checkpoint_tool"
DATA="dev/data/tinyshakespeare/tiny_shakespeare_train.bin dev/data/tinyshakespeare/tiny_shakespeare_val.bin dev/data/gpt2_tokenizer.bin"
# what every GPU machine brings itself: glibc, the C++ runtime (apt needs it), the driver,
# and CUDA's libraries (found there, see cuda_lib_find)
SYSTEM_LIBS='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libutil|libresolv|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia)[.-]'
CUDA_LIBS='^lib(cudart|cublas|cublasLt|nccl)\.so'
# the emulated stand-ins (PACK_EMULATED=1), built by this checkout's make test
EMU_OF="build/test_kernels_gpu:build/test_kernels_emu build/test_kernels_gpu_fp32:build/test_kernels_emu_fp32
build/test_kernels2_gpu:build/test_kernels2_emu build/test_kernels2_gpu_fp32:build/test_kernels2_emu_fp32
train_gpt2_zero3:build/train_gpt2_zero3_emu train_gpt2_zero3_fp32:build/train_gpt2_zero3_emu_fp32
build/bench_attention:build/bench_attention_emu"

die() { echo "gpu_bundle: $*" >&2; exit 1; }
# say: a fact, printed and, during the set-up, kept in DIR/x/setup.txt (for gpu_first_contact.sh)
say() { echo "gpu_bundle: $*"; [ -z "${SETUP_TXT:-}" ] || echo "gpu_bundle: $*" >> "$SETUP_TXT"; }

libs_of() {  # the resolved paths of the shared libraries the given files load, minus SYSTEM_LIBS
    { ldd "$@" 2>/dev/null || true; } | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
        while read -r name path; do
            if ! [[ $name =~ $SYSTEM_LIBS ]]; then echo "$path"; fi
        done | sort -u
}

ompi_files() {  # the carried Open MPI's programs and plugins (what loads libraries)
    find "$1/ompi" -type f \( -name '*.so' -o -path '*/bin/*' \)
}

# ---------------------------------------------------------------------------
# pack

# pack_source WORK: this checkout's source (tracked and untracked-not-ignored files) and
# its made data, copied to WORK/src
pack_source() {
    local src=$1/src
    mkdir -p "$src"
    git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do
        [ -e "$f" ] && printf '%s\0' "$f"
    done | xargs -0 cp -a --parents -t "$src" || return 1
    for f in $DATA; do [ -f "$f" ] && cp -a --parents -t "$src" "$f"; done
    return 0
}

# pack_ompi STAGE MPIBIN: Open MPI as installed (prefix /usr): its programs, libraries,
# plugins and help files, kept under the same relative paths so that OPAL_PREFIX=STAGE/ompi
# relocates it; MPIBIN is a program linked against it
pack_ompi() {
    local stage=$1 mpibin=$2 mpirun libdir pkgs
    mpirun=$(readlink -f "$(command -v mpirun)") || return 1
    libdir=$(dirname "$(readlink -f "$(ldd "$mpibin" | awk '/libmpi.so/ {print $3}')")")
    pkgs=$(dpkg -S "$mpirun" "$libdir/libmpi.so.40" | cut -d: -f1 | tr ',' ' ')
    for p in $pkgs openmpi-common libpmix2; do
        dpkg -L "$p" 2>/dev/null | while read -r f; do
            case "$f" in /usr/*) ;; *) continue ;; esac
            [ -f "$f" ] || [ -L "$f" ] || continue
            case "$f" in */doc/*|*/man/*|*.a|*/include/*|*/lintian/*) continue ;; esac
            mkdir -p "$stage/ompi/$(dirname "${f#/usr/}")"
            cp -a "$f" "$stage/ompi/${f#/usr/}"
        done
    done
    ln -sf "$(basename "$mpirun")" "$stage/ompi/bin/mpirun"
}

pack() {
    local out=$1 stage src opt arch targets f
    opt=${PACK_OPT:--O3 -march=x86-64-v3}
    arch=${PACK_CUDA_ARCH:--gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90}
    make deps || die "make deps failed"
    work=$(mktemp -d) || die "no temporary directory"
    trap 'rm -rf "$work"' EXIT
    stage=$work/stage src=$work/src
    pack_source "$work" || die "copying the source to $src failed"
    targets="all data build/gpu_probe build/bench_cpu_adam"
    if [ "${PACK_EMULATED:-0}" = 1 ]; then
        for m in $EMU_OF; do [ -x "${m#*:}" ] || die "PACK_EMULATED=1: ${m#*:} is not built here (make ${m#*:})"; done
    else
        targets="$targets $GPU_BINS build/bench_attention train_gpt2_zero3 train_gpt2_zero3_fp32"
    fi
    say "building in $src: make OPT='$opt' CUDA_ARCH='$arch' $targets"
    # shellcheck disable=SC2086
    make -C "$src" -j"$(nproc)" OPT="$opt" CUDA_ARCH="$arch" $targets > "$work/build.log" 2>&1 \
        || { tail -30 "$work/build.log" >&2; die "the build failed (its end above)"; }
    if [ "${PACK_EMULATED:-0}" = 1 ]; then
        for m in $EMU_OF; do mkdir -p "$src/$(dirname "${m%%:*}")"; cp -a "${m#*:}" "$src/${m%%:*}"; done
    fi
    mkdir -p "$stage/tree" "$stage/lib" "$stage/ompi"
    for f in $BINS $DATA; do
        [ -e "$src/$f" ] || die "the build made no $f"
        mkdir -p "$stage/tree/$(dirname "$f")"; cp -a "$src/$f" "$stage/tree/$f"
    done
    pack_ompi "$stage" "$src/train_gpt2_zero3_cpu" || die "copying Open MPI failed"
    # every shared library the binaries, mpirun and the plugins load
    # shellcheck disable=SC2046,SC2086
    for l in $(cd "$src" && libs_of $BINS $(ompi_files "$stage")); do cp -L "$l" "$stage/lib/"; done
    local last
    last=$(awk '!/^#/ && NF >= 2 {c = $2} END {print c}' scripts/gpu_runs.txt 2>/dev/null)
    {
        echo "packed: $(date -u +%Y-%m-%dT%H:%MZ) from $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')"
        # the GPU code changed since the last GPU run (scripts/gpu_runs.txt), uncommitted changes
        # included: scripts/gpu_speed.sh tests those kernels first
        echo "changed since the last GPU run ($last): $(git diff --name-only "$last" -- 'llmc/*.cuh' 'zero3/*.cuh' 'zero3/*.cu' \
            'test/gpu/*.cu' train_gpt2_zero3.cu 2>/dev/null | tr '\n' ' ')"
        echo "built: make OPT='$opt' CUDA_ARCH='$arch'"
        echo "emulated: ${PACK_EMULATED:-0}"
        echo "binaries: $BINS"
        echo "libraries: $(cd "$stage/lib" && echo *)"
    } > "$stage/info.txt"
    rm -rf "$out"; mkdir -p "$out"
    tar -C "$stage" -czf "$out/bundle.tar.gz" . || die "writing $out/bundle.tar.gz failed"
    cp "$stage/info.txt" "$out/info.txt"
    say "$(du -h "$out/bundle.tar.gz" | cut -f1) in $out/bundle.tar.gz; on the GPU machine: carry [\"$out\"], run: scripts/gpu_bundle.sh run $out (or exec $out COMMAND)"
}

# ---------------------------------------------------------------------------
# set-up on the GPU machine

# cuda_lib_find NAME: the path of the CUDA library NAME on this machine outside the
# loader's search: the toolkit's directories, then the Python wheels (nvidia/*/lib)
cuda_lib_find() {
    local name=$1 d
    for d in ${CUDA_HOME:+"$CUDA_HOME/lib64" "$CUDA_HOME/lib"} /usr/local/cuda/lib64 /usr/local/cuda/lib \
             /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 /usr/local/cuda-*/lib \
             /usr/local/cuda-*/targets/x86_64-linux/lib; do
        if [ -e "$d/$name" ]; then echo "$d/$name"; return 0; fi
    done
    "$PY" - "$name" 2>/dev/null <<'EOF'
import glob, os, sys
for p in sys.path:
    for hit in sorted(glob.glob(os.path.join(p or ".", "nvidia", "*", "lib", sys.argv[1]))):
        print(hit)
        sys.exit(0)
sys.exit(1)
EOF
}

# setup_libs X LOADERS...: links into X/need a copy of each library LOADERS cannot load
setup_libs() {
    local x=$1 need=$1/need l p
    shift
    for _ in 1 2 3; do  # a library linked in can need another: a few rounds
        for l in $({ ldd "$@" 2>/dev/null || true; } | awk '/not found/ {print $1}' | sort -u); do
            [ -e "$need/$l" ] && continue
            p=""
            if [[ $l =~ $CUDA_LIBS ]]; then p=$(cuda_lib_find "$l"); fi
            if [ -z "$p" ] && [ -e "$x/lib/$l" ]; then p=$x/lib/$l; fi
            if [ -n "$p" ]; then ln -sf "$p" "$need/$l"; fi
        done
    done
    for l in $({ ldd "$@" 2>/dev/null || true; } | awk '/not found/ {print $1}' | sort -u); do
        say "missing: $l (not on this machine, not carried)"
    done
}

setup() {
    [ -f "$DIR/bundle.tar.gz" ] || die "$DIR/bundle.tar.gz not found: run 'scripts/gpu_bundle.sh pack $DIR' where packages install, and carry $DIR"
    local x loaders own_mpi=1 l m
    x="$(cd "$DIR" && pwd)/x"
    rm -rf "$x"; mkdir -p "$x/need"
    tar -xzf "$DIR/bundle.tar.gz" -C "$x" || die "unpacking $DIR/bundle.tar.gz failed"
    SETUP_TXT=$x/setup.txt
    : > "$SETUP_TXT"
    cp -a "$x/tree/." . || die "putting the built files in place failed"
    export PY=${PY:-python3}
    export LD_LIBRARY_PATH="$x/need${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    command -v mpirun > /dev/null || own_mpi=0
    loaders=$(cd "$x/tree" && find . -type f -perm -u+x | sed 's|^\./||' | tr '\n' ' ')
    # shellcheck disable=SC2046,SC2086
    setup_libs "$x" $loaders $([ $own_mpi = 1 ] || ompi_files "$x")
    # where each CUDA library comes from (the probe links them all), through the link in need/
    ldd build/gpu_probe 2>/dev/null | awk '$2 == "=>" {print $1, $3}' | while read -r l p; do
        if [[ $l =~ $CUDA_LIBS ]]; then say "$l: $(if [ -L "$p" ]; then echo "$(readlink "$p") (linked in)"; else echo "$p"; fi)"; fi
    done
    if [ $own_mpi = 0 ]; then
        export OPAL_PREFIX="$x/ompi" PATH="$x/ompi/bin:$PATH"
        # the carried PMIx's plugins, wherever it was relocated to
        for m in "$x"/ompi/lib/*/pmix*/lib/pmix; do
            [ -d "$m" ] && export PMIX_MCA_mca_base_component_path="$m"
        done
        say "mpirun: the carried Open MPI ($OPAL_PREFIX)"
    else
        say "mpirun: $(command -v mpirun)"
    fi
    # no CAP_SYS_PTRACE in a container: shared memory without process_vm_readv
    export OMPI_MCA_btl_vader_single_copy_mechanism=none
    # Open MPI looks for ssh or rsh at start even for ranks on this one machine
    if ! command -v ssh > /dev/null && ! command -v rsh > /dev/null; then export OMPI_MCA_plm_rsh_agent=false; fi
    if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
    for m in numpy torch; do
        "$PY" -c "import $m" > /dev/null 2>&1 || say "python module missing: $m ($PY: $("$PY" -c "import $m" 2>&1 | tail -1))"
    done
    return 0
}

case "$mode" in
pack)
    pack "$DIR"
    ;;
run)
    setup
    status=0
    for t in $GPU_BINS; do echo "=== $t"; ./"$t" || status=1; done
    echo "=== test/gpu/test_gpu_trainer.sh"; bash test/gpu/test_gpu_trainer.sh || status=1
    exit $status
    ;;
exec)
    [ $# -ge 3 ] || die "usage: scripts/gpu_bundle.sh exec DIR COMMAND..."
    setup
    shift 2
    exec "$@"
    ;;
*)
    echo "usage: scripts/gpu_bundle.sh pack|run [DIR] | exec DIR COMMAND..." >&2
    exit 2
    ;;
esac
