package daemon

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/tree"
)

// CleanTree removes what a daemon that did not stop cleanly (kill -9, a
// crash, systemd's SIGKILL after TimeoutStopSec=) left of its tree at dir,
// as its clean stop would have: the FUSE mount, detached (a dead mount
// keeps systemd from removing the RuntimeDirectory it is in), the tree
// directory when a daemon made it and it is empty, the tree's lock
// file, and the directories above the tree that daemon made (its lock
// file names them), if empty. found says what there was, one phrase each ("" none). The
// workloads' CPUs are not touched: the next start restores or keeps them
// from state.json. It is `schedpolicyd cleanup`, the unit's ExecStopPost=.
//
// Errors: ErrAlreadyRunning (naming the pid) when a daemon serves dir —
// nothing is touched then — or the lock's or the unmount's error.
func CleanTree(dir string) (found []string, err error) {
	r, err := statefile.ResolveTreeDir(dir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(filepath.Dir(r)); errors.Is(err, fs.ErrNotExist) {
		return nil, nil // no tree was ever there
	}
	l, err := statefile.LockTreeDir(dir)
	if err != nil {
		return nil, err
	}
	err = tree.ClearStaleMount(l.Dir(), func(what string) { found = append(found, what) })
	if l.OwnDir() {
		// Only once detached: a dead mount's directory cannot be read.
		if e, rerr := os.ReadDir(l.Dir()); rerr == nil && len(e) == 0 {
			found = append(found, "the tree directory "+l.Dir())
		}
	}
	made := l.Made()
	l.Release()
	for _, p := range made {
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			found = append(found, "the directory "+p+" made for the tree")
		}
	}
	return found, err
}
