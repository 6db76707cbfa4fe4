// Package trustedpath walks a path from / the way systemd's chase() does,
// one component at a time, so that no user but root can redirect a
// directory the daemon writes in as root: its state directory, the tree's
// directory and the tree lock's (see trustedpath.go for the rules). The
// daemon's state files (daemon/statefile) and the tree server (tree) use
// it. A leaf: it imports nothing of ours.
package trustedpath
