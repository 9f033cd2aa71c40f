# dgrr: a thin front over CMake. Every target installs missing Debian packages
# first (scripts/install-deps.sh is idempotent and quiet when nothing is missing).
BUILD      ?= build
# The ASan+UBSan suite and the fuzzers share one clang build (docs/ci.md): its
# dgrr libraries carry the fuzzers' coverage hooks, its tests do not.
SAN_BUILD  ?= build-asan
FUZZ_BUILD ?= $(SAN_BUILD)
TSAN_BUILD ?= build-tsan
# Seconds per fuzz target: `make fuzz` (a real session) and `make fuzz-smoke` (CI).
FUZZ_SECONDS       ?= 60
FUZZ_SMOKE_SECONDS ?= 8
# What `make tsan` builds and runs: the executables whose tests drive dgrr's
# threads (trainer workers and the persistent pool, rank threads and their
# barriers, the trace writer's I/O thread, sessions, rollback, the kill test's
# processes). The CLI and bisect suites replay the same threads again and
# would double the pass's time; `make tsan TSAN_EXES=all` runs everything.
TSAN_EXES ?= base_test trace_format_test runtime_test model_test trainer_test rollback_test train_process_test
# Tests the sanitizer passes (sanitize, tsan) leave to the Release pass (`make test`),
# to keep CI inside its budget (docs/ci.md): numeric checks whose long training
# loops only repeat, instrumented, code that shorter tests cover (loss curves over
# 200 steps, the golden fingerprints, the resume at every checkpoint), and four
# of the five corruption kinds of the inject drills (nan stays: each kind runs the
# same injection, compare and bisect code, only the corrupted value differs).
# `make sanitize SAN_EXCLUDE=` runs everything.
SAN_EXCLUDE ?= InjectKindDrillTest\..*/(multibit|stuckbyte|random|inf)_|GoldenBits\.TrainingMatchesRecordedFingerprints|TrainTiny\.LossFallsOver200Steps|TrainerTest\.LossFallsOnTheEmbeddedCorpus|TrainerTest\.ResumingAtEveryCheckpointReproducesTheUninterruptedRun
SAN_CTEST_EXCLUDE = $(if $(strip $(SAN_EXCLUDE)),-E '$(SAN_EXCLUDE)')
# ThreadSanitizer also leaves out the GEMM kernels' bitwise checks: one thread
# each, nothing for it to find, and 37 s of its pass (docs/ci.md).
TSAN_EXCLUDE ?= $(SAN_EXCLUDE)|^Matmul\.
TSAN_CTEST_EXCLUDE = $(if $(strip $(TSAN_EXCLUDE)),-E '$(TSAN_EXCLUDE)')
# Optimisation of the test sources (not the libraries) in the sanitizer passes:
# -Og compiles in about two thirds of -O1's time under ASan (docs/ci.md).
TEST_OPTIMIZE ?= -Og
JOBS       ?= $(shell nproc)
CMAKE_GEN  := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
CTEST_ARGS ?= --output-on-failure -j $(JOBS)

.PHONY: all deps build test run sanitize fuzz-build fuzz fuzz-smoke tsan bench clean

all: build

deps:
	@./scripts/install-deps.sh

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Release

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# Then the tests whose work goes through a run-time dispatched kernel again,
# with the kernels capped at AVX2 and at SSE2 (DGRR_MAX_ISA, docs/environment.md):
# on an AVX-512 machine the narrower paths run end to end too (golden model
# fingerprints, traces, Philox), not only kernel against kernel. A few seconds.
ISA_CAPPED_TESTS = Fingerprint|Crc|Scan|Philox|Fill|Gemm|Matmul|Gpt|Golden|DetMath|MaxIsa
test: build
	ctest --test-dir $(BUILD) $(CTEST_ARGS)
	DGRR_MAX_ISA=avx2 ctest --test-dir $(BUILD) $(CTEST_ARGS) -R '$(ISA_CAPPED_TESTS)'
	DGRR_MAX_ISA=sse2 ctest --test-dir $(BUILD) $(CTEST_ARGS) -R '$(ISA_CAPPED_TESTS)'

run: build
	./scripts/demo.sh $(BUILD)

# One configure for the sanitizer pass and the fuzzers: clang, ASan+UBSan,
# libFuzzer's coverage hooks in dgrr's libraries, no CUDA, no MPI (Open MPI is
# not built with sanitizers), no benchmarks.
define configure-asan
	CC=clang CXX=clang++ cmake -S . -B $(1) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DDGRR_FUZZ=ON \
	  -DDGRR_ENABLE_CUDA=OFF -DDGRR_ENABLE_MPI=OFF -DDGRR_BUILD_BENCH=OFF \
	  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DCMAKE_C_FLAGS_DEBUG="-O1 -g1" \
	  -DDGRR_TEST_OPTIMIZE=$(TEST_OPTIMIZE)
endef

# LeakSanitizer reads the fuzzers' suppressions (third-party only: libhdf5's
# leak on a failed object-header decode, fuzz/lsan.supp) in the tests too.
sanitize: deps
	$(call configure-asan,$(SAN_BUILD))
	cmake --build $(SAN_BUILD) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/fuzz/lsan.supp:print_suppressions=0 \
	  ctest --test-dir $(SAN_BUILD) $(CTEST_ARGS) $(SAN_CTEST_EXCLUDE)

# libFuzzer targets (fuzz/README.md): the sanitizer pass's build (after
# `make sanitize` only the seeds are left to make).
fuzz-build: deps
	$(call configure-asan,$(FUZZ_BUILD))
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_all dgrr
	./fuzz/make-seeds.sh $(FUZZ_BUILD)/cli/dgrr $(FUZZ_BUILD)/fuzz-seeds

fuzz: fuzz-build
	./fuzz/run-fuzzers.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

fuzz-smoke: fuzz-build
	./fuzz/run-fuzzers.sh $(FUZZ_BUILD) $(FUZZ_SMOKE_SECONDS)

# ThreadSanitizer over the threaded paths; suppressions (third-party only) in scripts/tsan.supp.
# The sanitizer and fuzz builds leave out the MPI communicator (Open MPI is not
# built with sanitizers; its own allocations and threads would be reported):
# the mpi tests run in `make test`.
tsan: deps
	cmake -S . -B $(TSAN_BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DDGRR_TSAN=ON \
	  -DDGRR_ENABLE_CUDA=OFF -DDGRR_ENABLE_MPI=OFF -DDGRR_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
	  -DDGRR_TEST_OPTIMIZE=$(TEST_OPTIMIZE)
ifeq ($(TSAN_EXES),all)
	cmake --build $(TSAN_BUILD) -j $(JOBS)
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/scripts/tsan.supp" \
	  ctest --test-dir $(TSAN_BUILD) $(CTEST_ARGS)
else
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target dgrr $(TSAN_EXES)
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/scripts/tsan.supp" \
	  ctest --test-dir $(TSAN_BUILD) $(CTEST_ARGS) -L '^($(subst $(eval) ,|,$(strip $(TSAN_EXES))))$$' $(TSAN_CTEST_EXCLUDE)
endif

bench: build
	./scripts/run-benchmarks.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(SAN_BUILD) $(FUZZ_BUILD) $(TSAN_BUILD)
