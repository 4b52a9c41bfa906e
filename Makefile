# SPDX-License-Identifier: MIT
# weft: the make targets a C user expects, wrapping CMake.
#
#   make             release build of the library, tests, benchmarks and
#                    examples, in build/release
#   make test        release build with the runtime asserts and the fault
#                    injection sites on (WEFT_ASSERTS=ON, WEFT_FAULTS=ON),
#                    then the whole test suite (ctest)
#   make test-noasserts  the same suite against the release library as
#                    users build it, its asserts and fault sites compiled
#                    out
#   make bench       builds and runs the benchmarks (bench/run, in
#                    build/bench); BENCH="switch spawn" picks some
#   make demo        builds and runs examples/demo
#   make install     installs into $(PREFIX) (default /usr/local): weft.h,
#                    libweft.a, libweft.so, weft.pc, the CMake package
#   make asan        ASan+UBSan build of the tests in build/asan, runs them
#   make tsan        TSan build of the tests in build/tsan, runs them
#   make tsan-churn  test_churn under TSan built at -O0 with the ucontext
#                    switch (build/tsan-churn): the builds whose frames
#                    under a task's last switch differ from make tsan's
#   make swarm       the swarm sweep (tools/swarm_torture.c, build/swarm:
#                    Release with the asserts and fault sites on):
#                    SWARM_SEEDS seeds of the torture body and half as
#                    many of the net body (real sockets, signals, the
#                    pool), each under its own fault profile, the
#                    determinism check on every 20th, and every fault
#                    site fired
#   make layers      checks the layering of src/: includes, and the calls
#                    of the library's objects (scripts/layers.sh --build,
#                    in build/layers)
#   make structure   measures src/: function lengths, the private-header
#                    lines a file pulls in, waits assembled by hand
#   make api-names   checks that every public name follows
#                    docs/api-conventions.md (scripts/api-names.sh, then
#                    its --self-test)
#   make format      clang-format -i on src include test bench examples
#   make clean       removes build/
#
# Variables (make VAR=value ...):
#   PREFIX=/usr/local   install prefix; the installed tree may be moved
#                       (weft.pc and the CMake package are relocatable)
#   JOBS=2              parallel build jobs and ctest jobs
#   WEFT_WERROR=OFF     ON turns warnings into errors (CI does)
#   WEFT_LIBDW=ON       task dumps name lines through elfutils' libdw
#                       (scripts/deps.sh installs it), so the tests of
#                       those lines run; AUTO or OFF to build without
#   WEFT_ASSERTS=AUTO   the library's runtime asserts: AUTO is on in Debug
#                       builds (asan, tsan) only; make test sets ON, so
#                       the build it leaves in build/release has them:
#                       make release, demo or install builds again
#                       without
#   WEFT_FAULTS=AUTO    the fault injection sites (weft.h, section 15):
#                       as WEFT_ASSERTS, on in Debug builds; make test
#                       sets ON, make test-noasserts OFF
#   WEFT_LTO_PROGRAMS=ONCE  how the tests, examples and benchmarks link
#                       the library: ONCE links them all with one object
#                       of the whole library, LTO-optimised once (a link
#                       of a tenth of a second instead of ~5-10 s); ON optimises
#                       the library again with each program, as bench/run
#                       builds; OFF links the machine code libweft.a
#                       carries for programs linked without LTO, as make
#                       test does
#   WEFT_BENCH=ON       build the benchmarks in build/release too: make
#                       test-noasserts sets OFF (no test runs them, and
#                       make test has compiled them)
#   SWARM_SEEDS=1000    seeds of make swarm (100000 for a long sweep)
#   SAN_SCALE=10        WEFT_TEST_SCALE (percent) for sanitizer test runs
#   SAN_CC=             C compiler for asan/tsan builds (e.g. clang);
#                       empty: CMake's default (gcc on Debian); with
#                       SAN_CC the build dir is build/tsan-clang etc.
#   CMAKE_ARGS=         extra CMake options, e.g. -DWEFT_CONTEXT=ucontext
#   DESTDIR=            make install: stage the files under $(DESTDIR)$(PREFIX)
#   WEFT_NO_DEPS=       1: never install packages (see below); only report
#                       what is missing and stop
#
# Every target first runs scripts/deps.sh, which checks for cmake, make and
# a C compiler (clang-format for format, clang with SAN_CC=clang) and, if
# one is missing, says which packages it will install and why, then
# installs them with apt-get (through sudo when not root). With
# WEFT_NO_DEPS=1 it installs nothing: it lists what is missing and the
# target fails.

