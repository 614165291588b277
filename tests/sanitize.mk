# tests/sanitize.mk — sanitizer builds (TSan, ASan+UBSan) and the fuzzer targets; included by the Makefile.
#
#   make test-tsan   the stress tests and the fuzzer under ThreadSanitizer; fails on any report
#   make test-asan   the unit tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make test-asan-stress  the stress tests and the fuzzer under ASan + UBSan (an extra)
#   make fuzz        long fuzzer runs: several seeds, release and debug, EBB_DECAY_MS=1, EBB_BACKGROUND=1
#
# Both sanitizer builds compile allocator/static.c with -DEBB_NO_OVERRIDE: the
# sanitizer runtimes and Criterion keep glibc's malloc (which the sanitizers
# intercept), and the tests reach ebb only through the ebb_* names.

.PHONY: test-tsan test-asan test-asan-stress fuzz

SAN_CC ?= clang

# ---------------------------------------------------------------- ThreadSanitizer
# The stress tests that call only ebb_* names (all of them as converted, and the
# fuzzer). A new stress test joins this list once it does too.
TSAN_SRC := tests/stress/test_arenas.c tests/stress/test_churn.c tests/stress/test_fork.c tests/stress/test_warm_threads.c \
            tests/stress/test_fuzz.c tests/stress/test_pattern.c tests/stress/test_xthread.c \
            tests/stress/test_races.c tests/stress/test_threads_churn.c tests/stress/test_fork_handlers.c \
            tests/stress/test_reclaim.c
TSAN_HDR := tests/stress/stress_util.h tests/stress/fuzz_model.h
TSAN_DEBUG ?= 0
# EBBTEST_SCALE divides the stress tests' work (and the fuzzer's default op count):
# TSan runs them 5-15x slower; at 1 the whole target takes about 1.5 minutes on 2 cores.
TSAN_SCALE ?= 1
# die_after_fork=0: test_fork's children start threads (TSan supports it but warns
# by default); exitcode: a test process that saw a report fails even when its
# checks passed. halt_on_error=0 so one run lists every distinct report.
TSAN_RUN_OPTIONS ?= halt_on_error=0 exitcode=66 die_after_fork=0 second_deadlock_stack=1 history_size=4

$(B)/tsan/ebb.o: $(LIB_SRC) | $(B)/tsan
	$(SAN_CC) $(CFLAGS_LIB) -O1 -fsanitize=thread -DEBB_DEBUG=$(TSAN_DEBUG) -DEBB_NO_OVERRIDE \
	  -c allocator/static.c -o $@
# Criterion cannot start under TSan (see stress_util.h): the stress sources are built
# with the stand-in stress_util.h provides, force-included, and without -lcriterion.
$(B)/tests/stress-tsan: $(TSAN_SRC) $(TSAN_HDR) $(B)/tsan/ebb.o tests/sanitize.mk | $(B)/tests
	$(SAN_CC) $(TCFLAGS) -fsanitize=thread -DEBB_STRESS_NO_CRITERION -include tests/stress/stress_util.h \
	  $(TSAN_SRC) $(B)/tsan/ebb.o -o $@ -pthread
$(B)/tsan:
	mkdir -p $@

# All three runs always go to the end (so the log lists every distinct report); the
# target then passes only if each ran every test, none failed (a test process
# with a report exits 66) and the log holds no report. The second run repeats the
# fuzzer with decay passes every millisecond, the background thread, and
# EBB_DIRTY_MAX=auto+0 (a thread that grows purges other arenas' free units), so
# purging races with frees. The third repeats the cross-thread tests with decay
# passes every millisecond run by the threads themselves (no background
# thread): each thread's pass then looks at the others' arenas while they
# allocate. A pass giving back another thread's kept page while the owner's
# malloc looked at it (one_spare_take) showed up in CI only once in a while at
# the default decay, and here in every run; the second run's settings did not
# find it.
TSAN_ENV = TSAN_OPTIONS="$(TSAN_RUN_OPTIONS)" EBBTEST_SCALE=$(TSAN_SCALE)
TSAN_LOG = $(B)/tests/stress-tsan.log
test-tsan: $(B)/tests/stress-tsan
	rm -f $(TSAN_LOG) $(TSAN_LOG).2 $(TSAN_LOG).3
	-@$(TSAN_ENV) $(SUITE) tsan $(TSAN_LOG) "the stress tests and the fuzzer under ThreadSanitizer (clang, ebb_* API)" \
	  -- $(B)/tests/stress-tsan --jobs=1
	-@$(TSAN_ENV) EBB_DECAY_MS=1 EBB_BACKGROUND=1 EBB_DIRTY_MAX=auto+0 $(SUITE) tsan-decay $(TSAN_LOG).2 \
	  "the fuzzer again under ThreadSanitizer, decay every millisecond, the background thread, no dirty room" \
	  -- $(B)/tests/stress-tsan --jobs=1 --filter 'fuzz/*'
	-@$(TSAN_ENV) EBB_DECAY_MS=1 $(SUITE) tsan-xdecay $(TSAN_LOG).3 \
	  "the cross-thread tests again under ThreadSanitizer, decay every millisecond by the threads themselves" \
	  -- $(B)/tests/stress-tsan --jobs=1 --filter 'xthread/*'
	@cat $(TSAN_LOG).2 $(TSAN_LOG).3 >> $(TSAN_LOG) && rm -f $(TSAN_LOG).2 $(TSAN_LOG).3
	@n=$$(grep -c 'WARNING: ThreadSanitizer' $(TSAN_LOG)); \
	  runs=$$(grep -c 'Synthesis: Tested: [0-9]* | Passing: [0-9]* | Failing: 0 ' $(TSAN_LOG)); \
	  echo "test-tsan: $$n report(s), $$runs of 3 runs without failures (log: $(TSAN_LOG))"; \
	  test "$$n" = 0 -a "$$runs" = 3

