// Package tree serves the virtual sched_policy tree (docs/USAGE.md, "The
// tree"): a fixed set of files, kernel-shaped as sysfs attributes, whose
// reads and writes go to a TreeHandler; through FUSE (one write(2) is one
// Handler.Write, whose error the writer sees) or as plain files watched
// with fsnotify. It mounts only on a directory reached as a trusted path
// (internal/trustedpath), watches the mount table for the mount's loss
// and clears stale mounts a dead daemon left.
//
// The package does not log; of ours it imports only internal/trustedpath.
package tree
