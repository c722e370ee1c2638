# dl.h - the library is the headers in include/; this Makefile only builds
# and runs its tests, examples and benchmarks.
#
#   make run     the main job: trains examples/fashion_mlp.c (installs what it needs);
#                ARGS="--epochs 3" passes flags to it
#   make examples  every example, built into build/
#   make test    the whole test suite; ends with "N passed, N failed"
#   make bench   benchmarks against their references, printed as ratios
#   make quick   the test suite without the sanitizer pass
#   make gpu     the CUDA library build/libdlgpu.a from src_gpu/ (nvcc; see dl/gpu.h),
#                and the examples built for --device cuda (build/*_cuda)
#   make gpu-fake  build/libdlgpu_fake.a: the same src_gpu/ on a fake device on the
#                host (g++, no CUDA needed; see src_gpu/fake/cuda_fake.h)
#   make install   the headers, dl.pc (and dl-openmp.pc, dl-openblas.pc, ...), the
#                CMake package dl::dl, the documents, and build/libdlgpu.a when
#                `make gpu-lib` built it; PREFIX (default /usr/local) and DESTDIR
#   make uninstall  removes what make install put there
#   make docs    the API reference from the header comments (Doxygen): build/docs/html/index.html;
#                fails when a public name has no comment (build/docs/warnings.log)
#   make fuzz-long every fuzz/fuzz_*.c for FUZZ_SECONDS each (default 3600; make test
#                runs them for 15 s): `make fuzz-long FUZZ_SECONDS=600 FUZZ_TARGETS="image"`

CC = gcc
WARN = -std=c11 -Wall -Wextra -Wpedantic -Werror
BUILD = build

.PHONY: all run examples test quick bench clean deps-run deps-test deps-bench docs deps-docs gpu gpu-lib gpu-fake \
  install uninstall version fuzz-long firmware deps-firmware

all: test

deps-run:
	@bash tools/deps.sh run
deps-test:
	@bash tools/deps.sh test
deps-bench:
	@bash tools/deps.sh bench
deps-firmware:
	@bash tools/deps.sh firmware
deps-docs:
	@bash tools/deps.sh docs

# The main job: train the MLP on Fashion-MNIST, built from its one file the
# way a user builds it (threads, OpenBLAS GEMM, zlib for the gzip files, stb
# for the PNG chart); it ends by printing the test accuracy, the weight file
# and the chart. The files land in build/.
FAST = -O3 -march=native -fopenmp -DDL_USE_OPENBLAS
run: deps-run
	@mkdir -p $(BUILD)
	$(CC) $(WARN) $(FAST) -Iinclude examples/fashion_mlp.c -o $(BUILD)/fashion_mlp -lopenblas -lz -lm
	./$(BUILD)/fashion_mlp --save $(BUILD)/fashion_mlp.safetensors --csv $(BUILD)/fashion_mlp.csv \
	  --chart $(BUILD)/fashion_mlp.png $(ARGS)