PREFIX ?= /usr/local
JOBS ?= 2
WEFT_WERROR ?= OFF
WEFT_LIBDW ?= ON
WEFT_ASSERTS ?= AUTO
WEFT_FAULTS ?= AUTO
WEFT_LTO_PROGRAMS ?= ONCE
WEFT_BENCH ?= ON
SAN_SCALE ?= 10
SWARM_SEEDS ?= 1000
SAN_CC ?=
CMAKE_ARGS ?=
BENCH ?=
ASAN_OPTIONS ?= halt_on_error=1:detect_leaks=1
UBSAN_OPTIONS ?= halt_on_error=1:print_stacktrace=1
TSAN_OPTIONS ?= halt_on_error=1:second_deadlock_stack=1

# cmake --build runs make again: keep its "Entering directory" noise out.
MAKEFLAGS += --no-print-directory

B := build
REL := $(B)/release
# Sanitizer build dirs: build/asan, build/tsan; build/tsan-clang etc. with
# SAN_CC, since CMake cannot change the compiler of an existing build dir.
SAN_SUFFIX := $(if $(SAN_CC),-$(notdir $(SAN_CC)))
ASAN_DIR := $(B)/asan$(SAN_SUFFIX)
TSAN_DIR := $(B)/tsan$(SAN_SUFFIX)
TSAN_CHURN_DIR := $(B)/tsan-churn$(SAN_SUFFIX)
SWARM_DIR := $(B)/swarm
# $(call cmake_configure,DIR,OPTIONS): configures DIR quietly (the log is kept in
# DIR/configure.log and shown if CMake fails).
cmake_configure = @mkdir -p $(1) && echo "configuring $(1)" && \
	cmake -S . -B $(1) $(2) >$(1)/configure.log 2>&1 || \
	{ cat $(1)/configure.log; exit 1; }
COMMON = -DWEFT_WERROR=$(WEFT_WERROR) -DWEFT_LIBDW=$(WEFT_LIBDW) \
	-DWEFT_ASSERTS=$(WEFT_ASSERTS) -DWEFT_FAULTS=$(WEFT_FAULTS) \
	-DWEFT_LTO_PROGRAMS=$(WEFT_LTO_PROGRAMS) $(CMAKE_ARGS)
# The release tree's own options (the sanitizer trees build no benchmarks).
REL_OPTS = -DWEFT_BENCH=$(WEFT_BENCH)
SAN_COMMON := -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS=-O1 \
	-DWEFT_BENCH=OFF -DWEFT_EXAMPLES=OFF \
	$(if $(SAN_CC),-DCMAKE_C_COMPILER=$(SAN_CC) -DCMAKE_ASM_COMPILER=$(SAN_CC))
CTEST := ctest -j$(JOBS) --output-on-failure --no-tests=error
FORMAT_DIRS := src include test tools bench examples

.PHONY: all release configure test test-noasserts bench demo install asan tsan tsan-churn \
	swarm layers structure api-names format clean deps san-deps help

all: release

help:
	@sed -n '3,/^$$/s/^# \{0,1\}//p' Makefile

deps:
	@scripts/deps.sh build curl pg nats

# Configuring again is cheap and keeps the options (PREFIX, WEFT_WERROR)
# in step with this command line.
configure: deps
	$(call cmake_configure,$(REL),-DCMAKE_BUILD_TYPE=Release \
		-DCMAKE_INSTALL_PREFIX=$(PREFIX) $(REL_OPTS) $(COMMON))

release: configure
	cmake --build $(REL) -j$(JOBS)

# The tests run against the library with its asserts on (a target-specific
# value: release and configure, run for test, see it too), linked without
# LTO: a build of minutes instead of ten.
test: WEFT_ASSERTS = ON
test: WEFT_FAULTS = ON
test: WEFT_LTO_PROGRAMS = OFF
test: release
	cd $(REL) && $(CTEST)

