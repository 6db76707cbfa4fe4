#!/bin/sh
# Regenerates the mock sysfs trees under testdata/topology/ used by
# cpu_topology_test.go. Run from anywhere: sh sysfs/testdata/gen_topology.sh
# Every file holds one value and ends in a newline, like the kernel's.
# Layouts follow platform.md §1 (Intel-style SMT numbering: thread 2 of core c
# is CPU c + number of cores).
set -eu
cd "$(dirname "$0")"
out=topology
rm -rf "$out"

# put FILE VALUE
put() { mkdir -p "$(dirname "$1")"; printf '%s\n' "$2" >"$1"; }

# cache DIR INDEX LEVEL TYPE SHARED
cache() {
	_ci=$1/cache/index$2
	put "$_ci/level" "$3"
	put "$_ci/type" "$4"
	put "$_ci/shared_cpu_list" "$5"
}

# cpu ROOT ID CORE PACKAGE PKGID CLUSTER(-=none)
cpu() {
	_t=$1/devices/system/cpu/cpu$2/topology
	put "$_t/core_cpus_list" "$3"
	put "$_t/thread_siblings_list" "$3"
	put "$_t/package_cpus_list" "$4"
	put "$_t/core_siblings_list" "$4"
	put "$_t/physical_package_id" "$5"
	[ "$6" = - ] || put "$_t/cluster_cpus_list" "$6"
}

# laptop-4c8t: 1 package, 4 cores x 2 SMT threads (siblings 0,4 1,5 2,6 3,7),
# private L1d/L1i/L2 per core, one shared L3 (index3), one NUMA node,
# cpufreq with scaling_cur_freq/scaling_max_freq, no cpu_capacity.
laptop() {
	r=$out/$1
	put "$r/devices/system/cpu/online" "$2"
	put "$r/devices/system/cpu/possible" 0-7
	put "$r/devices/system/cpu/present" 0-7
	for c in 0 1 2 3 4 5 6 7; do
		core=$((c % 4))
		case " $3 " in *" $c "*)
			# offline: the cpuN directory stays, topology/ and cache/ go
			put "$r/devices/system/cpu/cpu$c/online" 0
			continue
			;;
		esac
		sib=$core,$((core + 4))
		cpu "$r" $c "$sib" 0-7 0 "$sib"
		put "$r/devices/system/cpu/cpu$c/online" 1
		d=$r/devices/system/cpu/cpu$c
		cache "$d" 0 1 Data "$sib"
		cache "$d" 1 1 Instruction "$sib"
		cache "$d" 2 2 Unified "$sib"
		cache "$d" 3 3 Unified 0-7
		put "$d/cpufreq/scaling_cur_freq" $((1800000 + c * 100000))
		put "$d/cpufreq/scaling_max_freq" 4200000
		put "$d/cpufreq/cpuinfo_max_freq" 4700000
	done
	put "$r/devices/system/node/online" 0
	put "$r/devices/system/node/node0/cpulist" 0-7
	put "$r/devices/system/node/node0/distance" 10
}
laptop laptop-4c8t 0-7 ""
# laptop-4c8t-cpu3-offline: the same machine with cpu3 offline. The kernel
# also drops cpu3 from its siblings' masks; this tree keeps it (cpu7 says
# core_cpus_list 3,7) to check that readers intersect with online.
laptop laptop-4c8t-cpu3-offline 0-2,4-7 "3"

# server-2s4c2t: 2 packages x 4 cores x 2 threads = 16 CPUs; package p holds
# cores 4p..4p+3 and their siblings +8; one L3 and one NUMA node per package;
# no cluster files (Cluster falls back to Core); cpufreq has only
# cpuinfo_max_freq; cpu_capacity 1024.
r=$out/server-2s4c2t
put "$r/devices/system/cpu/online" 0-15
put "$r/devices/system/cpu/possible" 0-15
put "$r/devices/system/cpu/present" 0-15
for c in $(seq 0 15); do
	core=$((c % 8))
	pkg=$((core / 4))
	sib=$core,$((core + 8))
	if [ $pkg = 0 ]; then pk=0-3,8-11; else pk=4-7,12-15; fi
	cpu "$r" $c "$sib" "$pk" $pkg -
	d=$r/devices/system/cpu/cpu$c
	cache "$d" 0 1 Data "$sib"
	cache "$d" 1 1 Instruction "$sib"
	cache "$d" 2 2 Unified "$sib"
	cache "$d" 3 3 Unified "$pk"
	put "$d/cpu_capacity" 1024
	put "$d/cpufreq/cpuinfo_max_freq" 3000000
done
put "$r/devices/system/node/online" 0-1
put "$r/devices/system/node/node0/cpulist" 0-3,8-11
put "$r/devices/system/node/node0/distance" "10 21"
put "$r/devices/system/node/node1/cpulist" 4-7,12-15
put "$r/devices/system/node/node1/distance" "21 10"

# arm-2c-nocache: 2 CPUs of different capacity (big.LITTLE), no cache, node or
# cpufreq directories, only the deprecated sibling files; LLC falls back to
# Package, the node to all online CPUs.
r=$out/arm-2c-nocache
put "$r/devices/system/cpu/online" 0-1
for c in 0 1; do
	d=$r/devices/system/cpu/cpu$c
	put "$d/topology/thread_siblings_list" $c
	put "$d/topology/core_siblings_list" 0-1
	put "$d/topology/physical_package_id" 0
done
put "$r/devices/system/cpu/cpu0/cpu_capacity" 446
put "$r/devices/system/cpu/cpu1/cpu_capacity" 1024

# Presets of `schedpolicyd plan --topology` (the seed's machines), written
# from their Go descriptions in cmd/schedpolicyd/plan.go (also reachable as
# `schedpolicyd plan --topology P --write-sysfs DIR`) so the two cannot
# drift; TestPresetTrees checks that reading each tree gives the preset back.
# big-4096 (4096 CPUs, ~45k files) is not committed: the test generates it
# into a temporary directory.
(cd ../.. && go test ./cmd/schedpolicyd -run '^TestPresetTrees$' -count=1 -args -update-presets)
