# train_gpt2_zero3 — build and test.
#   make demo                    install what is missing, prepare tinyshakespeare, train, sample
#   make test                    every test that needs no GPU
#   make train_gpt2_zero3_cpu    the CPU trainer (fp32, OpenMP, OpenBLAS, MPI)
#   make tokenize                ./tokenize IN.txt OUT.bin (GPT-2 BPE)
#   make checkpoint_tool         ./checkpoint_tool inspect|consolidate|extract-optimizer DIR ...
# Dependencies come from Debian packages through scripts/install_deps.sh.

CC      ?= gcc
MPICC   ?= mpicc
OPT     ?= -O3 -march=native
CFLAGS  ?= $(OPT) -fopenmp -std=gnu11 -Wall -Wextra -Wno-unused-function
CFLAGS  += -I. -D_GNU_SOURCE  # O_DIRECT and fallocate for the NVMe tier (zero3/nvme.h)
# OpenBLAS built for OpenMP runs its sgemm on the trainer's own OpenMP threads; the
# pthread build keeps a second pool whose threads fight the OpenMP workers for the
# cores (the d6 step was 1.5x slower on 2 cores). Debian installs the builds side by
# side, so name the OpenMP one, with an rpath so that the loader cannot swap it.
ARCH       := $(shell gcc -dumpmachine)
BLAS_DIR   ?= $(wildcard /usr/lib/$(ARCH)/openblas-openmp)
ifneq ($(BLAS_DIR),)
BLAS_CFLAGS = -I/usr/include/$(ARCH)/openblas-openmp
BLAS_LIBS   = -L$(BLAS_DIR) -Wl,-rpath,$(BLAS_DIR) -lopenblas
else
BLAS_CFLAGS = $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS   = $(shell pkg-config --libs openblas 2>/dev/null)
endif
PKGS       = libcjson libpcre2-8 liburing
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null) $(BLAS_CFLAGS)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null) $(BLAS_LIBS) -lm
CRIT_FLAGS = $(shell pkg-config --cflags --libs criterion 2>/dev/null)

