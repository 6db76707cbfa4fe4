# schedpolicyd — build, run and test.
#   sudo make run        build and run the daemon on this machine
#                        (flags in ARGS="...", see schedpolicyd --help)
#   sudo make test       install test dependencies if missing, run every test
#                        (Go tests, the Debian package checks, the RPM and
#                        Arch packages beside it, then the package under a
#                        real systemd: container and VM)
#   make deb             build bin/schedpolicyd_VERSION_ARCH.deb
#   sudo make deb-test   build, check the contents, lintian
#   make rpm             build bin/schedpolicyd-VERSION-1.ARCH.rpm (rpmbuild)
#   make pkg-test        build the .deb, the RPM and the Arch pkgdir, check they
#                        install the same files; rpmlint
#   sudo make systemd-test  install and use the package under systemd 252 as
#                        PID 1: an nspawn container (cgroup v1) and a QEMU VM
#                        (cgroup v2); never on this machine

GO      ?= go
BIN     := bin/schedpolicyd
CTL     := bin/schedpolicyctl
PKGS    := ./...
export PATH := $(PATH):/usr/local/go/bin

.PHONY: all build run test unit-test deb deb-test rpm pkg-test systemd-test deps pkg-deps vet fmt clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -o $(BIN) ./cmd/schedpolicyd
	CGO_ENABLED=0 $(GO) build -o $(CTL) ./cmd/schedpolicyctl

# Pass flags with ARGS, e.g. make run ARGS="--bus unix:path=/tmp/spd-bus".
run: build
	./$(BIN) $(ARGS)

# Debian packages the tests use, installed only when missing:
# dbus-daemon and dbus-send (dbus), busctl and systemd-analyze (systemd),
# gdbus (libglib2.0-bin), powerprofilesctl (power-profiles-daemon),
# setpriv (util-linux), strace (the privilege test records every path the
# daemon writes), lintian, man (man-db) and groff for the package checks,
# dpkg-deb (dpkg) to build the package, rpmbuild (rpm) and rpmlint for
# the RPM, and the real upowerd under umockdev
# for the UPower source test (upower, umockdev, gir1.2-umockdev-1.0,
# python3-gi), and the real polkitd for the authorisation test (polkitd);
# for systemd-test systemd-nspawn (systemd-container), debootstrap, QEMU
# (qemu-system-x86) and mkfs.ext4 (e2fsprogs); tmux for the terminal test
# of schedpolicyctl top, rsvg-convert (librsvg2-bin) to render plan's SVG;
# promtool (prometheus) checks the node_exporter textfile the daemon writes
# (Debian ships promtool only in the server's package, whose postinst
# enables prometheus.service where systemd runs; `systemctl disable --now
# prometheus` if it is not wanted).
deps:
	@missing=""; \
	command -v dbus-daemon >/dev/null      || missing="$$missing dbus"; \
	command -v busctl >/dev/null           || missing="$$missing systemd"; \
	command -v systemd-analyze >/dev/null  || missing="$$missing systemd"; \
	command -v gdbus >/dev/null            || missing="$$missing libglib2.0-bin"; \
	command -v powerprofilesctl >/dev/null || missing="$$missing power-profiles-daemon"; \
	command -v setpriv >/dev/null          || missing="$$missing util-linux"; \
	command -v lintian >/dev/null          || missing="$$missing lintian"; \
	command -v man >/dev/null              || missing="$$missing man-db"; \
	command -v dpkg-deb >/dev/null         || missing="$$missing dpkg"; \
	command -v rpmbuild >/dev/null         || missing="$$missing rpm"; \
	command -v rpmlint >/dev/null          || missing="$$missing rpmlint"; \
	command -v cpio >/dev/null             || missing="$$missing cpio"; \
	command -v bash >/dev/null             || missing="$$missing bash"; \
	command -v strace >/dev/null           || missing="$$missing strace"; \
	command -v groff >/dev/null            || missing="$$missing groff-base"; \
	command -v chattr >/dev/null           || missing="$$missing e2fsprogs"; \
	command -v mkfs.ext4 >/dev/null        || missing="$$missing e2fsprogs"; \
	command -v systemd-nspawn >/dev/null   || missing="$$missing systemd-container"; \
	command -v debootstrap >/dev/null      || missing="$$missing debootstrap"; \
	command -v qemu-system-x86_64 >/dev/null || missing="$$missing qemu-system-x86"; \
	command -v tmux >/dev/null             || missing="$$missing tmux"; \
	command -v rsvg-convert >/dev/null     || missing="$$missing librsvg2-bin"; \
	command -v promtool >/dev/null         || missing="$$missing prometheus"; \
	for p in upower umockdev gir1.2-umockdev-1.0 python3-gi polkitd; do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	$(GO) mod download

