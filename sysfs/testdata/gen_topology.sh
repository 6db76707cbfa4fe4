#!/bin/sh
# Regenerates the mock sysfs trees under testdata/topology/ used by
# cpu_topology_test.go. Run from anywhere: sh sysfs/testdata/gen_topology.sh
# Every file holds one value and ends in a newline, like the kernel's.
# Layouts follow the kernel's Documentation/admin-guide/cputopology.rst and
# Documentation/ABI/stable/sysfs-devices-system-cpu (Intel-style SMT
# numbering: thread 2 of core c is CPU c + number of cores).
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

# Hybrid machines (issue 25): P-cores and E-cores, big.LITTLE. Values are
# transcribed from public dumps of real machines; each tree's README names
# its source and marks what was derived rather than observed (x86
# cpu_capacity: a kernel >= 6.16 shows 1024 with SMT, and on hybrids without
# SMT HWP highest perf x 1024 / the largest, intel_pstate.rst; the arm64
# capacities marked derived follow arch_topology's capacity-dmips-mhz x
# max frequency). docs/HYBRID-PLACEMENT.md lists the hybrid trees and
# their sources together.

# hcpu ROOT ID SIBLINGS L2 L3(-=none) CAPACITY(-) MAXKHZ(-) BASEKHZ(-) HIGHEST_PERF(-)
# One package, package_cpus_list = every online CPU.
hcpu() {
	_d=$1/devices/system/cpu/cpu$2
	_all=$(cat "$1/devices/system/cpu/online")
	put "$_d/topology/core_cpus_list" "$3"
	put "$_d/topology/thread_siblings_list" "$3"
	put "$_d/topology/cluster_cpus_list" "$4"
	put "$_d/topology/package_cpus_list" "$_all"
	put "$_d/topology/core_siblings_list" "$_all"
	put "$_d/topology/physical_package_id" 0
	cache "$_d" 0 1 Data "$3"
	cache "$_d" 1 1 Instruction "$3"
	cache "$_d" 2 2 Unified "$4"
	[ "$5" = - ] || cache "$_d" 3 3 Unified "$5"
	[ "$6" = - ] || put "$_d/cpu_capacity" "$6"
	[ "$7" = - ] || put "$_d/cpufreq/cpuinfo_max_freq" "$7"
	[ "$7" = - ] || put "$_d/cpufreq/scaling_max_freq" "$7"
	[ "$8" = - ] || put "$_d/cpufreq/base_frequency" "$8"
	[ "$9" = - ] || put "$_d/acpi_cppc/highest_perf" "$9"
}

# machine NAME ONLINE: starts a tree with one NUMA node.
machine() {
	r=$out/$1
	put "$r/devices/system/cpu/online" "$2"
	put "$r/devices/system/cpu/possible" "$2"
	put "$r/devices/system/cpu/present" "$2"
	put "$r/devices/system/node/online" 0
	put "$r/devices/system/node/node0/cpulist" "$2"
	put "$r/devices/system/node/node0/distance" 10
}

# adl-p-i7-1260p: Alder Lake-P, 4 P-cores with SMT (siblings adjacent:
# 0-1 ... 6-7, private L2) and 8 E-cores in two 4-core L2 modules (8-11,
# 12-15), one L3 0-15. pepc tests/emul-data/adl0 (sys/inlinefiles.txt:
# cache shared_cpu_list, cpu_core/cpus 0-7, cpu_atom/cpus 8-15; highest_perf
# 60 / 34; cpuinfo_max_freq 4700000 / 3400000). base_frequency 2100000 /
# 1500000 from Intel's i7-1260P specification. cpu_capacity 1024 as a
# kernel >= 6.16 shows it with SMT (derived: intel_pstate.rst).
machine adl-p-i7-1260p 0-15
for c in 0 1 2 3 4 5 6 7; do
	s=$((c / 2 * 2))-$((c / 2 * 2 + 1))
	hcpu "$r" $c $s $s 0-15 1024 4700000 2100000 60
done
for c in 8 9 10 11 12 13 14 15; do
	m=$((c / 4 * 4))-$((c / 4 * 4 + 3))
	hcpu "$r" $c $c $m 0-15 1024 3400000 1500000 34
