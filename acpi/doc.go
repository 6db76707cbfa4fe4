// Package acpi decides whether the machine runs on AC or on battery from the
// power_supply class in sysfs (Read, Classify), and watches for changes
// (Monitor): kernel uevents on a NETLINK_KOBJECT_UEVENT socket, fsnotify on
// mock roots, optionally UPower, acpid and logind's resume signal, a
// settle re-read after events and a safety-net timer. Every source is only
// a hint to re-read sysfs; docs/POWER_SOURCE.md describes the rules.
package acpi