# What building and linting the packages needs (make deb-test, make
# pkg-test), and nothing of the test list above: dpkg-deb (dpkg), lintian,
# man-db (man -w), systemd-analyze (systemd), rpmbuild (rpm), rpmlint,
# cpio and bash. `make deps` installs these too.
pkg-deps:
	@missing=""; \
	command -v dpkg-deb >/dev/null         || missing="$$missing dpkg"; \
	command -v lintian >/dev/null          || missing="$$missing lintian"; \
	command -v man >/dev/null              || missing="$$missing man-db"; \
	command -v systemd-analyze >/dev/null  || missing="$$missing systemd"; \
	command -v rpmbuild >/dev/null         || missing="$$missing rpm"; \
	command -v rpmlint >/dev/null          || missing="$$missing rpmlint"; \
	command -v cpio >/dev/null             || missing="$$missing cpio"; \
	command -v bash >/dev/null             || missing="$$missing bash"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	$(GO) mod download

# The whole suite: what CI (.ci/run) and the README run.
test: deps unit-test deb-test pkg-test systemd-test

# Tests that take a real CPU offline trim every v1 cpuset on the machine,
# so they run alone afterwards (testutil.NeedRealHotplug), one package at
# a time.
HOTPLUG_TESTS := RealHotplug|FaultModel
#
# -timeout: a package's bound on a busy machine (go test's default of 10
# minutes is near what the daemon's and the fault model's packages take
# on a loaded 2-core machine); a hang still ends in a goroutine dump.
unit-test: deps
	$(GO) test -race -count=1 -timeout 25m $(PKGS)
	SCHEDPOLICYD_TEST_HOTPLUG=1 $(GO) test -race -count=1 -timeout 25m -p 1 -run '$(HOTPLUG_TESTS)' ./daemon/placement/cgroupfs/ ./cmd/schedpolicyd/

# The Go tests on a loaded machine, as CI's may be: LOAD_PER_CPU (default
# 2) CPU-bound busy loops per online CPU run beside LOADED_RUNS (default 3)
# runs of `go test -race -count=1 $(LOADED_FLAGS) $(LOADED_PKGS)`, which
# stop at the first failure; each run's exit status and duration are
# printed. The busy loops end with the target, however it ends. Not part
# of make test. E.g. make test-loaded LOADED_PKGS=./daemon/
# LOADED_FLAGS="-run 'TaskClock|Repack|Wake|Saturat|React|Burst|Pressure'"
LOADED_RUNS  ?= 3
LOAD_PER_CPU ?= 2
LOADED_PKGS  ?= $(PKGS)
LOADED_FLAGS ?= -timeout 40m
.PHONY: test-loaded
test-loaded: deps
	@n=$$(( $$(getconf _NPROCESSORS_ONLN) * $(LOAD_PER_CPU) )); pids=""; \
	trap 'kill $$pids 2>/dev/null' EXIT; trap 'exit 130' INT TERM; \
	i=0; while [ $$i -lt $$n ]; do sh -c 'while :; do :; done' & pids="$$pids $$!"; i=$$((i+1)); done; \
	echo "test-loaded: $$n busy loops on $$(getconf _NPROCESSORS_ONLN) CPUs"; \
	run=1; while [ $$run -le $(LOADED_RUNS) ]; do \
		start=$$(date +%s); \
		$(GO) test -race -count=1 $(LOADED_FLAGS) $(LOADED_PKGS); rc=$$?; \
		echo "test-loaded: run $$run of $(LOADED_RUNS): exit $$rc after $$(( $$(date +%s) - start ))s (load average $$(cut -d' ' -f1-3 /proc/loadavg))"; \
		[ $$rc -eq 0 ] || exit $$rc; run=$$((run+1)); \
	done; echo "test-loaded: $(LOADED_RUNS) runs passed under load"