done
put "$r/devices/cpu_core/cpus" 0-7
put "$r/devices/cpu_atom/cpus" 8-15
put "$r/devices/system/cpu/intel_pstate/status" active
put "$r/README" "i7-1260P (Alder Lake-P). Source: github.com/intel/pepc tests/emul-data/adl0 (sys/inlinefiles.txt, proc/cpuinfo). base_frequency from Intel's specification. Derived: cpu_capacity 1024 (kernel >= 6.16 with SMT, intel_pstate.rst)."

# mtl-u-ultra7-164u: Meteor Lake-U, 2 P-cores with SMT (0-1, 2-3), 8
# E-cores (modules 4-7, 8-11) sharing the L3 0-11 with the P-cores, and 2
# LP E-cores on the SoC tile (12-13, shared L2, no L3). pepc
# tests/emul-data/mtl-m-2: cpu_core 0-3, cpu_atom 4-13, cpuinfo_max_freq
# 4800000 / 3800000 / 2100000, highest_perf 60 / 38 / 21. No cpu_capacity
# (kernel < 6.16).
machine mtl-u-ultra7-164u 0-13
for c in 0 1 2 3; do
	s=$((c / 2 * 2))-$((c / 2 * 2 + 1))
	hcpu "$r" $c $s $s 0-11 - 4800000 - 60
done
for c in 4 5 6 7 8 9 10 11; do
	m=$((c / 4 * 4))-$((c / 4 * 4 + 3))
	hcpu "$r" $c $c $m 0-11 - 3800000 - 38
done
for c in 12 13; do hcpu "$r" $c $c 12-13 - - 2100000 - 21; done
put "$r/devices/cpu_core/cpus" 0-3
put "$r/devices/cpu_atom/cpus" 4-13
put "$r/devices/system/cpu/intel_pstate/status" active
put "$r/README" "Core Ultra 7 164U (Meteor Lake-U). Source: github.com/intel/pepc tests/emul-data/mtl-m-2 (sys/inlinefiles.txt). No cpu_capacity (kernel < 6.16)."

# lnl-ultra5-226v: Lunar Lake, 4 P-cores without SMT (private L2, L3
# 0-3) and 4 E-cores without L3 (shared L2 4-7): LPE by the rule, as
# intel-lpmd counts it (4P0E4L). pepc tests/emul-data/lnl0: cpu_core 0-3,
# cpu_atom 4-7, cpuinfo_max_freq 4500000 / 3500000, highest_perf 52 / 35.
# cpu_capacity derived as a kernel >= 6.16 computes it: 1024, 689.
machine lnl-ultra5-226v 0-7
for c in 0 1 2 3; do hcpu "$r" $c $c $c 0-3 1024 4500000 - 52; done
for c in 4 5 6 7; do hcpu "$r" $c $c 4-7 - 689 3500000 - 35; done
put "$r/devices/cpu_core/cpus" 0-3
put "$r/devices/cpu_atom/cpus" 4-7
put "$r/devices/system/cpu/intel_pstate/status" active
# The energy model intel_pstate registers on a hybrid part without SMT
# (Linux 6.16+, drivers/cpufreq/intel_pstate.c hybrid_register_perf_domain,
# with the 6.19 rules of "cpufreq: intel_pstate: hybrid: Adjust energy
# model rules"): one artificial domain per CPU (flags
# EM_PERF_DOMAIN_ARTIFICIAL, 0x4), four states numbered 2..5 for 40, 60,
# 80 and 100 % of the CPU's capacity (hybrid_active_power: "frequency" 2,
# then 3, 4, 5), power EM_MAX_POWER (64000000), cost = the state's number
# + 2 for a P-core, + 1 for an Atom core with L3 (E), + 0 for an Atom core
# without L3 (LPE, as the LNL E-cores are), performance = capacity x n / 5.
for c in 0 1 2 3 4 5 6 7; do
	if [ $c -lt 4 ]; then cap=1024 add=2; else cap=689 add=0; fi
	pd=$r/kernel/debug/energy_model/cpu$c
	put "$pd/cpus" $c
	put "$pd/flags" 0x4
	for n in 2 3 4 5; do
		put "$pd/ps:$n/frequency" $n
		put "$pd/ps:$n/power" 64000000
		put "$pd/ps:$n/performance" $((cap * n / 5))
		put "$pd/ps:$n/cost" $((n + add))
		put "$pd/ps:$n/inefficient" 0
	done
