package cgroup

import (
	"fmt"
	"path/filepath"
	"sync"

	"github.com/fsnotify/fsnotify"
)

// CgroupWatch delivers coalesced hints about a managed parent cgroup, with
// no timer:
//   - Changed: a child was created or removed (mkdir/rmdir raise inotify
//     events on cgroupfs), the parent itself was removed, renamed or had
//     another directory renamed over it, a file appeared in a child being
//     waited for (WatchDir), or events were lost (the inotify queue
//     overflowed);
//   - Attached: a task was attached to a child (a write to its
//     cgroup.procs, tasks or cgroup.threads, which raises IN_MODIFY);
//   - Written: a child's cpuset.cpus was written and closed by someone
//     (CloseWriteWatch: not by writes through a held-open file).
//
// Only hints: the reader re-reads the files. Safe for concurrent use.
type CgroupWatch struct {
	changed, attached chan struct{}
	w                 *fsnotify.Watcher
	closes            *CloseWriteWatch // nil if it could not be made
	stop, done        chan struct{}
	// mu guards attachedTo: the children (names) a task was attached to
	// since the last TakeAttached.
	mu         sync.Mutex
	attachedTo map[string]bool
}

// WatchCgroup starts watching the managed parent directory parent, and the
// directory that holds it for the parent's own removal or rename. The
// parent's own events cannot be relied on for that: the kernel raises
// IN_DELETE_SELF only once the last reference to the removed directory is
// dropped, and the daemon holds the parent open for its lock (a flock on
// the directory) until it has seen it gone; on cgroupfs it may never come.
// The entry's removal from the directory above (IN_DELETE, IN_MOVED_FROM)
// is raised at the rmdir or rename itself. Errors come from fsnotify (the
// inotify instance or watch limits, a missing directory): a watch that
// could not see the parent go is not given. A failure to watch cpuset.cpus
// writes is not an error: Written then never fires (see ClosesWatched).
func WatchCgroup(parent string) (*CgroupWatch, error) {
	parent = filepath.Clean(parent)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", parent, err)
	}
	dirs := []string{parent}
	if up := filepath.Dir(parent); up != parent {
		dirs = append(dirs, up)
	}
	for _, dir := range dirs {
		if err := w.Add(dir); err != nil {
			w.Close()
			return nil, fmt.Errorf("watch %s: %w", dir, err)
		}
	}
	c := &CgroupWatch{
		changed: make(chan struct{}, 1), attached: make(chan struct{}, 1),
		w: w, stop: make(chan struct{}), done: make(chan struct{}),
	}
	c.closes, _ = NewCloseWriteWatch()
	go c.run(parent)
	return c, nil
}

func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (c *CgroupWatch) run(parent string) {
	defer close(c.done)
	up := filepath.Dir(parent)
	for {
		select {
		case ev, ok := <-c.w.Events:
			if !ok {
				return
			}
			dir := filepath.Dir(ev.Name)
			switch b := filepath.Base(ev.Name); {
			case dir == parent || ev.Name == parent:
				// The parent's own removal and renames, seen in the
				// directory above, arrive here too.
				if ev.Op&(fsnotify.Create|fsnotify.Remove|fsnotify.Rename) != 0 {
					poke(c.changed)
				}
			case dir == up || ev.Name == up:
				// The parent's siblings and the files beside them are not
				// ours; the directory above going takes the parent's path
				// with it.
				if ev.Name == up && ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 {
					poke(c.changed)
				}
			case ev.Op&fsnotify.Write != 0 && (b == "cgroup.procs" || b == "tasks" || b == "cgroup.threads"):
				c.mu.Lock()
				if c.attachedTo == nil {
					c.attachedTo = map[string]bool{}
				}
				c.attachedTo[filepath.Base(dir)] = true
				c.mu.Unlock()
				poke(c.attached)
			case ev.Op&(fsnotify.Create|fsnotify.Write) != 0 && filepath.Dir(dir) == parent:
				// A file of a child being waited for (WatchDir).
				poke(c.changed)
			}
		case _, ok := <-c.w.Errors:
			if !ok {
				return
			}
			poke(c.changed) // the queue overflowed (events lost): rescan
		case <-c.stop:
			return
		}
	}
}

// Changed, Attached and Written are the hint channels (capacity 1).
func (c *CgroupWatch) Changed() <-chan struct{}  { return c.changed }
func (c *CgroupWatch) Attached() <-chan struct{} { return c.attached }
func (c *CgroupWatch) Written() <-chan struct{} {
	if c.closes == nil {
		return nil
	}
	return c.closes.C()
}

// TakeAttached returns the names of the children a task was attached to
// since the last call (as Attached hinted), and clears them.
func (c *CgroupWatch) TakeAttached() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := c.attachedTo
	c.attachedTo = nil
	return names
}

// ClosesWatched reports whether cpuset.cpus writes are watched (false: Written
// never fires; the inotify instance limit was reached).
func (c *CgroupWatch) ClosesWatched() bool { return c.closes != nil }

// TakeWritten returns the names of the children whose cpuset.cpus was
// written since the last call, and clears them; all is true when events
// were lost and any child may have been.
func (c *CgroupWatch) TakeWritten() (names map[string]bool, all bool) {
	if c.closes == nil {
		return nil, false
	}
	paths, all := c.closes.Take()
	names = make(map[string]bool, len(paths))
	for p := range paths {
		names[filepath.Base(filepath.Dir(p))] = true
	}
	return names, all
}

// WatchChild watches child directory dir's task files (v1 cgroup.procs
// and tasks, v2 cgroup.procs and cgroup.threads) for Attached, and its
// cpuset.cpus for Written. The files, not the directory: a directory
// watch would also report every other file's change. A failure (e.g. the
// inotify watch limit) only costs the early hint.
func (c *CgroupWatch) WatchChild(dir string, v CgroupVersion) {
	threads := "tasks"
	if v == CgroupV2 {
		threads = "cgroup.threads"
	}
	for _, f := range []string{"cgroup.procs", threads} {
		c.w.Add(filepath.Join(dir, f))
	}
	if c.closes != nil {
		c.closes.Add(filepath.Join(dir, "cpuset.cpus"))
	}
}

// UnwatchChild ends WatchChild's cpuset.cpus watch (the task files'
// watches end with the files).
func (c *CgroupWatch) UnwatchChild(dir string) {
	if c.closes != nil {
		c.closes.Remove(filepath.Join(dir, "cpuset.cpus"))
	}
}

// WatchDir watches a child directory until it can be adopted (its files
// appear: a mock tree fills them after mkdir); UnwatchDir ends that.
func (c *CgroupWatch) WatchDir(dir string)   { c.w.Add(dir) }
func (c *CgroupWatch) UnwatchDir(dir string) { c.w.Remove(dir) }

// Close ends the watch and waits for its goroutines.
func (c *CgroupWatch) Close() {
	close(c.stop)
	c.w.Close()
	<-c.done
	if c.closes != nil {
		c.closes.Close()
	}
}
