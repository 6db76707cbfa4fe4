// Package units is the placement back end for systemd machines: each
// service or scope directly in a managed slice (Config.Manage), of the
// system manager and of each user's manager where cpuset is delegated, is
// a workload, placed with AllowedCPUs= set at runtime through the
// manager's D-Bus API (SetUnitProperties), never by writing its cgroup.
// It follows systemd's unit signals (from the name's owner only) instead
// of polling, holds placement across a daemon-reload, and reaches each
// manager through unitManager, a small interface over *systemd.Manager
// that its tests satisfy with an in-memory manager. Placement is a
// placement.Driver, made with the placement.Engine that holds it.
package units