done
put "$r/README" "Core Ultra 5 226V (Lunar Lake). Source: github.com/intel/pepc tests/emul-data/lnl0. Derived: cpu_capacity 1024/689 = HWP highest perf x 1024 / 52 (kernel >= 6.16, intel_pstate.rst); not observed. Derived: the debugfs energy_model intel_pstate registers on a hybrid part without SMT, by the 6.19 rules (drivers/cpufreq/intel_pstate.c hybrid_active_power/hybrid_get_cost: per-CPU artificial domains, states 2-5 = 40-100 % of capacity, cost = state + 2 P / + 1 E with L3 / + 0 LPE, power EM_MAX_POWER); not observed."

# arl-h-es: Arrow Lake-H engineering sample (model 197), 4 P-cores without
# SMT, 8 E-cores (modules 4-7, 8-11), 2 LP E-cores 12-13 with their own
# PMU cpu_lowpower (two Atom microarchitectures). pepc
# tests/emul-data/arl-h-1: cpuinfo_max_freq 4500000 / 3900000 / 2500000,
# highest_perf 72 / 55 / 25. cpu_capacity derived: 1024, 782, 355.
machine arl-h-es 0-13
for c in 0 1 2 3; do hcpu "$r" $c $c $c 0-11 1024 4500000 - 72; done
for c in 4 5 6 7 8 9 10 11; do
	m=$((c / 4 * 4))-$((c / 4 * 4 + 3))
	hcpu "$r" $c $c $m 0-11 782 3900000 - 55
done
for c in 12 13; do hcpu "$r" $c $c 12-13 - 355 2500000 - 25; done
put "$r/devices/cpu_core/cpus" 0-3
put "$r/devices/cpu_atom/cpus" 4-11
put "$r/devices/cpu_lowpower/cpus" 12-13
put "$r/devices/system/cpu/intel_pstate/status" active
put "$r/README" "Arrow Lake-H ES, family 6 model 197. Source: github.com/intel/pepc tests/emul-data/arl-h-1. Derived: cpu_capacity 1024/782/355 from highest_perf 72/55/25 (kernel >= 6.16, intel_pstate.rst); not observed."

# ptl-h-es: Panther Lake engineering sample (model 204), 2 P-cores, 4
# E-cores (2-5, L3 0-5) and 4 LP E-cores (6-9, shared L2, no L3). E and LPE
# share cpuinfo_max_freq 2400000, base_frequency 1600000 and highest_perf
# 24: only the missing L3 separates them. pepc tests/emul-data/ptl-h-4.
# cpu_capacity derived: 1024, 682, 682.
machine ptl-h-es 0-9
for c in 0 1; do hcpu "$r" $c $c $c 0-5 1024 3200000 - 36; done
for c in 2 3 4 5; do hcpu "$r" $c $c 2-5 0-5 682 2400000 1600000 24; done
for c in 6 7 8 9; do hcpu "$r" $c $c 6-9 - 682 2400000 1600000 24; done
put "$r/devices/cpu_core/cpus" 0-1
put "$r/devices/cpu_atom/cpus" 2-9
put "$r/devices/system/cpu/intel_pstate/status" active
put "$r/README" "Panther Lake ES, family 6 model 204. Source: github.com/intel/pepc tests/emul-data/ptl-h-4. Derived: cpu_capacity 1024/682/682 from highest_perf 36/24/24; not observed."

# strix-point-hx370: AMD Ryzen AI 9 HX 370, 4 Zen5 cores (0-3, siblings
# +12, L3 0-3,12-15) and 8 Zen5c cores (4-11, siblings +12, L3
# 4-11,16-23). Topology: hwloc tests/hwloc/x86/
# AMD-1Ah-Zen5StrixPoint-RyzenAI9HX370.xml; cpuinfo_max_freq 5157895 /
# 3289474 from FrameworkComputer/SoftwareFirmwareIssueTracker #243 (another
# HX 370, matched by core type). cpu_capacity 1024 (no AMD capacity
# scaling).
machine strix-point-hx370 0-23
for c in $(seq 0 23); do
	core=$((c % 12))
	s=$core,$((core + 12))
	if [ $core -lt 4 ]; then
		hcpu "$r" $c $s $s 0-3,12-15 1024 5157895 - -
	else
		hcpu "$r" $c $s $s 4-11,16-23 1024 3289474 - -
	fi
