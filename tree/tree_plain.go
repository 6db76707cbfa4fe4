package tree

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// The plain-file backend of the tree (docs/USAGE.md, "The tree"), used where
// /dev/fuse is not usable. Regular files cannot refuse a write, so a write always succeeds for
// the writer and is judged afterwards: the watcher hands the new content to
// the handler and, if the handler rejects it, reverts the file and reports the
// rejection through TreeOptions.OnPlainRejected.
//
// Telling our own writes from the user's:
//   - the tree writes a file only by writing a temporary file next to it and
//     renaming it over the name, so on a tree file name it causes only a
//     Create event, never a Write event;
//   - a user's `echo x > f` writes in place (Write events, the first on an
//     empty truncated file); an editor renames over the name (Create);
//   - after a 20ms debounce the watcher re-reads every file and treats as a
//     user write any file with a Write event or whose content differs from
//     what the tree last wrote. Same-content writes therefore reach the
//     handler too, as they would in sysfs.
//   - An empty file is given emptyGrace to be filled before it counts as an
//     (invalid, empty) write, since the truncation and the write of one
//     `echo` may be reported more than the debounce apart.

const (
	plainDebounce = 20 * time.Millisecond
	emptyGrace    = 200 * time.Millisecond
)

type plainTree struct {
	dir        string
	files      []TreeFile
	byPath     map[string]TreeFile
	handler    TreeHandler
	onRejected func(path string, data []byte, err error)
	watcher    *fsnotify.Watcher
	created    []string // directories ServeTree created, parents first
	replaced   replacedTrees

	// mu serialises writes to the files and guards last and closed.
	mu     sync.Mutex
	last   map[string][]byte // content the tree last wrote, by path
	closed bool

	done      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

func servePlain(opts TreeOptions, resolved string) (*plainTree, error) {
	// A stale FUSE mount would make every path below Dir fail with ENOTCONN;
	// if it cannot be cleared, opening the directory reports that.
	report := opts.OnStaleMount
	if opts.Previous != nil {
		report = nil
	}
	_ = clearStaleMount(resolved, report)
	// The files are written below the directory the walk checked: its
	// path is trusted (only root or our euid can change any component),
	// so it keeps naming that directory.
	d, made, err := openTreeDir(resolved)
	if err != nil {
		for i := len(made) - 1; i >= 0; i-- {
			os.Remove(made[i])
		}
		return nil, err
	}
	d.Close()

	t := &plainTree{
		dir:        opts.Dir,
		files:      opts.Files,
		byPath:     make(map[string]TreeFile, len(opts.Files)),
		handler:    opts.Handler,
		onRejected: opts.OnPlainRejected,
		last:       make(map[string][]byte, len(opts.Files)),
		done:       make(chan struct{}),
		created:    made,
	}
	dirs := []string{opts.Dir}
	seen := map[string]bool{opts.Dir: true}
	for _, f := range opts.Files {
		t.byPath[f.Path] = f
		d := filepath.Dir(filepath.Join(opts.Dir, f.Path))
		if !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	for _, d := range dirs {
		if err := t.mkdirAll(d); err != nil {
			t.removeAll()
			return nil, err
		}
	}

	t.mu.Lock()
	for _, f := range t.files {
		if err := t.writeLocked(f, t.handler.Read(f.Path)); err != nil {
			t.mu.Unlock()
			t.removeAll()
			return nil, err
		}
	}
	t.mu.Unlock()

	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.removeAll()
		return nil, fmt.Errorf("tree: %w", err)
	}
	for _, d := range dirs {
		if err := w.Add(d); err != nil {
			w.Close()
			t.removeAll()
			return nil, fmt.Errorf("tree: watch %s: %w", d, err)
		}
	}
	t.watcher = w
	t.wg.Add(1)
	go t.loop()
	return t, nil
}

func (t *plainTree) Backend() Backend { return BackendPlain }
func (t *plainTree) Dir() string      { return t.dir }

// Changed rewrites every file whose handler content differs from what the
// tree last wrote. A file holding a user write the watcher has not processed
// yet is left alone; the watcher rewrites it once the handler has judged it.
// It returns the first write error.
func (t *plainTree) Changed() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	var first error
	for _, f := range t.files {
		want := t.handler.Read(f.Path)
		last := t.last[f.Path]
		if bytes.Equal(want, last) {
			continue
		}
		disk, err := os.ReadFile(filepath.Join(t.dir, f.Path))
		if err == nil && !bytes.Equal(disk, last) {
			continue // unprocessed user write
		}
		if err := t.writeLocked(f, want); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Close stops the watcher, waits for its goroutine (so the handler is not
// called afterwards), and removes the files and the directories ServeTree
// created (directories only if empty). Then it closes the FUSE trees this
// one replaced (TreeOptions.Previous).
func (t *plainTree) Close() error {
	t.closeOnce.Do(func() {
		close(t.done)
		t.closeErr = t.watcher.Close()
		t.wg.Wait()
		t.mu.Lock()
		t.closed = true
		t.mu.Unlock()
		t.removeAll()
		t.replaced.closeAll()
	})
	return t.closeErr
}

// mkdirAll creates d and its missing parents with mode 0755, remembering
// which it created.
func (t *plainTree) mkdirAll(d string) error {
	var missing []string
	for cur := d; ; cur = filepath.Dir(cur) {
		if _, err := os.Stat(cur); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("tree: %w", err)
		}
		missing = append(missing, cur)
		if filepath.Dir(cur) == cur {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("tree: %w", err)
		}
		t.created = append(t.created, missing[i])
	}
	return nil
}

// removeAll removes the tree's files and, deepest first, the empty
// directories it created.
func (t *plainTree) removeAll() {
	for _, f := range t.files {
		os.Remove(filepath.Join(t.dir, f.Path))
	}
	for i := len(t.created) - 1; i >= 0; i-- {
		os.Remove(t.created[i])
	}
}

// writeLocked replaces f's content atomically (temporary file in the same
// directory, chmod, rename) and records it as last written. t.mu is held.
func (t *plainTree) writeLocked(f TreeFile, data []byte) error {
	full := filepath.Join(t.dir, f.Path)
	tmp, err := os.CreateTemp(filepath.Dir(full), "."+filepath.Base(full)+".tmp*")
	if err != nil {
		return fmt.Errorf("tree: %w", err)
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(f.Mode.Perm())
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), full)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("tree: write %s: %w", full, err)
	}
	t.last[f.Path] = append([]byte(nil), data...)
	return nil
}