# The suite again with the asserts compiled out and the library's LTO, as
# a Release build ships (without the benchmarks, which no test runs; the
# programs link the library's LTO code, optimised once: ONCE above):
# code that only an assert's side effect kept right fails here, and the
# tests' own halves for builds without asserts run.
test-noasserts: WEFT_ASSERTS = OFF
test-noasserts: WEFT_FAULTS = OFF
test-noasserts: WEFT_BENCH = OFF
test-noasserts: release
	cd $(REL) && $(CTEST)

# bench/run builds its own Release tree in build/bench (no tests).
bench: deps
	bench/run $(BENCH)

demo: configure
	@cmake --build $(REL) -j$(JOBS) --target demo
	@echo "--- running examples/demo ---"
	@$(REL)/demo

install: release
	cmake --install $(REL) --prefix $(PREFIX)

# With SAN_CC=clang, clang and its sanitizer runtimes are installed too.
san-deps:
	@scripts/deps.sh build curl pg nats $(if $(findstring clang,$(SAN_CC)),clang)

asan: san-deps
	$(call cmake_configure,$(ASAN_DIR),-DWEFT_SANITIZE=address $(SAN_COMMON) \
		$(COMMON))
	cmake --build $(ASAN_DIR) -j$(JOBS)
	cd $(ASAN_DIR) && WEFT_TEST_SCALE=$(SAN_SCALE) \
		ASAN_OPTIONS=$(ASAN_OPTIONS) UBSAN_OPTIONS=$(UBSAN_OPTIONS) \
		$(CTEST)

tsan: san-deps
	$(call cmake_configure,$(TSAN_DIR),-DWEFT_SANITIZE=thread $(SAN_COMMON) \
		$(COMMON))
	cmake --build $(TSAN_DIR) -j$(JOBS)
	cd $(TSAN_DIR) && WEFT_TEST_SCALE=$(SAN_SCALE) \
		TSAN_OPTIONS=$(TSAN_OPTIONS) $(CTEST)

# A task's last switch never returns, and under TSan no frame of it may
# stay on its slot's fiber, or the fiber's shadow stack overruns after
# 65,536 tasks. Unoptimised code and the ucontext switch put other frames
# there than make tsan's build does: test_churn runs in such a build too.
tsan-churn: san-deps
	$(call cmake_configure,$(TSAN_CHURN_DIR),-DWEFT_SANITIZE=thread \
		$(subst -O1,-O0,$(SAN_COMMON)) -DWEFT_CONTEXT=ucontext $(COMMON))
	cmake --build $(TSAN_CHURN_DIR) -j$(JOBS) --target test_churn
	cd $(TSAN_CHURN_DIR) && WEFT_TEST_SCALE=$(SAN_SCALE) \
		TSAN_OPTIONS=$(TSAN_OPTIONS) $(CTEST) -R '^test_churn\.'

# The sweep's seeds run one after the other, each a runtime on one seeded
# worker with the virtual clock: a build of its own, so that the fault
# sites are on whatever make test-noasserts left in build/release.
swarm: WEFT_ASSERTS = ON
swarm: WEFT_FAULTS = ON
swarm: deps
	$(call cmake_configure,$(SWARM_DIR),-DCMAKE_BUILD_TYPE=Release \
		-DWEFT_BENCH=OFF -DWEFT_EXAMPLES=OFF $(COMMON))
	cmake --build $(SWARM_DIR) -j$(JOBS) --target swarm_torture
	$(SWARM_DIR)/swarm_torture --seeds $(SWARM_SEEDS) --check-every 20

layers: deps
	JOBS=$(JOBS) scripts/layers.sh --build

structure:
	scripts/structure.py -v

api-names:
	scripts/api-names.sh
	scripts/api-names.sh --self-test

format:
	@scripts/deps.sh format
	find $(FORMAT_DIRS) -name '*.[ch]' -print0 2>/dev/null | \
		xargs -0 -r clang-format -i

clean:
	rm -rf $(B)