done
put "$r/devices/system/cpu/amd_pstate/status" active
put "$r/README" "AMD Ryzen AI 9 HX 370 (Strix Point). Topology: github.com/open-mpi/hwloc tests/hwloc/x86/AMD-1Ah-Zen5StrixPoint-RyzenAI9HX370.xml. cpuinfo_max_freq: FrameworkComputer/SoftwareFirmwareIssueTracker #243 (FW16 HX 370, kernel 6.18), joined by core type: not captured together with the topology."

# strix-halo-16c: AMD Strix Halo, 16 Zen5 cores in two CCDs (L3 0-7,16-23
# and 8-15,24-31), cpuinfo_max_freq 5187500 on all 32 CPUs (sbc-bench
# results/8hUb.txt): two L3 domains of one kind, homogeneous.
machine strix-halo-16c 0-31
for c in $(seq 0 31); do
	core=$((c % 16))
	s=$core,$((core + 16))
	if [ $core -lt 8 ]; then l3=0-7,16-23; else l3=8-15,24-31; fi
	hcpu "$r" $c $s $s $l3 1024 5187500 - -
done
put "$r/devices/system/cpu/amd_pstate/status" active
put "$r/README" "AMD Ryzen AI Max (Strix Halo), 16 x Zen5. Source: github.com/ThomasKaiser/sbc-bench results/8hUb.txt (cpuinfo_max_freq on all CPUs); two 8-core CCDs per AMD's layout."

# rk3588: Rockchip RK3588 (Rock 5B class), 4 Cortex-A55 (0-3) and 4
# Cortex-A76 in two cpufreq policies (4-5, 6-7), one DSU L3 0-7. Layout and
# maxima 1800000 / 2352000 / 2304000 kHz: sbc-bench results/4qJG.txt.
# cpu_capacity derived from rk3588-base.dtsi capacity-dmips-mhz 530 / 1024
# x each CPU's maximum (arch_topology.c): 405, 1024, 1003.
machine rk3588 0-7
for c in 0 1 2 3; do hcpu "$r" $c $c 0-3 0-7 405 1800000 - -; done
for c in 4 5; do hcpu "$r" $c $c 4-5 0-7 1024 2352000 - -; done
for c in 6 7; do hcpu "$r" $c $c 6-7 0-7 1003 2304000 - -; done
# cpufreq's tables as 4qJG lists them ("cpufreq-policy0 ... 408 600 816
# 1008 1200 1416 1608 1800", policy4 and policy6 up to 2208) and MIDR_EL1
# from its core types (Cortex-A55 r2p0, Cortex-A76 r4p0: implementer 0x41,
# variant, architecture 0xf, part 0xd05 / 0xd0b, revision). No debugfs:
# its classes are priced from these frequencies (the derived rung).
for c in 0 1 2 3 4 5 6 7; do
	f=$r/devices/system/cpu/cpu$c/cpufreq
	if [ $c -lt 4 ]; then
		put "$f/scaling_available_frequencies" "408000 600000 816000 1008000 1200000 1416000 1608000 1800000"
		put "$r/devices/system/cpu/cpu$c/regs/identification/midr_el1" 0x00000000412fd050
	else
		put "$f/scaling_available_frequencies" "408000 600000 816000 1008000 1200000 1416000 1608000 1800000 2016000 2208000"
		put "$r/devices/system/cpu/cpu$c/regs/identification/midr_el1" 0x00000000414fd0b0
	fi
	put "$f/cpuinfo_min_freq" 408000
done
put "$r/README" "Rockchip RK3588. Source: github.com/ThomasKaiser/sbc-bench results/4qJG.txt (cores, clusters, cpufreq maxima; cpufreq tables of its 'Governors/policies' section; core types and revisions, from which midr_el1 is composed). Derived: cpu_capacity from rk3588-base.dtsi capacity-dmips-mhz (A55 530, A76 1024) x max frequency, as arch_topology.c computes it; not observed."