# ---------------------------------------------------------------- AddressSanitizer + UBSan
# The unit tests' sources and flags ($(B)/tests/unit in the Makefile), instrumented,
# with the Makefile's compiler (gcc: the unit tests are written against its warnings;
# ASAN_CC=clang works too when they are clang-clean).
ASAN_CC ?= $(CC)
ASAN_RUN_OPTIONS ?= detect_leaks=1:abort_on_error=0:halt_on_error=1
UBSAN_RUN_OPTIONS ?= print_stacktrace=1:halt_on_error=1

$(B)/tests/unit-asan: $(UNIT_SRC) $(LIB_SRC) | $(B)/tests
	$(ASAN_CC) $(TCFLAGS) -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
	  -DEBB_DEBUG=2 -DEBB_NO_OVERRIDE -DEBB_FAKE_OS $(UNIT_SRC) allocator/static.c -o $@ $(TLIBS)

test-asan: $(B)/tests/unit-asan
	@ASAN_OPTIONS="$(ASAN_RUN_OPTIONS)" UBSAN_OPTIONS="$(UBSAN_RUN_OPTIONS)" \
	  $(SUITE) unit-asan $(B)/tests/unit-asan.log "{n} unit tests under AddressSanitizer + UBSan" \
	  -- $(B)/tests/unit-asan $(CRIT) --verbose
	@! grep -qE 'ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:' $(B)/tests/unit-asan.log || \
	  { echo "test-asan: sanitizer report(s), see $(B)/tests/unit-asan.log"; exit 1; }

# The stress tests and the fuzzer under ASan + UBSan with the real OS layer (an
# extra to test-asan: ebb's own blocks are not poisoned, so this catches UB and
# bad accesses to ebb's metadata, globals and stacks, not use-after-free of blocks).
ASAN_STRESS_SCALE ?= 4
$(B)/asan/ebb.o: $(LIB_SRC) | $(B)/asan
	$(ASAN_CC) $(CFLAGS_LIB) -O1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
	  -DEBB_DEBUG=2 -DEBB_NO_OVERRIDE -c allocator/static.c -o $@
$(B)/tests/stress-asan: $(TSAN_SRC) $(TSAN_HDR) $(B)/asan/ebb.o tests/sanitize.mk | $(B)/tests
	$(ASAN_CC) $(TCFLAGS) -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
	  $(TSAN_SRC) $(B)/asan/ebb.o -o $@ $(TLIBS)
$(B)/asan:
	mkdir -p $@

# The fork suite is left out: ASan's own allocator lock can be inherited held by a
# child forked while another thread frees through ASan (libsanitizer, not ebb: the
# child hangs in SizeClassAllocator64::GetFromAllocator; the release and debug
# stress runs and TSan cover fork).
test-asan-stress: $(B)/tests/stress-asan
	@ASAN_OPTIONS="$(ASAN_RUN_OPTIONS)" UBSAN_OPTIONS="$(UBSAN_RUN_OPTIONS)" EBBTEST_SCALE=$(ASAN_STRESS_SCALE) \
	  $(SUITE) stress-asan $(B)/tests/stress-asan.log "the stress tests and the fuzzer under AddressSanitizer + UBSan, a quarter of the work" \
	  -- $(B)/tests/stress-asan --jobs=1 --verbose --filter '!(fork)/*'
	@! grep -qE 'ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:' $(B)/tests/stress-asan.log || \
	  { echo "test-asan-stress: sanitizer report(s), see $(B)/tests/stress-asan.log"; exit 1; }

# ---------------------------------------------------------------- fuzzer, long runs
# `make test` runs the fuzzer at its default size (tests/stress/test_fuzz.c). This
# runs both fuzz tests (4 threads, and 1) for every seed of FUZZ_SEEDS, FUZZ_OPS
# operations each, in five configurations: release, debug,
# decay every millisecond, the background thread, and purging at once with
# MADV_FREE. About 3-4 minutes per seed with the defaults on a 2-core machine; a
# failure stops the run and prints the seed and how to repeat it. The totals are
# in $(B)/tests/fuzz.log.
FUZZ_SEEDS ?= 1 2 3
FUZZ_OPS ?= 1500000
FUZZ_RUN = $(1) --jobs=1 --filter 'fuzz/*' 2>&1 | tee -a $(B)/tests/fuzz.log

fuzz: $(B)/tests/stress $(B)/tests/stress-debug
	rm -f $(B)/tests/fuzz.log
	set -e; export EBBTEST_FUZZ_OPS=$(FUZZ_OPS); for s in $(FUZZ_SEEDS); do \
	  export EBBTEST_FUZZ_SEED=$$s; \
	  $(call FUZZ_RUN,$(B)/tests/stress); \
	  $(call FUZZ_RUN,$(B)/tests/stress-debug); \
	  EBB_DECAY_MS=1 $(call FUZZ_RUN,$(B)/tests/stress); \
	  EBB_BACKGROUND=1 EBB_DECAY_MS=5 $(call FUZZ_RUN,$(B)/tests/stress); \
	  EBB_DECAY_MS=0 EBB_PURGE=free $(call FUZZ_RUN,$(B)/tests/stress); \
	done
	@grep '^fuzz: seed=' $(B)/tests/fuzz.log | awk '{for (i = 1; i <= NF; i++) if ($$i ~ /^ops=/) n += substr($$i, 5)} \
	  END {printf "fuzz: %d runs, %d operations in all\n", NR, n}'
