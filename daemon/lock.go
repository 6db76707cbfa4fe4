package daemon

import "github.com/schedpolicyd/schedpolicyd/daemon/statefile"

// ErrAlreadyRunning is returned by Run when another daemon holds the lock
// of the state directory, the tree or the managed parent cgroup.
var ErrAlreadyRunning = statefile.ErrAlreadyRunning