# The Debian package: packaging/build-deb.sh (dpkg-deb, no debhelper).
deb:
	packaging/build-deb.sh bin

# The RPM (Fedora): packaging/build-rpm.sh (rpmbuild -bb in a temporary
# topdir, offline with Go's module cache), output in bin/.
rpm:
	packaging/build-rpm.sh bin

# Build it, check what it holds, run lintian. Installing it happens in
# systemd-test's container, never on this machine.
deb-test: pkg-deps
	packaging/deb-test.sh

# The RPM (packaging/rpm) and the Arch PKGBUILD (packaging/arch) beside the
# .deb: built (the PKGBUILD's build() and package() without makepkg),
# compared file by file, mode and content, after the documented path
# mappings; the RPM's %config and scriptlets; rpmlint. Installs nothing.
pkg-test: pkg-deps
	packaging/pkg-test.sh

# The package under a real systemd (packaging/systemd-test/run.sh): Debian
# 12 with systemd 252 as PID 1 in systemd-nspawn (cgroup v1), then in a
# QEMU VM with cgroup v2. Root filesystems are cached in
# /var/cache/schedpolicyd-test; needs root. SCHEDPOLICYD_SYSTEMD_TEST="container"
# (or "vm") runs one part; SCHEDPOLICYD_TEST_MATCH=REGEX only the testcases
# whose name matches, e.g. SCHEDPOLICYD_TEST_MATCH=battery make systemd-test
# (packaging/systemd-test/README.md, "Testcases, assertions and the filter").
systemd-test: deps
	packaging/systemd-test/run.sh

vet:
	gofmt -l . | tee /dev/stderr | (! read)
	$(GO) vet $(PKGS)

clean:
	rm -rf bin

# Balancer benchmarks (policy.BenchmarkPlan: CPUs × workloads, ns/op and
# allocs/op), written as a markdown table into docs/BENCHMARKS.md between
# the BENCH markers. Never asserted in tests.
.PHONY: bench
bench:
	@mkdir -p docs
	$(GO) test -run '^$$' -bench 'Plan|BuildTopology' -benchmem -count=1 ./policy | tee bin-bench.txt
	@{ echo "<!-- BENCH:BEGIN (generated by make bench) -->"; \
	  echo; \
	  echo "Measured $$(date -u +%Y-%m-%d) on $$(nproc) CPUs ($$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//;s/ *$$//')), $$($(GO) version | cut -d' ' -f3-4)."; \
	  echo; \
	  echo "| benchmark | CPUs | workloads | ns/op | ms/op | B/op | allocs/op |"; \
	  echo "|---|---:|---:|---:|---:|---:|---:|"; \
	  awk '/^Benchmark/ { name=$$1; sub(/-[0-9]+$$/, "", name); c="-"; w="-"; \
	    if (match(name, /cpus=[0-9]+/)) c=substr(name, RSTART+5, RLENGTH-5); \
	    if (match(name, /workloads=[0-9]+/)) w=substr(name, RSTART+10, RLENGTH-10); \
	    printf "| %s | %s | %s | %s | %.3f | %s | %s |\n", name, c, w, $$3, $$3/1e6, $$5, $$7 }' bin-bench.txt; \
	  echo; \
	  echo "<!-- BENCH:END -->"; } > bin-bench.md
	@if [ -f docs/BENCHMARKS.md ] && grep -q '<!-- BENCH:BEGIN' docs/BENCHMARKS.md; then \
	  awk 'FNR==NR { t = t $$0 "\n"; next } /<!-- BENCH:BEGIN/ { printf "%s", t; skip=1; next } /<!-- BENCH:END/ { skip=0; next } !skip' bin-bench.md docs/BENCHMARKS.md > docs/BENCHMARKS.md.new && mv docs/BENCHMARKS.md.new docs/BENCHMARKS.md; \
	else cat bin-bench.md >> docs/BENCHMARKS.md; fi
	@rm -f bin-bench.txt bin-bench.md
	@echo "wrote docs/BENCHMARKS.md"