# Every example, built fast into build/ (see each file's top comment for its flags).
examples: deps-run
	@mkdir -p $(BUILD)
	@for e in examples/*.c; do n=$$(basename $$e .c); \
	  f=$$(sed -n 's|^ \* dl-example-flags: \(.*\)$$|\1|p' $$e | head -n 1); \
	  echo "$(CC) $(FAST) -Iinclude $$e -o $(BUILD)/$$n -lopenblas $$f -lm"; \
	  $(CC) $(WARN) $(FAST) -Iinclude $$e -o $(BUILD)/$$n -lopenblas $$f -lm || exit 1; done

test: deps-test
	bash tests/run.sh

quick: deps-test
	DL_TEST_QUICK=1 bash tests/run.sh

# Inference on a microcontroller: the MLP and the small CNN trained, exported
# in f32 and int8 (dl/export.h), built for a Cortex-M4 and run under QEMU
# (mps2-an386), their predictions compared with the host's; one result: line
# per model and precision (examples/firmware/run.sh).
firmware: deps-firmware
	bash examples/firmware/run.sh

bench: deps-bench
	bash bench/run_all.sh

clean:
	rm -rf $(BUILD)

# The GPU library: every src_gpu/*.cu compiled by nvcc for Ampere (sm_80) and
# Hopper (sm_90, plus its PTX for later GPUs), archived into build/libdlgpu.a.
# A program that defines DL_USE_CUDA links it with $(GPU_LIBS).
CUDA ?= /usr/local/cuda
NVCC ?= $(shell command -v nvcc 2>/dev/null || echo $(CUDA)/bin/nvcc)
NVFLAGS = -std=c++17 -O3 -Werror all-warnings -Iinclude -Isrc_gpu \
  -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
GPU_SRC = $(wildcard src_gpu/*.cu)
GPU_OBJ = $(patsubst src_gpu/%.cu,$(BUILD)/gpu/%.o,$(GPU_SRC))
GPU_DEPS = $(wildcard src_gpu/*.h include/dl/gpu/*.h include/dl/gpu/*.cuh include/dl/*.h)
GPU_CFLAGS = -DDL_USE_CUDA -I$(CUDA)/include
GPU_LIBS = $(BUILD)/libdlgpu.a -L$(CUDA)/lib64 -lcudnn -lcublas -lcudart -lstdc++

$(BUILD)/gpu/%.o: src_gpu/%.cu $(GPU_DEPS)
	@mkdir -p $(BUILD)/gpu
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(BUILD)/libdlgpu.a: $(GPU_OBJ)
	rm -f $@
	ar rcs $@ $(GPU_OBJ)

gpu-lib: $(BUILD)/libdlgpu.a

gpu: gpu-lib
	$(CC) $(WARN) $(FAST) $(GPU_CFLAGS) -Iinclude examples/fashion_mlp.c -o $(BUILD)/fashion_mlp_cuda $(GPU_LIBS) -lopenblas -lz -lm
	$(CC) $(WARN) $(FAST) $(GPU_CFLAGS) -Iinclude examples/fashion_cnn.c -o $(BUILD)/fashion_cnn_cuda $(GPU_LIBS) -lopenblas -lz -lm

# The fake device (src_gpu/fake/cuda_fake.h): the same src_gpu/*.cu compiled
# by g++ as C++ with DLG_FAKE (-O1 -g: debuggable; the fake's own loops -O2), plus the fake runtime, cuBLAS and cuDNN, into
# build/libdlgpu_fake.a. A program built with -DL_USE_CUDA links it with
# $(GPU_FAKE_LIBS) instead of $(GPU_LIBS) and runs its GPU path on the host,
# with device memory unreadable from host code. A user's op kernels
# (dl/gpu/ew.cuh) compile the same way: $(CXX) $(GPU_FAKE_FLAGS) -c ops.cu.
CXX ?= g++
GPU_FAKE_FLAGS = -std=c++17 -O1 -g -DDLG_FAKE -Iinclude -Isrc_gpu -Wall -Wextra -Werror -x c++
GPU_FAKE_OBJ = $(patsubst src_gpu/%.cu,$(BUILD)/gpu_fake/%.o,$(GPU_SRC)) $(BUILD)/gpu_fake/fake.o
GPU_FAKE_LIBS = $(BUILD)/libdlgpu_fake.a -lstdc++

$(BUILD)/gpu_fake/%.o: src_gpu/%.cu $(GPU_DEPS) src_gpu/fake/cuda_fake.h
	@mkdir -p $(BUILD)/gpu_fake
	$(CXX) $(GPU_FAKE_FLAGS) -c $< -o $@

$(BUILD)/gpu_fake/fake.o: src_gpu/fake/fake.cpp src_gpu/fake/cuda_fake.h
	@mkdir -p $(BUILD)/gpu_fake
	$(CXX) $(GPU_FAKE_FLAGS) -O2 -c $< -o $@

$(BUILD)/libdlgpu_fake.a: $(GPU_FAKE_OBJ)
	rm -f $@
	ar rcs $@ $(GPU_FAKE_OBJ)

gpu-fake: $(BUILD)/libdlgpu_fake.a

# Installing. The library is its headers: `make install` copies include/ to
# $(DESTDIR)$(PREFIX)/include and writes the pkg-config modules and the CMake
# package from pkg/*.in with this prefix and the version of
# include/dl/config.h (its one source of truth). dl-cuda.pc, the CMake CUDA
# component's library and libdlgpu.a are installed only when build/libdlgpu.a
# exists (make gpu-lib first). DESTDIR stages an install (packaging, tests).
PREFIX ?= /usr/local
DESTDIR ?=
INSTALL ?= install
VERSION := $(shell sed -n 's/^\#define DL_VERSION_STRING "\(.*\)"$$/\1/p' include/dl/config.h)
PC_MODULES = dl dl-openmp dl-openblas dl-zlib dl-stb dl-mpi
DOCS = README.md CHANGELOG.md LICENSE DESIGN.md
I_INC = $(DESTDIR)$(PREFIX)/include
I_LIB = $(DESTDIR)$(PREFIX)/lib
I_PC = $(I_LIB)/pkgconfig
I_CMAKE = $(I_LIB)/cmake/dl
I_DOC = $(DESTDIR)$(PREFIX)/share/doc/dl
SUBST = sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' -e 's|@CUDA@|$(CUDA)|g'

version:
	@echo $(VERSION)

install:
	@test -n "$(VERSION)" || { echo "make install: no DL_VERSION_STRING in include/dl/config.h" >&2; exit 1; }
	@case "$(PREFIX)" in /*) ;; *) echo "make install: PREFIX must be an absolute path (got '$(PREFIX)')" >&2; exit 1 ;; esac
	$(INSTALL) -d $(I_INC)/dl/ops $(I_INC)/dl/gpu $(I_PC) $(I_CMAKE) $(I_DOC)
	$(INSTALL) -m 644 include/dl.h $(I_INC)/dl.h
	$(INSTALL) -m 644 $(wildcard include/dl/*.h) $(I_INC)/dl
	$(INSTALL) -m 644 $(wildcard include/dl/ops/*.h) $(I_INC)/dl/ops
	$(INSTALL) -m 644 $(wildcard include/dl/gpu/*.h include/dl/gpu/*.cuh) $(I_INC)/dl/gpu
	@for m in $(PC_MODULES); do echo "$(SUBST) pkg/$$m.pc.in > $(I_PC)/$$m.pc"; \
	  $(SUBST) pkg/$$m.pc.in >$(I_PC)/$$m.pc && chmod 644 $(I_PC)/$$m.pc || exit 1; done
	$(SUBST) pkg/dlConfig.cmake.in >$(I_CMAKE)/dlConfig.cmake
	$(SUBST) pkg/dlConfigVersion.cmake.in >$(I_CMAKE)/dlConfigVersion.cmake
	chmod 644 $(I_CMAKE)/dlConfig.cmake $(I_CMAKE)/dlConfigVersion.cmake
	$(INSTALL) -m 644 $(DOCS) $(I_DOC)
	@if [ -f $(BUILD)/libdlgpu.a ]; then \
	  echo "$(INSTALL) -m 644 $(BUILD)/libdlgpu.a $(I_LIB)/libdlgpu.a"; \
	  $(INSTALL) -m 644 $(BUILD)/libdlgpu.a $(I_LIB)/libdlgpu.a && \
	  $(SUBST) pkg/dl-cuda.pc.in >$(I_PC)/dl-cuda.pc && chmod 644 $(I_PC)/dl-cuda.pc; \
	else echo "(no $(BUILD)/libdlgpu.a: the GPU library is not installed; make gpu-lib builds it)"; fi
	@echo "installed dl $(VERSION) in $(DESTDIR)$(PREFIX)"

uninstall:
	rm -f $(I_INC)/dl.h $(I_LIB)/libdlgpu.a
	rm -rf $(I_INC)/dl $(I_CMAKE) $(I_DOC)
	rm -f $(patsubst %,$(I_PC)/%.pc,$(PC_MODULES) dl-cuda)
	-rmdir $(I_LIB)/cmake $(I_PC) 2>/dev/null || true
	@echo "removed dl from $(DESTDIR)$(PREFIX)"

# Long fuzzing, not in CI: each target for FUZZ_SECONDS on a copy of its seed
# corpus (fuzz/run.sh prints the executions per target; crash inputs stay in
# build/fuzz/).
FUZZ_SECONDS ?= 3600
FUZZ_TARGETS ?=
fuzz-long:
	bash fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The API reference: Doxygen (Debian's doxygen) over include/ and docs/*.md,
# configured by docs/Doxyfile; the headers' plain comments become doc comments
# through tools/doxygen_filter.awk. HTML in build/docs/html; any warning (an
# undocumented public name, a broken comment) is printed and fails the target.
docs: deps-docs
	@mkdir -p $(BUILD)/docs
	doxygen docs/Doxyfile
	@if [ -s $(BUILD)/docs/warnings.log ]; then cat $(BUILD)/docs/warnings.log; \
	  echo "make docs: $$(wc -l <$(BUILD)/docs/warnings.log) warnings (build/docs/warnings.log)" >&2; exit 1; fi
	@echo "API reference: $(BUILD)/docs/html/index.html (no warnings)"
