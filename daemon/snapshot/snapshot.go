// Package snapshot holds the daemon's published state: the Snapshot the
// event loop publishes after every change, and the entries it is made of
// (workloads, holds, topology and CPU classes, energy totals), with the
// power estimates, so that the daemon, its D-Bus service (daemon/bus) and
// the tree share one set of types without importing each other.
//
// It holds types and their formatting only: no I/O, no state. It imports
// policy and acpi for the types of the values it carries.
package snapshot

import (
	"fmt"
	"time"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// Snapshot is a consistent copy of the daemon's public state, published by
// the event loop after every change. Readers (tree, D-Bus) never touch loop
// state directly. A published Snapshot and everything it points to is
// read-only: its slices are shared with the next one while they do not
// change, so that comparing them before each PropertiesChanged costs
// nothing.
type Snapshot struct {
	Policy      policy.Policy // effective policy
	Knob        policy.Knob
	PowerSource acpi.Source
	Reason      string // why this power source (acpi.Decision.Reason)
	// PolicyReason says why the effective policy, in words.
	PolicyReason string
	// LastChange is when Policy last changed (start-up counts).
	LastChange time.Time
	Boost      string // "1", "0" or "unsupported"
	Workloads  []WorkloadStatus
	// Holds are the policy holds in the order they were made.
	Holds []Hold
	// Topology is the online CPUs with their package, LLC and core; the
	// same slice from one snapshot to the next until a hotplug changes it.
	Topology []TopologyEntry
	// CPUClasses is the efficiency classes, most efficient first; the
	// same slice until a hotplug changes them.
	CPUClasses []CPUClassEntry
	// EnergySource is what measures energy: EnergySourceRAPL,
	// EnergySourceBattery or EnergySourceNone; "" before the first
	// reading (EnergySourceName).
	EnergySource string
	// Energy is the measured energy per policy and power source over every
	// closed segment, across restarts (in policy order, then ac, battery,
	// unknown).
	Energy []EnergyTotal
	// ConfigDigest names the configuration applied: "sha256:HEX" of the
	// configuration file's bytes, "" without a file.
	ConfigDigest string
	// KnobFrom says where Knob comes from: KnobFromChoice (a user's
	// explicit choice, saved), KnobFromProfile (the followed power-profiles
	// daemon's profile), KnobFromConfig (the configuration file's
	// power_aware and power_aware_policy) or KnobFromDefault (built in).
	KnobFrom string
	// KnobChosenAt is when the explicit choice in force took effect (made,
	// or brought back by a change of power source); zero when KnobFrom is
	// not KnobFromChoice or the time is not known (a choice saved by an
	// older version).
	KnobChosenAt time.Time
	// Exempt is the exempt list: the configuration's entries, then those
	// made over D-Bus, in the order they were made.
	Exempt []ExemptEntry
}

// ExemptEntry is one entry of the exempt list (Snapshot.Exempt): the
// entry as written ([system/|user:UID/]PATTERN) and where it comes from,
// "config" (the configuration's exempt setting) or "state" (made over
// D-Bus, kept in state.json). Never modified once made: the Exemptions
// property's (ss) entry.
type ExemptEntry struct {
	Entry, From string
}

// Snapshot.KnobFrom values.
const (
	KnobFromChoice  = "choice"
	KnobFromProfile = "profile"
	KnobFromConfig  = "config"
	KnobFromDefault = "default"
)

// StatusText is the one line systemd shows as the unit's status (STATUS=,
// `systemctl show -p StatusText`): the effective policy, the knob, the power
// source and the number of workloads, for example "policy powersaving
// (power_aware 2), power source battery, 3 workloads" (FormatStatus).
func (s Snapshot) StatusText() string {
	return FormatStatus(s.Policy, s.Knob.PowerAware, s.PowerSource, len(s.Workloads))
}

// FormatStatus is StatusText's line for policy p, knob powerAware, power
// source src and a number of workloads, for the loop's own values.
func FormatStatus(p policy.Policy, powerAware policy.PowerAware, src acpi.Source, workloads int) string {
	return fmt.Sprintf("policy %s (power_aware %d), power source %s, %d workloads", p, powerAware, src, workloads)
}

// WorkloadStatus describes one managed workload.
type WorkloadStatus struct {
	// Name is the workload's published name, valid UTF-8: a cgroup
	// directory's name in its published form (Escape: `caf\xe9` for a
	// Latin-1 "café"), or a unit's name; the name SetWorkloadPolicy takes.
	Name string
	// Path is its cgroup directory; a child of the managed parent's in
	// its published form too (Escape of the whole path).
	Path string
	CPUs string  // cpulist of cpuset.cpus as last written or read
	Util float64 // decayed utilisation, CPUs
	// Override is the workload's own placement policy ("" = the machine's),
	// "user" for a cgroup released to whoever wrote its cpuset.cpus, or
	// "exempt" for one the exempt list names (not placed).
	Override policy.Policy
	// Class says what kind of work it is: "workload" (a child of the
	// managed parent, or a unit of schedpolicyd.slice), "service" (a unit
	// of system.slice), "user" (a user's whole manager, user@UID.service);
	// for the units of a user's manager "focused" (an app.slice unit whose
	// cgroup's user.xdg.inactive-since is -1), "app", "app-nofocus" (an
	// app of a user whose desktop writes that attribute on no app),
	// "background" or "session"; or the managed slice's name without
	// ".slice" for other units.
	Class string
	// Manager is the systemd manager whose unit it is, "system" or
	// "user:UID"; "" for a cgroup of the managed parent. With Name it is
	// what the exempt list matches.
	Manager string
	// Policy is the policy the last plan placed it with (a [[slice]]
	// rule's or its class's may differ from the machine's); "" when that
	// plan did not place it (exempt, released, overridden, no plan yet).
	Policy policy.Policy
	// Confined: it holds a value of the daemon's that gives it fewer CPUs
	// than it may have (its original ones, or those the placement may
	// give): the workloads `schedpolicyctl status` lists with the command
	// that exempts them.
	Confined bool
}

// Hold is one HoldPolicy (or power-profiles HoldProfile) request. Never
// modified once made. Without AppID it is exactly one entry of the Holds
// property, signature (usss): the snapshot's list is published as it is,
// with no per-hold work.
type Hold struct {
	Cookie uint32
	Policy policy.Policy
	Reason string
	// Owner is the holder's unique bus name; the hold ends when it leaves.
	Owner string
	// AppID is the power-profiles application_id ("" for HoldPolicy); not
	// part of the Holds property.
	AppID string `dbus:"-"`
}

// TopologyEntry is one element of the Topology property, signature
// (uuuu): an online CPU and the groups the balancer places it in, each
// named by its lowest CPU — the package (package_cpus), the last-level
// cache (shared_cpu_list) and the core (core_cpus, its SMT siblings).
type TopologyEntry struct {
	CPU, Package, LLC, Core uint32
}

// CPUClassEntry is one element of the CPUClasses property, signature
// (ssu): an efficiency class's name (LPE, E, P; little, mid, big; all on
// a homogeneous machine), its CPUs as a cpulist and its capacity relative
// to the biggest CPU (1..1024). The property lists the classes most
// efficient first.
type CPUClassEntry struct {
	Name     string
	CPUs     string
	Capacity uint32
}
