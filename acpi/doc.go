// Package acpi decides whether the machine runs on AC or on battery from the
// power_supply class in sysfs, and watches for changes (kernel uevents on a
// NETLINK_KOBJECT_UEVENT socket, fsnotify on mock roots, and a safety-net
// timer), re-reading sysfs on every hint.
package acpi
