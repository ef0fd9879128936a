#!/usr/bin/env bash
# Installs what train_gpt2_zero3 needs from Debian/Ubuntu packages, and nothing when all
# of it is already there (so `make test` and `make demo` can call it every time).
#   build:      gcc, g++ (the device engine's CPU test), make, pkg-config
#   trainer:    OpenBLAS, its OpenMP build (sgemm), Open MPI (data parallelism), PCRE2 (tokenizer regex),
#               cJSON (reports, configs, encoder.json), liburing (NVMe tier)
#   scripts:    python3-matplotlib (scripts/plot_log.py's plots)
#   tests:      Criterion (unit tests), python3-torch + numpy + regex (PyTorch reference),
#               fio (the NVMe benchmark's yardstick), strace (the checkpoint test's fsync order),
#               clang + libclang-rt-14-dev (libFuzzer and clang's sanitizer runtimes: test/fuzz),
#               SLURM (slurmctld, slurmd, slurm-client; slurm-wlm-basic-plugins has the PMIx
#               plugin of `srun --mpi=pmix`, built on the libpmix Open MPI uses: test_slurm.sh
#               runs a one-machine cluster from its own slurm.conf, no systemd)
set -euo pipefail

pkgs=(build-essential make pkg-config
      libopenblas-dev libopenblas-openmp-dev libopenmpi-dev openmpi-bin
      libpcre2-dev libcjson-dev liburing-dev
      libcriterion-dev
      python3 python3-torch python3-numpy python3-regex python3-matplotlib fio strace
      clang libclang-rt-14-dev
      slurmctld slurmd slurm-client slurm-wlm-basic-plugins)

missing=()
for p in "${pkgs[@]}"; do
    # dpkg-query prints "install ok installed" only for a fully installed package
    if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi

echo "install_deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then SUDO=sudo; else
        echo "install_deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; fi
fi
export DEBIAN_FRONTEND=noninteractive
# slurmctld's and slurmd's post-install scripts start the daemons, which without a
# slurm.conf fail (and on a machine without systemd fail the install): keep every service
# from starting during the install with a policy-rc.d (invoke-rc.d's "deny", 101), unless
# the machine has its own already (containers often do); ours goes on every exit path
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# install_deps.sh: no service starts during the install\nexit 101\n' | $SUDO tee "$policy" > /dev/null
    $SUDO chmod 755 "$policy"
    trap '$SUDO rm -f "$policy"' EXIT
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