LLMC_HEADERS = $(wildcard llmc/*.h) $(wildcard zero3/*.h) $(wildcard common/*.h)
MPI_CFLAGS   = $(shell $(MPICC) --showme:compile 2>/dev/null)
MPI_LIBS     = $(shell $(MPICC) --showme:link 2>/dev/null)
TRAIN_DATA   = dev/data/tinyshakespeare/tiny_shakespeare_train.bin
TOKENIZER    = dev/data/gpt2_tokenizer.bin

.PHONY: all deps demo test clean data bench test-gpu check-headers libs
.DELETE_ON_ERROR:
.SECONDARY:  # (the programs' objects under build/obj are kept, not deleted as intermediates)

all: train_gpt2_zero3_cpu tokenize checkpoint_tool

# ---------------------------------------------------------------------------
# The library: every common/*.c, llmc/*.c and zero3/*.c (host code; the headers hold the
# interface), compiled once per build flavour into build/lib/FLAVOUR/ (an object and its
# dependency file per source, and lib.a), which every program of that flavour links. A
# program's own source writes its dependency file too (BINDEP, under build/dep/), so a
# change to one file rebuilds the objects and programs that use it, and relinks the rest.
#   opt   $(CFLAGS) (so OPT=... reaches it): the CPU trainer, the tools, the unit tests
#   asan  AddressSanitizer + UBSan ($(SAN_CFLAGS)): the *_asan and build/asan programs
#   fuzz  clang's sanitizers, without libFuzzer's main: the fuzzers under build/fuzz
#   emu   the C side of the emulated CUDA programs (build/*_emu*): gcc at their -O2, every
#         access told to test/emu's checker (EMU_TRACK)
#   gpu   the C side of the nvcc programs: the host compiler at nvcc's -O3
# The emu and gpu flavours compile what the .cu programs compiled as C++ before: g++
# contracts a*b+c into an FMA as gcc's gnu11 does (-ffp-contract=fast both: only ISO C
# turns it off, not ISO C++), and without -march an FMA is only there in cpu_adam's
# target("...fma") functions, so the same flags give the same arithmetic: no
# -ffp-contract=off (which would change those functions).
LIB_SRCS := $(wildcard common/*.c llmc/*.c zero3/*.c)
comma    := ,
LIBDEP    = -MMD -MP
BINDEP    = -MMD -MP -MT $@ -MF build/dep/$(subst /,_,$@).d
$(shell mkdir -p build/dep)
LIB_FLAVOURS = opt asan fuzz emu gpu
LIB      = build/lib/opt/lib.a
SAN_LIB  = build/lib/asan/lib.a
FUZZ_LIB = build/lib/fuzz/lib.a
EMU_LIB  = build/lib/emu/lib.a
GPU_LIB  = build/lib/gpu/lib.a
lib_objs = $(patsubst %.c,build/lib/$(1)/%.o,$(LIB_SRCS))
# The GPU engines' CUDA code (zero3/*.cu, which include the engine .cuh files): objects of
# their own, one per CUDA build and precision (floatX), build/lib/gpu/bf16, gpu/fp32 (nvcc)
# and emu/bf16, emu/fp32 (the emulator's), each linked into the trainer of its build and
# precision; tracked as the library's (CUDADEP: nvcc takes gcc's flags)
CUDA_LIB_SRCS := $(wildcard zero3/*.cu)
CUDA_BUILDS    = gpu/bf16 gpu/fp32 emu/bf16 emu/fp32
cuda_objs      = $(patsubst %.cu,build/lib/$(1)/%.o,$(CUDA_LIB_SRCS))
CUDADEP        = -MMD -MP -MT $@ -MF $(@:.o=.d)

build/lib/opt/%.o: %.c | build
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) $(PKG_CFLAGS) $(LIBDEP) -c $< -o $@
build/lib/asan/%.o: %.c | build
	@mkdir -p $(dir $@)
	$(MPICC) $(SAN_CFLAGS) $(PKG_CFLAGS) $(LIBDEP) -c $< -o $@
build/lib/fuzz/%.o: %.c | build
	@mkdir -p $(dir $@)
	$(CLANG) $(subst -fsanitize=fuzzer$(comma),-fsanitize=fuzzer-no-link$(comma),$(FUZZ_FLAGS)) $(MPI_CFLAGS) $(PKG_CFLAGS) $(LIBDEP) -c $< -o $@
build/lib/emu/%.o: %.c | build
	@mkdir -p $(dir $@)
	$(CC) -O2 -std=gnu11 -Wall -Wno-unused-function -Wno-maybe-uninitialized -Wno-unknown-pragmas -fopenmp -D_GNU_SOURCE -DLLMC_EMU \
	  $(EMU_TRACK) -I. $(MPI_CFLAGS) $(PKG_CFLAGS) $(LIBDEP) -c $< -o $@
build/lib/gpu/%.o: %.c | build
	@mkdir -p $(dir $@)
	$(CC) -O3 -std=gnu11 -Wall -Wno-unused-function -fopenmp -D_GNU_SOURCE -I. $(MPI_CFLAGS) $(PKG_CFLAGS) $(LIBDEP) -c $< -o $@
$(LIB): $(call lib_objs,opt)
$(SAN_LIB): $(call lib_objs,asan)
$(FUZZ_LIB): $(call lib_objs,fuzz)
$(EMU_LIB): $(call lib_objs,emu)
$(GPU_LIB): $(call lib_objs,gpu)
$(foreach f,$(LIB_FLAVOURS),build/lib/$(f)/lib.a): | build
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $(filter %.o,$^)
libs: $(foreach f,$(LIB_FLAVOURS),build/lib/$(f)/lib.a)
-include $(foreach f,$(LIB_FLAVOURS),$(patsubst %.o,%.d,$(call lib_objs,$(f)))) $(wildcard build/dep/*.d) \
         $(foreach b,$(CUDA_BUILDS),$(patsubst %.o,%.d,$(call cuda_objs,$(b))))

# idempotent: does nothing when every package is there
deps:
	@bash scripts/install_deps.sh

# (a program's own source compiles to build/obj/PROGRAM.o, so that a change in a library
# file relinks it without compiling it again)
train_gpt2_zero3_cpu: build/obj/train_gpt2_zero3_cpu.o $(LIB)
	$(MPICC) $(CFLAGS) $< $(LIB) -o $@ $(PKG_LIBS)
build/obj/train_gpt2_zero3_cpu.o: train_gpt2_zero3.c | build
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) $(PKG_CFLAGS) $(BINDEP) -c $< -o $@

# inspect, consolidate and extract-optimizer on a checkpoint directory (mpicc: llmc/checkpoint.h
# names MPI's types)
checkpoint_tool: dev/checkpoint_tool.c $(LIB) | build
	$(MPICC) $(CFLAGS) $(PKG_CFLAGS) $(BINDEP) $< $(LIB) -o $@ $(PKG_LIBS)

tokenize: dev/tokenize.c $(LIB) | build
	$(CC) $(CFLAGS) $(PKG_CFLAGS) $(BINDEP) $< $(LIB) -o $@ $(PKG_LIBS)

# tinyshakespeare token shards and the tokenizer file, made by our own tokenizer
data: $(TRAIN_DATA) $(TOKENIZER)
$(TRAIN_DATA): tokenize dev/data/tinyshakespeare.sh dev/data/tinyshakespeare/input.txt
	bash dev/data/tinyshakespeare.sh
$(TOKENIZER): tokenize dev/data/gpt2/encoder.json dev/data/gpt2/vocab.bpe
	./tokenize --tokenizer-file $@

# Two commands from a fresh machine: `make demo` trains a small GPT-2 (d6) on
# tinyshakespeare for 240 steps (about 4 minutes on 2 cores) and prints samples.
DEMO_FLAGS ?= -e d6 -b 8 -t 64 -x 240 -l 1e-3 -u 20 -q 0.1 -c 0.1 -v 80 -m 10 -s 80 -g 64 -o log_demo
demo: deps
	$(MAKE) all data
	./train_gpt2_zero3_cpu $(DEMO_FLAGS)

# ---------------------------------------------------------------------------
# tests

build:
	mkdir -p build

build/test_%: build/obj/build/test_%.o $(LIB)
	$(MPICC) $(CFLAGS) $< $(LIB) -o $@ $(CRIT_FLAGS) $(PKG_LIBS)
build/obj/build/test_%.o: test/unit/test_%.c | build
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) $(PKG_CFLAGS) $(BINDEP) -c $< -o $@

# the schedule's tests see the engine interface (zero3/zero.h), which names MPI's types
build/test_schedule: build/obj/build/test_schedule.o $(LIB)
	$(MPICC) $(CFLAGS) $< $(LIB) -o $@ $(CRIT_FLAGS) $(PKG_LIBS)

# the reference checker includes the trainer (llm.c's TESTING idiom), so it needs mpicc
build/test_gpt2: build/obj/build/test_gpt2.o $(LIB)
	$(MPICC) $(CFLAGS) $< $(LIB) -o $@ $(PKG_LIBS)
build/obj/build/test_gpt2.o: test/e2e/test_gpt2.c | build
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) $(PKG_CFLAGS) $(BINDEP) -c $< -o $@

# the tensor calls' driver includes the trainer too
build/test_access: build/obj/build/test_access.o $(LIB)
	$(MPICC) $(CFLAGS) $< $(LIB) -o $@ $(PKG_LIBS)
build/obj/build/test_access.o: test/e2e/test_access.c | build
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) $(PKG_CFLAGS) $(BINDEP) -c $< -o $@

# multi-rank drivers: plain MPI programs (Criterion forks, so MPI stays out of it)
# (the chunked one compiles the collectives, zero3/comm*.c, with its chunk itself, ahead of
# the library's)
COMM_SRCS = $(wildcard zero3/comm*.c)
build/test_comm_mpi: test/unit/test_comm_mpi.c $(LIB) | build
	$(MPICC) $(CFLAGS) $(BINDEP) $< $(LIB) -o $@ $(PKG_LIBS)
build/test_comm_mpi_chunk: test/unit/test_comm_mpi.c $(COMM_SRCS) $(LLMC_HEADERS) $(LIB) | build
	$(MPICC) $(CFLAGS) -DZERO_COMM_CHUNK=7 $< $(COMM_SRCS) $(LIB) -o $@ $(PKG_LIBS)

# The CUDA code on the CPU (test/emu's runtime, cuBLAS and NCCL stand-ins): copies under
# build/emu with each kernel launch `k<<<cfg>>>(args)` rewritten to `emu_launch(k, cfg)(args)`
# each `extern __shared__ T name[];` to EMU_DYNAMIC_SMEM(T, name), and each `__shared__ T
# name[...];` registered (emu_shared_register: poisoned before every block), built with g++.
MPICXX   ?= mpicxx
CXX      ?= g++
EMU_SED   = sed -E -e 's/([A-Za-z_][A-Za-z_0-9]*(<[^<>]*>)?)<<<(.*)>>>\(/emu_launch(\1, \3)(/' \
                   -e 's/extern __shared__ ([A-Za-z_0-9]+) ([A-Za-z_0-9]+)\[\];/EMU_DYNAMIC_SMEM(\1, \2);/' \
                   -e 's/^(\s*__shared__ [A-Za-z_0-9]+ ([A-Za-z_0-9]+)(\[[^;]*\])*;)/\1 static int emu_shared_\2 __attribute__((unused)) = emu_shared_register(\&\2, sizeof(\2));/'
EMU_SRCS  = $(patsubst %,build/emu/%,$(wildcard llmc/*.cuh) $(wildcard zero3/*.cuh) $(CUDA_LIB_SRCS) test/gpu/test_kernels_gpu.cu \
                                     test/gpu/test_kernels2_gpu.cu train_gpt2_zero3.cu dev/bench_attention.cu)
EMU_DEPS  = $(EMU_SRCS) $(wildcard test/emu/*.h test/emu/*.cuh test/emu/*/*.h test/emu/cub/device/*.cuh)
build/emu/%: % | build
	@mkdir -p $(dir $@)
	$(EMU_SED) $< > $@
	@! grep -n '<<<\|extern __shared__' $@ || { echo "left unrewritten in $@"; rm -f $@; exit 1; }
# Every load and store calls test/emu/emu_device.h's __asan_*_noabort callbacks (the kernel
# address sanitizer's call-based instrumentation, with no sanitizer runtime): how the race
# checker sees which memory a kernel touches, and host code that touches device memory.
EMU_TRACK = -DEMU_TRACK -fsanitize=kernel-address --param asan-instrumentation-with-call-threshold=0 --param asan-stack=0 \
            --param asan-globals=0 --param asan-use-after-return=0
EMU_FLAGS = -std=c++17 -Wall -Wno-unused-function -Wno-maybe-uninitialized -Wno-unknown-pragmas -fopenmp -D_GNU_SOURCE -DLLMC_EMU \
            $(EMU_TRACK)

# the device engine (an offset off by one in a shard copy runs into the unmapped page after
# its allocation, or into the checker); its AdamW launchers computed directly
# (test/emu/adamw_host.cuh, included by the test in place of zero3/adamw.cuh); fp32, and bf16
# (the gradients' reduction in bf16 or fp32)
build/test_device_emu build/test_device_emu_bf16: build/test_device_emu%: build/obj/build/test_device_emu%.o $(EMU_LIB)
	$(MPICXX) -O1 -g $(EMU_FLAGS) $< $(EMU_LIB) -o $@ $(PKG_LIBS)
build/obj/build/test_device_emu.o build/obj/build/test_device_emu_bf16.o: build/obj/build/test_device_emu%.o: test/emu/test_device_emu.cc $(EMU_DEPS) | build
	@mkdir -p $(dir $@)
	$(MPICXX) -O1 -g -fno-omit-frame-pointer $(EMU_FLAGS) $(if $(findstring bf16,$@),,-DENABLE_FP32) \
	  -Ibuild/emu -Itest/emu -I. $(PKG_CFLAGS) $(BINDEP) -c $< -o $@
# the emulator's own test (its limits, races it must catch, cuBLASLt's orders by alignment)
build/test_emu: test/emu/test_emu.cc $(EMU_DEPS) | build
	mkdir -p build/emu/test/emu && $(EMU_SED) $< > build/emu/test/emu/test_emu.cc
	$(CXX) -O1 -g $(EMU_FLAGS) -Itest/emu -I. $(BLAS_CFLAGS) $(BINDEP) build/emu/test/emu/test_emu.cc -o $@ $(BLAS_LIBS)
# the emulated NCCL's own test (bf16 rounded per hop of the ring; int8, send/recv groups, split;
# zero3/nccl.cuh's all-to-all over it)
build/test_nccl_emu: build/obj/build/test_nccl_emu.o $(EMU_LIB)
	$(MPICXX) -O1 -g $(EMU_FLAGS) $< $(EMU_LIB) -o $@ $(PKG_LIBS)
build/obj/build/test_nccl_emu.o: test/emu/test_nccl_emu.cc $(EMU_DEPS) | build
	@mkdir -p $(dir $@)
	$(MPICXX) -O1 -g $(EMU_FLAGS) -Ibuild/emu -Itest/emu -I. $(PKG_CFLAGS) $(BINDEP) -c $< -o $@
# the kernels' GPU tests, fp32 and bf16
EMU_KERNEL_TESTS = build/test_kernels_emu build/test_kernels_emu_fp32 build/test_kernels2_emu build/test_kernels2_emu_fp32
# (a rewritten .cu: fp32 when the target's name says so; a program's own, EMU_PROGRAM, also
# defines the emulator's globals, which the engines' objects, EMU_OBJECT, share)
EMU_OBJECT  = -O2 $(EMU_FLAGS) $(if $(findstring fp32,$@),-DENABLE_FP32) -x c++ -Ibuild/emu -Itest/emu -I.
EMU_PROGRAM = $(EMU_OBJECT) -DEMU_DEFINE_GLOBALS
# (linked apart from their compile, as the programs above: EMU_LINK)
EMU_LINK = -O2 $(EMU_FLAGS)
build/test_kernels_emu build/test_kernels_emu_fp32 build/test_kernels2_emu build/test_kernels2_emu_fp32: %: build/obj/%.o $(EMU_LIB)
	$(CXX) $(EMU_LINK) $< $(EMU_LIB) -o $@ $(BLAS_LIBS) -lm
$(patsubst %,build/obj/%.o,build/test_kernels_emu build/test_kernels_emu_fp32): build/obj/build/test_kernels_emu%.o: $(EMU_DEPS) | build
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_PROGRAM) $(BLAS_CFLAGS) $(BINDEP) -c build/emu/test/gpu/test_kernels_gpu.cu -o $@
$(patsubst %,build/obj/%.o,build/test_kernels2_emu build/test_kernels2_emu_fp32): build/obj/build/test_kernels2_emu%.o: $(EMU_DEPS) | build
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_PROGRAM) $(BLAS_CFLAGS) $(BINDEP) -c build/emu/test/gpu/test_kernels2_gpu.cu -o $@
# the attention benchmark (dev/bench_attention.cu), emulated: what stands in for it in the
# rehearsal of scripts/gpu_speed.sh (test/gpu/test_gpu_bundle.sh)
build/bench_attention_emu: build/obj/build/bench_attention_emu.o $(EMU_LIB)
	$(CXX) $(EMU_LINK) $< $(EMU_LIB) -o $@ $(BLAS_LIBS) -lm
build/obj/build/bench_attention_emu.o: $(EMU_DEPS) | build
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_PROGRAM) $(BLAS_CFLAGS) $(BINDEP) -c build/emu/dev/bench_attention.cu -o $@
# the GPU trainer itself, bf16 and fp32, every kernel and the device engine emulated (slow:
# for tiny models); the engines are objects of their own (emu/bf16, emu/fp32). The rewritten
# copies are made first (order-only); what each object includes is then tracked by its
# dependency file, so an engine file's change recompiles the engines' object, not the trainer's.
build/train_gpt2_zero3_emu: build/obj/build/train_gpt2_zero3_emu.o $(call cuda_objs,emu/bf16) $(EMU_LIB)
build/train_gpt2_zero3_emu_fp32: build/obj/build/train_gpt2_zero3_emu_fp32.o $(call cuda_objs,emu/fp32) $(EMU_LIB)
build/train_gpt2_zero3_emu build/train_gpt2_zero3_emu_fp32:
	$(MPICXX) $(EMU_LINK) $(filter %.o,$^) $(EMU_LIB) -o $@ $(PKG_LIBS)
$(patsubst %,build/obj/%.o,build/train_gpt2_zero3_emu build/train_gpt2_zero3_emu_fp32): build/obj/build/train_gpt2_zero3_emu%.o: build/emu/train_gpt2_zero3.cu | $(EMU_DEPS) build
	@mkdir -p $(dir $@)
	$(MPICXX) $(EMU_PROGRAM) $(PKG_CFLAGS) $(BINDEP) -c build/emu/train_gpt2_zero3.cu -o $@
build/lib/emu/bf16/%.o: build/emu/%.cu | $(EMU_DEPS) build
	@mkdir -p $(dir $@)
	$(MPICXX) $(EMU_OBJECT) $(PKG_CFLAGS) $(CUDADEP) -c $< -o $@
build/lib/emu/fp32/%.o: build/emu/%.cu | $(EMU_DEPS) build
	@mkdir -p $(dir $@)
	$(MPICXX) $(EMU_OBJECT) $(PKG_CFLAGS) $(CUDADEP) -c $< -o $@

# built without -march=native: the run-time ISA dispatch is what gets tested (so it compiles
# the few library files it needs itself, not the library's -march=native objects)
CPU_ADAM_SRCS = zero3/cpu_adam.c zero3/adamw.c zero3/util.c
build/test_cpu_adam: test/unit/test_cpu_adam.c $(wildcard $(CPU_ADAM_SRCS)) zero3/cpu_adam.h zero3/adamw.h zero3/util.h | build
	$(CC) -O2 -fopenmp -std=gnu11 -Wall -Wextra -I. $< $(wildcard $(CPU_ADAM_SRCS)) -o $@ $(CRIT_FLAGS) -lm

# AddressSanitizer + UndefinedBehaviorSanitizer builds (make test runs the CPU trainer's
# offload suite and the engine's unit tests with them): -O1 keeps the stacks readable, and
# UB stops the program so that it fails the test. Not -march=native: the ISA dispatch runs.
SAN_FLAGS = -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
SAN_CFLAGS = $(SAN_FLAGS) $(filter-out $(OPT),$(CFLAGS))
build/train_gpt2_zero3_cpu_asan: build/obj/build/train_gpt2_zero3_cpu_asan.o $(SAN_LIB)
	$(MPICC) $(SAN_CFLAGS) $< $(SAN_LIB) -o $@ $(PKG_LIBS)
build/obj/build/train_gpt2_zero3_cpu_asan.o: train_gpt2_zero3.c | build
	@mkdir -p $(dir $@)
	$(MPICC) $(SAN_CFLAGS) $(PKG_CFLAGS) $(BINDEP) -c $< -o $@
# the engine's units (mpicc for all: the schedule's test names MPI's types)
build/asan/test_%: build/obj/build/asan/test_%.o $(SAN_LIB)
	@mkdir -p build/asan
	$(MPICC) $(SAN_CFLAGS) $< $(SAN_LIB) -o $@ $(CRIT_FLAGS) $(PKG_LIBS)
build/obj/build/asan/test_%.o: test/unit/test_%.c | build
	@mkdir -p $(dir $@)
	$(MPICC) $(SAN_CFLAGS) $(PKG_CFLAGS) $(BINDEP) -c $< -o $@
SAN_UNIT_TESTS = build/asan/test_plan build/asan/test_reshard build/asan/test_schedule build/asan/test_cpu_adam build/asan/test_nvme build/asan/test_swap build/asan/test_config \
                 build/asan/test_options
SAN_TESTS = build/train_gpt2_zero3_cpu_asan build/asan/test_comm_mpi $(SAN_UNIT_TESTS)

# libFuzzer harnesses of the file readers (test/fuzz/run_fuzz.sh runs them): clang's
# sanitizers, UB fatal; MPI for the checkpoint harness's engine
CLANG      ?= clang
FUZZ_FLAGS  = -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
              -std=gnu11 -D_GNU_SOURCE -Wall -Wno-unused-function -Wno-unknown-pragmas -I.
build/fuzz/fuzz_%: test/fuzz/fuzz_%.c $(FUZZ_LIB) | build
	@mkdir -p build/fuzz
	$(CLANG) $(FUZZ_FLAGS) $(MPI_CFLAGS) $(PKG_CFLAGS) $(BINDEP) $< $(FUZZ_LIB) -o $@ $(PKG_LIBS) $(MPI_LIBS)
FUZZERS = build/fuzz/fuzz_model build/fuzz/fuzz_shard build/fuzz/fuzz_tokenizer build/fuzz/fuzz_checkpoint build/fuzz/fuzz_ds_config

# the tests' allocation counter (test/e2e/alloc_peak.c), loaded with LD_PRELOAD
build/alloc_peak.so: test/e2e/alloc_peak.c | build
	$(CC) -O2 -Wall -Wextra -shared -fPIC $< -o $@

UNIT_TESTS = build/test_tokenizer build/test_dataloader build/test_ops build/test_model build/test_plan build/test_reshard build/test_schedule build/test_config \
             build/test_options build/test_cpu_adam build/test_nvme build/test_swap build/test_file
MPI_TESTS  = build/test_gpt2 build/test_access build/test_comm_mpi build/test_comm_mpi_chunk build/test_device_emu build/test_device_emu_bf16 \
             build/test_nccl_emu build/test_emu

# the build in parallel on every core (a minute less on 2 cores than one at a time)
NPROC ?= $(shell nproc 2>/dev/null || echo 1)
test: deps
	$(MAKE) -j$(NPROC) all data $(UNIT_TESTS) $(MPI_TESTS) $(EMU_KERNEL_TESTS) build/train_gpt2_zero3_emu build/train_gpt2_zero3_emu_fp32 build/bench_attention_emu \
	  $(SAN_TESTS) $(FUZZERS) build/alloc_peak.so $(BENCH_PROGRAMS)
	bash test/run_all.sh $(UNIT_TESTS)

# the benchmarks' programs (dev/bench_*.c), which the scripts/bench_*.sh build through
# these targets: make test builds them all, so that one that no longer compiles fails it
# (test/e2e/test_scripts.sh runs each script on a tiny size)
build/bench_sgemm: dev/bench_sgemm.c | build
	$(CC) $(CFLAGS) $(BLAS_CFLAGS) $< -o $@ $(BLAS_LIBS)
build/bench_cpu_adam: dev/bench_cpu_adam.c $(LIB) | build
	$(CC) $(CFLAGS) $(BINDEP) $< $(LIB) -o $@ $(PKG_LIBS)
build/bench_nvme: dev/bench_nvme.c $(LIB) | build
	$(CC) $(CFLAGS) $(PKG_CFLAGS) $(BINDEP) $< $(LIB) -o $@ $(PKG_LIBS)
BENCH_PROGRAMS = build/bench_sgemm build/bench_cpu_adam build/bench_nvme

bench: deps
	$(MAKE) all
	bash scripts/bench_cpu_trainer.sh

# ---------------------------------------------------------------------------
# CUDA: the kernels (llmc/*.cuh) and their tests against the CPU ops. Built for the
# local GPU's architecture when nvidia-smi finds one, else for sm_80 and sm_90, so a
# machine without a GPU (CI) compiles them too.
NVCC      ?= nvcc
GPU_CC    := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
CUDA_ARCH ?= $(if $(GPU_CC),-arch=sm_$(GPU_CC),-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90)
# (--threads 0: the architectures compiled side by side, one per core)
NVCCFLAGS ?= -O3 -std=c++17 $(CUDA_ARCH) --threads 0 -I. -D_GNU_SOURCE -Xcompiler -fopenmp $(BLAS_CFLAGS)
# nvcc passes linker options with -Xlinker, not -Wl
CUDA_LIBS  = -lcublas -lcublasLt -lnccl $(if $(BLAS_DIR),-L$(BLAS_DIR) -Xlinker -rpath=$(BLAS_DIR) -lopenblas,$(BLAS_LIBS))
CUDA_HEADERS = $(wildcard llmc/*.cuh) $(wildcard zero3/*.cuh) $(LLMC_HEADERS) $(GPU_LIB)
GPU_TESTS = build/test_kernels_gpu build/test_kernels_gpu_fp32 build/test_kernels2_gpu build/test_kernels2_gpu_fp32

build/test_kernels_gpu: test/gpu/test_kernels_gpu.cu $(CUDA_HEADERS) | build
	$(NVCC) $(NVCCFLAGS) $< $(GPU_LIB) -o $@ $(CUDA_LIBS)
build/test_kernels_gpu_fp32: test/gpu/test_kernels_gpu.cu $(CUDA_HEADERS) | build
	$(NVCC) $(NVCCFLAGS) -DENABLE_FP32 $< $(GPU_LIB) -o $@ $(CUDA_LIBS)
build/test_kernels2_gpu: test/gpu/test_kernels2_gpu.cu $(CUDA_HEADERS) | build
	$(NVCC) $(NVCCFLAGS) $< $(GPU_LIB) -o $@ $(CUDA_LIBS)
build/test_kernels2_gpu_fp32: test/gpu/test_kernels2_gpu.cu $(CUDA_HEADERS) | build
	$(NVCC) $(NVCCFLAGS) -DENABLE_FP32 $< $(GPU_LIB) -o $@ $(CUDA_LIBS)

# the trainer's two attention paths timed (bf16), scripts/bench_attention.sh's
build/bench_attention: dev/bench_attention.cu $(CUDA_HEADERS) | build
	$(NVCC) $(NVCCFLAGS) $< $(GPU_LIB) -o $@ $(CUDA_LIBS)

# what a GPU machine offers (CUDA, the GPUs, the cuBLAS(Lt) and NCCL the loader finds, and
# from where), and with --rates the copy and pinning rates: host code only, so no architecture;
# scripts/gpu_first_contact.sh and gpu_speed.sh run it first
build/gpu_probe: dev/gpu_probe.cu | build
	$(NVCC) -O2 -std=c++17 -Xcompiler -fopenmp $< -o $@ -lcublas -lcublasLt -lnccl -lgomp

# the emulator's stand-in headers (test/emu) against the real CUDA, cuBLAS(Lt), NCCL, bf16, cub
# and NVTX headers: enumerator values, constants, types, members and signatures (needs nvcc;
# make test runs it)
check-headers:
	bash test/emu/test_headers.sh

# on a machine with a GPU: every kernel against the CPU ops, in fp32 and in bf16, then
# the GPU trainer against PyTorch and the CPU trainer
test-gpu: deps
	$(MAKE) all data $(GPU_TESTS) train_gpt2_zero3 train_gpt2_zero3_fp32
	@status=0; for t in $(GPU_TESTS); do echo "=== $$t"; ./$$t || status=1; done; \
	 echo "=== test/gpu/test_gpu_trainer.sh"; bash test/gpu/test_gpu_trainer.sh || status=1; exit $$status

# the GPU trainer (bf16; the fp32 build is for testing against the CPU trainer)
GPU_TRAINER_FLAGS = $(NVCCFLAGS) $(MPI_CFLAGS) $(PKG_CFLAGS)
GPU_TRAINER_LIBS  = $(CUDA_LIBS) $(MPI_LIBS) $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm

# (the trainer's own .cu compiles to build/obj, the engines to their objects, gpu/bf16 and
# gpu/fp32, each tracked: a change to an engine file recompiles the engines' object and relinks)
train_gpt2_zero3: build/obj/train_gpt2_zero3.o $(call cuda_objs,gpu/bf16) $(GPU_LIB)
train_gpt2_zero3_fp32: build/obj/train_gpt2_zero3_fp32.o $(call cuda_objs,gpu/fp32) $(GPU_LIB)
train_gpt2_zero3 train_gpt2_zero3_fp32:
	$(NVCC) $(GPU_TRAINER_FLAGS) $(filter %.o,$^) $(GPU_LIB) -o $@ $(GPU_TRAINER_LIBS)
build/obj/train_gpt2_zero3.o build/obj/train_gpt2_zero3_fp32.o: build/obj/%.o: train_gpt2_zero3.cu | build
	@mkdir -p $(dir $@)
	$(NVCC) $(GPU_TRAINER_FLAGS) $(if $(findstring fp32,$@),-DENABLE_FP32) $(BINDEP) -c $< -o $@
build/lib/gpu/bf16/%.o: %.cu | build
	@mkdir -p $(dir $@)
	$(NVCC) $(GPU_TRAINER_FLAGS) $(CUDADEP) -c $< -o $@
build/lib/gpu/fp32/%.o: %.cu | build
	@mkdir -p $(dir $@)
	$(NVCC) $(GPU_TRAINER_FLAGS) -DENABLE_FP32 $(CUDADEP) -c $< -o $@

clean:
	rm -rf build train_gpt2_zero3_cpu checkpoint_tool train_gpt2_zero3 train_gpt2_zero3_fp32 tokenize $(TOKENIZER) dev/data/tinyshakespeare/*.bin log_demo