// loop debounces watcher events and scans the files.
func (t *plainTree) loop() {
	defer t.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	touched := make(map[string]bool)
	emptySince := make(map[string]time.Time)
	for {
		select {
		case <-t.done:
			return
		case ev, ok := <-t.watcher.Events:
			if !ok {
				return
			}
			rel, err := filepath.Rel(t.dir, ev.Name)
			if err != nil {
				continue
			}
			if _, ours := t.byPath[rel]; !ours || ev.Op == fsnotify.Chmod {
				continue // temporary files, strangers, chmod
			}
			if ev.Has(fsnotify.Write) {
				touched[rel] = true
			}
			timer.Reset(plainDebounce)
		case _, ok := <-t.watcher.Errors:
			if !ok {
				return
			}
			timer.Reset(plainDebounce) // e.g. queue overflow: rescan everything
		case <-timer.C:
			if again := t.scan(touched, emptySince); again > 0 {
				timer.Reset(again)
			}
		}
	}
}

// scan finds the user writes, hands them to the handler, and reverts or
// refreshes the files. It returns how soon to scan again (0: no need).
func (t *plainTree) scan(touched map[string]bool, emptySince map[string]time.Time) time.Duration {
	type userWrite struct {
		f    TreeFile
		data []byte
	}
	var writes []userWrite
	var again time.Duration
	now := time.Now()

	t.mu.Lock()
	for _, f := range t.files {
		data, err := os.ReadFile(filepath.Join(t.dir, f.Path))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) { // removed: put it back
				t.writeLocked(f, t.handler.Read(f.Path))
			}
			delete(touched, f.Path)
			delete(emptySince, f.Path)
			continue
		}
		if !touched[f.Path] && bytes.Equal(data, t.last[f.Path]) {
			delete(emptySince, f.Path)
			continue
		}
		if len(data) == 0 {
			since, ok := emptySince[f.Path]
			if !ok {
				since = now
				emptySince[f.Path] = now
			}
			if wait := emptyGrace - now.Sub(since); wait > 0 {
				if again == 0 || wait < again {
					again = wait
				}
				continue
			}
		}
		delete(touched, f.Path)
		delete(emptySince, f.Path)
		writes = append(writes, userWrite{f, data})
	}
	t.mu.Unlock()

	changed := false
	for _, w := range writes {
		var err error
		switch {
		case len(w.data) > maxAttrWrite:
			err = syscall.EINVAL
		case w.f.Mode&0o222 == 0:
			err = syscall.EACCES
		default:
			err = t.handler.Write(w.f.Path, w.data)
		}
		if err == nil {
			changed = true
		}
		// Replace the user's bytes by what the handler now shows: the old
		// value after a rejection, the normalised new one after success.
		// Skip it if the user has written again meanwhile; that write has
		// its own event.
		t.mu.Lock()
		full := filepath.Join(t.dir, w.f.Path)
		if disk, rerr := os.ReadFile(full); rerr != nil || bytes.Equal(disk, w.data) {
			t.writeLocked(w.f, t.handler.Read(w.f.Path))
		}
		t.mu.Unlock()
		if err != nil && t.onRejected != nil {
			t.onRejected(w.f.Path, w.data, err)
		}
	}
	if changed {
		t.Changed()
	}
	return again
}
