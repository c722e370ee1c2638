# dl.h - the library is the headers in include/; this Makefile only builds
# and runs its tests, examples and benchmarks.
#
#   make run     the main job: trains examples/fashion_mlp.c (installs what it needs);
#                ARGS="--epochs 3" passes flags to it
#   make examples  every example, built into build/
#   make test    the whole test suite; ends with "N passed, N failed"
#   make bench   benchmarks against their references, printed as ratios
#   make quick   the test suite without the sanitizer pass

CC = gcc
WARN = -std=c11 -Wall -Wextra -Wpedantic -Werror
BUILD = build

.PHONY: all run examples test quick bench clean deps-run deps-test deps-bench

all: test

deps-run:
	@bash tools/deps.sh run
deps-test:
	@bash tools/deps.sh test
deps-bench:
	@bash tools/deps.sh bench

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

bench: deps-bench
	bash bench/run_all.sh

clean:
	rm -rf $(BUILD)