# Resident-daemon benchmarks (issue 7): our real binary and
# power-profiles-daemon on private buses, side by side; needs root. Prints a
# markdown table and writes it into docs/BENCHMARKS.md between the
# DAEMON-BENCH markers. Pass flags with BENCH_FLAGS, e.g.
# BENCH_FLAGS="-idle 10s -idle-runs 1 -react-trials 3" while developing. Never run by test.
.PHONY: bench-daemon
bench-daemon: build
	$(GO) build -o bin/schedpolicyd-bench ./cmd/schedpolicyd-bench
	./bin/schedpolicyd-bench -bin $(BIN) $(BENCH_FLAGS)

# Issue 6 load and fuzzing, neither part of `make test`.
#   make soak                 bounded load run (SOAK_DURATION, default 60s)
#                             against a mock machine; prints events handled,
#                             decisions, cpuset writes, errors, peak RSS and
#                             goroutines at start and end
#   make fault                the model-based fault test (issue 11) long:
#                             FAULT_CHECKS sequences of about FAULT_STEPS
#                             random steps (default 60 × 40, ≥ 2,000 steps,
#                             ~15 min) on a real v1 cpuset parent, with the
#                             real CPU hotplug; prints sequences and steps
#   make fuzz                 every fuzz target for FUZZTIME (default 60s)
#                             each; new failing inputs land in the package's
#                             testdata/fuzz/<target>/ (commit them as seeds)
SOAK_DURATION ?= 60s
FUZZTIME      ?= 60s
FAULT_CHECKS  ?= 60
FAULT_STEPS   ?= 40
FUZZ_TARGETS  := \
	./sysfs:FuzzParseCPUList \
	./acpi:FuzzParseUevent \
	./acpi:FuzzParseAcpidEvent \
	./acpi:FuzzPowerSupplyAttrs \
	./policy:FuzzScanToken \
	./sysfs:FuzzParseCPUPressure \
	./sysfs:FuzzClassifyCPUs \
	./daemon:FuzzValidWorkloadName \
	./daemon/snapshot:FuzzEscape \
	./daemon/energy:FuzzEnergyReadings \
	./cmd/schedpolicyd:FuzzParseConfig

.PHONY: soak fuzz fault
soak: build
	./$(BIN) soak --duration $(SOAK_DURATION)

fault:
	@mkdir -p bin; SCHEDPOLICYD_TEST_HOTPLUG=1 $(GO) test -count=1 -timeout 120m -run '^TestFaultModel$$' -v ./cmd/schedpolicyd/ \
		-rapid.checks=$(FAULT_CHECKS) -rapid.steps=$(FAULT_STEPS) > bin/fault.log 2>&1; rc=$$?; \
	grep -E '^(---|ok|FAIL|PASS)|fault model:|faultmodel_test.go:[0-9]+: [^f]' bin/fault.log | grep -v 'level='; \
	echo "full log: bin/fault.log"; exit $$rc

# Go 1.26's fuzz coordinator can fail a target with a bare "context
# deadline exceeded" at the end of -fuzztime without any failing input
# (golang/go#75804, fixed in Go 1.27): a run counts as failed only when it
# wrote a new input to testdata/fuzz/<target>/.
fuzz:
	@failed=""; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t#*:}; dir=$$pkg/testdata/fuzz/$$name; \
		before=$$(ls $$dir 2>/dev/null | wc -l); \
		echo "== $$name ($$pkg, $(FUZZTIME))"; \
		if ! $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg; then \
			if [ "$$(ls $$dir 2>/dev/null | wc -l)" != "$$before" ]; then failed="$$failed $$name"; \
			else echo "== $$name: no failing input written; Go's fuzz deadline race (golang/go#75804), not a finding"; fi; \
		fi; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: failing inputs found by:$$failed (see testdata/fuzz/)"; exit 1; fi; \
	echo "fuzz: no failing input found"