# sdm850: Snapdragon 850 (Lenovo Yoga C630), 4 little (0-3) and 4 big
# (4-7) Kryo 385 cores in one DynamIQ cluster (one L3 0-7). cpu_capacity 377
# / 1024 as posted by Steev Klimaszewski, linux-pm 2021-11-05; maxima
# 1766400 / 2956800 kHz (sdm845/850 OPP tables).
machine sdm850 0-7
for c in 0 1 2 3; do hcpu "$r" $c $c 0-7 0-7 377 1766400 - -; done
for c in 4 5 6 7; do hcpu "$r" $c $c 0-7 0-7 1024 2956800 - -; done
put "$r/README" "Snapdragon 850 (Lenovo Yoga C630). cpu_capacity 377/1024: Steev Klimaszewski, linux-pm 2021-11-05; one cluster per arch/arm64/boot/dts/qcom/sdm845.dtsi cpu-map; maxima from its OPP tables."

# apple-m1: Apple M1 under Asahi Linux, 4 Icestorm E-cores (0-3, shared L2)
# and 4 Firestorm P-cores (4-7, shared L2), no L3 in sysfs. cpu_capacity
# 459 / 1024 (Qais Yousef, RFC 00/16, linux-pm 2024-08-20, Mac mini M1,
# 6.8); maxima 2064000 / 3204000 kHz (t8103.dtsi OPPs, AsahiLinux/linux
# PR #229).
machine apple-m1 0-7
for c in 0 1 2 3; do hcpu "$r" $c $c 0-3 - 459 2064000 - -; done
for c in 4 5 6 7; do hcpu "$r" $c $c 4-7 - 1024 3204000 - -; done
# The kernel's energy model in debugfs, as it would be built from
# t8103.dtsi's opp-microwatt (AsahiLinux/linux PR #229): lowest and highest
# states of each cluster; performance = capacity × f / fmax (derived).
em=$r/kernel/debug/energy_model
put "$em/cpu0/cpus" 0-3
put "$em/cpu0/ps:600000/frequency" 600000
put "$em/cpu0/ps:600000/power" 47296
put "$em/cpu0/ps:600000/performance" 133
put "$em/cpu0/ps:2064000/frequency" 2064000
put "$em/cpu0/ps:2064000/power" 412979
put "$em/cpu0/ps:2064000/performance" 459
put "$em/cpu4/cpus" 4-7
put "$em/cpu4/ps:600000/frequency" 600000
put "$em/cpu4/ps:600000/power" 290230
put "$em/cpu4/ps:600000/performance" 192
put "$em/cpu4/ps:3204000/frequency" 3204000
put "$em/cpu4/ps:3204000/power" 4951324
put "$em/cpu4/ps:3204000/performance" 1024
put "$r/README" "Apple M1 (Mac mini) under Asahi Linux. cpu_capacity 459/1024: Qais Yousef, RFC 00/16, linux-pm 2024-08-20. Maxima and the energy model's power (opp-microwatt, uW): t8103.dtsi, AsahiLinux/linux PR #229. Derived: the debugfs energy_model layout and its performance values (capacity x f / fmax); not observed."

# The kernel's energy model as debugfs shows it (issue 35), computed here
# with the kernel's own integer arithmetic so that the derivation is on
# record:
# * DT-derived (drivers/opp/of.c _get_power): power (uW) =
#   dynamic-power-coefficient x mV^2 x MHz / 1000000, mV = opp-microvolt /
#   1000 (truncated);
# * kernel/power/energy_model.c: performance = cpu_capacity x f / f_max,
#   cost = 10 x power / performance, a state is inefficient when a faster
#   one costs no more (walked from the top), flags EM_PERF_DOMAIN_MICROWATTS
#   (0x1) plus SKIP_INEFFICIENCIES (0x2) when cpufreq took an inefficient
#   state. The domain directory is its first CPU's device name.

