# dl.h - the library is the headers in include/; this Makefile only builds
# and runs its tests, examples and benchmarks.
#
#   make run     the main job (installs what it needs)
#   make test    the whole test suite; ends with "N passed, N failed"
#   make bench   benchmarks against their references, printed as ratios
#   make quick   the test suite without the sanitizer pass

CC = gcc
WARN = -std=c11 -Wall -Wextra -Wpedantic -Werror
BUILD = build

.PHONY: all run test quick bench clean deps-run deps-test deps-bench

all: test

deps-run:
	@bash tools/deps.sh run
deps-test:
	@bash tools/deps.sh test
deps-bench:
	@bash tools/deps.sh bench

# The main job: build an example the way a user does (one file, cc -O2 -lm) and run it.
run: deps-run
	@mkdir -p $(BUILD)
	$(CC) $(WARN) -O2 -Iinclude examples/newton.c -o $(BUILD)/newton -lm
	./$(BUILD)/newton

test: deps-test
	bash tests/run.sh

quick: deps-test
	DL_TEST_QUICK=1 bash tests/run.sh

bench: deps-bench
	bash bench/run_all.sh

clean:
	rm -rf $(BUILD)
