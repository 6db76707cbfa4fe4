package acpi

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/fsnotify/fsnotify"
)

// startWatcher watches with fsnotify (inotify), always the directories that
// hold the boost files, and with full set also <root>/class/power_supply,
// every supply directory in it and <root>/devices/system/cpu (for its
// "online" file). Directories, not files, are watched, because editors and
// test helpers replace files by rename. Chmod events are ignored. With full
// unset and no boost directory, nothing is opened. Open failures are logged
// once; the interval remains.
//
// With full set the chain <root>, <root>/class, <root>/class/power_supply is
// watched as far as it exists, so that class/ or class/power_supply removed
// (or renamed away) and made again, or made after start, is followed: the
// kernel drops a removed directory's watch, and on any change to a
// directory of the chain the chain and every supply directory are watched
// again (syncSupplies) before a re-read is requested, so anything written
// before the new watches took hold is seen by that re-read.
func (m *Monitor) startWatcher(ctx context.Context, wg *sync.WaitGroup, full bool) {
	fsys := m.cfg.FS
	boostDirs := map[string]bool{}
	boostFiles := map[string]bool{}
	for _, f := range fsys.BoostFiles() {
		if isDir(filepath.Dir(f)) {
			boostDirs[filepath.Dir(f)] = true
			boostFiles[f] = true
		}
	}
	if !full && len(boostDirs) == 0 {
		return
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		m.log.WithError(err).Warn("fsnotify unavailable; falling back to periodic re-reads")
		return
	}
	classDir := fsys.Path("class", "power_supply")
	cpuDir := fsys.Path("devices", "system", "cpu")
	dw := &dirWatch{
		m: m, w: w, full: full, boostFiles: boostFiles,
		classDir:  classDir,
		cpuOnline: filepath.Join(cpuDir, "online"),
		chain:     []string{fsys.Root(), fsys.Path("class"), classDir},
	}
	dw.inChain = map[string]bool{dw.chain[1]: true, dw.chain[2]: true}
	for d := range boostDirs {
		dw.add(d)
	}
	if full {
		dw.syncSupplies()
		if isDir(cpuDir) {
			dw.add(cpuDir)
		}
		m.events.Add(1) // an event source for power supplies
	}
	// Errors are drained by a goroutine of their own: fsnotify's reader
	// sends some errors while holding the lock that Add takes (an
	// IN_MOVE_SELF whose watch the kernel already dropped, when a watched
	// directory is moved away and deleted), so a single goroutine that
	// both reads Errors and calls Add (syncSupplies) could deadlock.
	wg.Add(1)
	go func() {
		defer wg.Done()
		dw.drainErrors(ctx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer w.Close()
		dw.readEvents(ctx)
	}()
}

// dirWatch is startWatcher's watcher and the paths that give its events
// their meaning.
type dirWatch struct {
	m          *Monitor
	w          *fsnotify.Watcher
	full       bool            // watching supplies and CPUs, not only boost
	boostFiles map[string]bool // the boost files (paths) whose directory exists
	classDir   string          // <root>/class/power_supply
	cpuOnline  string          // <root>/devices/system/cpu/online
	// chain: the directories from the root down to class/power_supply,
	// each watched for its child of the chain coming and going; inChain
	// holds all but the root.
	chain   []string
	inChain map[string]bool
}

// add watches dir. A directory that does not exist is skipped quietly;
// other failures are logged.
func (dw *dirWatch) add(dir string) {
	if err := dw.w.Add(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		dw.m.log.WithError(err).WithField("dir", dir).Warn("cannot watch directory; changes there are seen only by periodic re-reads")
	}
}

// syncSupplies watches what exists of the chain and every supply
// directory; adding a directory already watched changes nothing, so it
// is safe to call on every change to the chain.
func (dw *dirWatch) syncSupplies() {
	for _, d := range dw.chain {
		if !isDir(d) {
			return
		}
		dw.add(d)
	}
	entries, _ := os.ReadDir(dw.classDir)
	for _, e := range entries {
		if p := filepath.Join(dw.classDir, e.Name()); isDir(p) {
			dw.add(p)
		}
	}
}

// drainErrors reads the watcher's errors until ctx is done or they are
// closed. An overflow means lost events: re-read, and check the CPUs.
func (dw *dirWatch) drainErrors(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case err, ok := <-dw.w.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				dw.m.hint(TriggerFsnotify)
				signal(dw.m.hotplug)
			}
		}
	}
}

// readEvents turns the watcher's events into hints until ctx is done or
// they are closed.
func (dw *dirWatch) readEvents(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-dw.w.Events:
			if !ok {
				return
			}
			dw.event(ev)
		}
	}
}

// event handles one event: a boost file re-reads; with full set, the
// CPUs' online file signals CPUHotplug, a change to the chain re-syncs
// the watches and re-reads, and a supply appearing, going away or
// changing re-reads. Chmod events are ignored.
func (dw *dirWatch) event(ev fsnotify.Event) {
	m := dw.m
	if ev.Op == fsnotify.Chmod {
		return
	}
	dir := filepath.Dir(ev.Name)
	switch {
	case dw.boostFiles[ev.Name]:
		m.hint(TriggerFsnotify)
	case !dw.full:
	case ev.Name == dw.cpuOnline:
		signal(m.hotplug)
	case dw.inChain[ev.Name]:
		// class/ or class/power_supply appeared, went away or was
		// renamed: watch what is there now, then re-read.
		dw.syncSupplies()
		m.hint(TriggerFsnotify)
	case dir == dw.classDir:
		// A supply appeared or went away.
		if ev.Has(fsnotify.Create) && isDir(ev.Name) {
			dw.add(ev.Name)
		}
		m.hint(TriggerFsnotify)
	case filepath.Dir(dir) == dw.classDir:
		m.hint(TriggerFsnotify)
	}
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