# em_dt ROOT FIRSTCPU CPUS DPC CAPACITY "MHZ:MICROVOLT ..." (ascending)
em_dt() {
	_pd=$1/kernel/debug/energy_model/cpu$2
	put "$_pd/cpus" "$3"
	_fmax=0
	for _o in $6; do _fmax=${_o%%:*}; done
	_rev=
	for _o in $6; do _rev="$_o $_rev"; done
	_prev=-1
	_flags=1
	for _o in $_rev; do
		_mhz=${_o%%:*}
		_mv=$((${_o#*:} / 1000))
		_pw=$(($4 * _mv * _mv * _mhz / 1000000))
		_perf=$(($5 * _mhz / _fmax))
		_cost=$((_pw * 10 / _perf))
		_ineff=0
		if [ $_prev -ge 0 ] && [ $_cost -ge $_prev ]; then
			_ineff=1
			_flags=3
		else
			_prev=$_cost
		fi
		_ps=$_pd/ps:$((_mhz * 1000))
		put "$_ps/frequency" $((_mhz * 1000))
		put "$_ps/power" $_pw
		put "$_ps/performance" $_perf
		put "$_ps/cost" $_cost
		put "$_ps/inefficient" $_ineff
	done
	put "$_pd/flags" "0x$_flags"
}

# freqs ROOT CPU "MHZ:MICROVOLT ..." RELATED: cpufreq's table of a
# cpufreq-dt policy (scaling_available_frequencies, cpuinfo_min/max_freq).
freqs() {
	_f=$1/devices/system/cpu/cpu$2/cpufreq
	_list=
	_min=
	for _o in $3; do
		_k=$((${_o%%:*} * 1000))
		_list="$_list $_k"
		[ -n "$_min" ] || _min=$_k
	done
	put "$_f/scaling_available_frequencies" "${_list# }"
	put "$_f/cpuinfo_min_freq" "$_min"
	put "$_f/cpuinfo_max_freq" "$_k"
	put "$_f/scaling_max_freq" "$_k"
	put "$_f/related_cpus" "$4"
	put "$_f/affected_cpus" "$4"
}

# gs101: Google Tensor G1 (Pixel 6), mainline device tree
# (arch/arm64/boot/dts/exynos/google/gs101.dtsi, torvalds/linux @
# 01272f05aae5): 4 Cortex-A55 (0-3), 2 Cortex-A76 (4-5), 2 Cortex-X1
# (6-7), clusters per its cpu-map, private L2s (DynamIQ), one DSU L3 0-7.
# capacity-dmips-mhz 250 / 620 / 1024 and maxima 1803 / 2253 / 2802 MHz
# give cpu_capacity 160 / 498 / 1024 (arch_topology.c: dmips x f_max,
# scaled so the largest is 1024, truncated). dynamic-power-coefficient 70
# / 284 / 650 with every OPP of its three tables give the energy model.
gs101_l="300:537500 574:600000 738:618750 930:668750 1098:712500 1197:731250 1328:762500 1401:781250 1598:831250 1704:862500 1803:906250"
gs101_m="400:506250 553:537500 696:562500 799:581250 910:606250 1024:625000 1197:662500 1328:687500 1491:731250 1663:775000 1836:818750 1999:868750 2130:918750 2253:968750"
gs101_b="500:500000 851:556250 984:575000 1106:606250 1277:631250 1426:662500 1582:693750 1745:731250 1826:750000 2048:793750 2188:831250 2252:850000 2401:887500 2507:925000 2630:968750 2704:1000000 2802:1056250"
machine gs101 0-7
for c in 0 1 2 3; do
	hcpu "$r" $c $c 0-3 0-7 160 - - -
	freqs "$r" $c "$gs101_l" 0-3
done
for c in 4 5; do
	hcpu "$r" $c $c 4-5 0-7 498 - - -
	freqs "$r" $c "$gs101_m" 4-5
done
for c in 6 7; do
	hcpu "$r" $c $c 6-7 0-7 1024 - - -
	freqs "$r" $c "$gs101_b" 6-7
done
for c in 0 1 2 3 4 5 6 7; do put "$r/devices/system/cpu/cpu$c/cache/index2/shared_cpu_list" $c; done
em_dt "$r" 0 0-3 70 160 "$gs101_l"
em_dt "$r" 4 4-5 284 498 "$gs101_m"
em_dt "$r" 6 6-7 650 1024 "$gs101_b"
put "$r/README" "Google Tensor G1 (gs101, Pixel 6) under mainline Linux. Source: arch/arm64/boot/dts/exynos/google/gs101.dtsi (torvalds/linux @ 01272f05aae5): cpu-map clusters 0-3/4-5/6-7, capacity-dmips-mhz 250/620/1024, dynamic-power-coefficient 70/284/650, the three OPP tables (opp-hz, opp-microvolt). Derived, not observed: cpu_capacity 160/498/1024 (arch_topology.c), cpufreq's tables (cpufreq-dt lists the OPPs), and the debugfs energy_model (power = dpc x mV^2 x MHz / 1e6 uW, drivers/opp/of.c; performance, cost, inefficient and flags as kernel/power/energy_model.c computes them; gen_topology.sh em_dt)."

# rk3588-mainline: Rockchip RK3588 under mainline Linux
# (arch/arm64/boot/dts/rockchip/rk3588-base.dtsi, torvalds/linux @
# 05b24f63b49b; OPPs rk3588-opp.dtsi @ 276856db91b4): 4 Cortex-A55 (0-3)
# and 4 Cortex-A76 in two cpufreq policies (4-5, 6-7), clusters per its
# cpu-map, private L2s, L3 0-7. capacity-dmips-mhz 530 / 1024, maxima
# 1800 / 2400 MHz: cpu_capacity 397 / 1024. dynamic-power-coefficient 228
# / 416. The vendor kernel of the rk3588 tree has other OPPs (408-1800 /
# 408-2208 MHz at other voltages) and the BSP's dpc 100 / 300.
rk_l="1008:675000 1200:712500 1416:762500 1608:850000 1800:950000"
rk_b="1200:675000 1416:725000 1608:762500 1800:850000 2016:925000 2208:987500 2400:1000000"
machine rk3588-mainline 0-7
for c in 0 1 2 3; do
	hcpu "$r" $c $c 0-3 0-7 397 - - -
	freqs "$r" $c "$rk_l" 0-3
done
for c in 4 5; do
	hcpu "$r" $c $c 4-5 0-7 1024 - - -
	freqs "$r" $c "$rk_b" 4-5
done
for c in 6 7; do
	hcpu "$r" $c $c 6-7 0-7 1024 - - -
	freqs "$r" $c "$rk_b" 6-7
done
for c in 0 1 2 3 4 5 6 7; do put "$r/devices/system/cpu/cpu$c/cache/index2/shared_cpu_list" $c; done
em_dt "$r" 0 0-3 228 397 "$rk_l"
em_dt "$r" 4 4-5 416 1024 "$rk_b"
em_dt "$r" 6 6-7 416 1024 "$rk_b"
put "$r/README" "Rockchip RK3588 under mainline Linux. Source: arch/arm64/boot/dts/rockchip/rk3588-base.dtsi (torvalds/linux @ 05b24f63b49b: cpu-map clusters 0-3/4-5/6-7, capacity-dmips-mhz 530/1024, dynamic-power-coefficient 228/416) and rk3588-opp.dtsi (@ 276856db91b4: opp-hz, the first opp-microvolt value). Derived, not observed: cpu_capacity 397/1024 (arch_topology.c), cpufreq's tables, and the debugfs energy_model (power = dpc x mV^2 x MHz / 1e6 uW, drivers/opp/of.c; performance, cost, inefficient and flags as kernel/power/energy_model.c computes them; gen_topology.sh em_dt)."

# x1e-snapdragon-x-elite: 12 Oryon cores in 3 clusters of 4 (shared L2, no
# L3), cluster 0 max 3801600 kHz, clusters 1-2 4300800 kHz (1.13x),
# capacity-dmips-mhz not set so cpu_capacity 1024 everywhere (sbc-bench
# results/8SWL.txt, Linux 6.14-rc6): homogeneous.
machine x1e-snapdragon-x-elite 0-11
for c in $(seq 0 11); do
	m=$((c / 4 * 4))-$((c / 4 * 4 + 3))
	if [ $c -lt 4 ]; then f=3801600; else f=4300800; fi
	hcpu "$r" $c $c $m - 1024 $f - -
done
put "$r/README" "Snapdragon X Elite (X1E). Source: github.com/ThomasKaiser/sbc-bench results/8SWL.txt (Linux 6.14-rc6): three clusters of 4, maxima 3801600/4300800 kHz, cpu_capacity 1024."

# Presets of `schedpolicyd plan --topology` (the seed's machines), written
# from their Go descriptions in cmd/schedpolicyd/plan_machine.go (also reachable as
# `schedpolicyd plan --topology P --write-sysfs DIR`) so the two cannot
# drift; TestPresetTrees checks that reading each tree gives the preset back.
# big-4096 (4096 CPUs, ~45k files) is not committed: the test generates it
# into a temporary directory.
(cd ../.. && go test ./cmd/schedpolicyd -run '^TestPresetTrees$' -count=1 -args -update-presets)
