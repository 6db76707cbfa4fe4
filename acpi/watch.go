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
	classDir := fsys.Path("class", "power_supply")
	cpuDir := fsys.Path("devices", "system", "cpu")
	if !full && len(boostDirs) == 0 {
		return
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		m.log.WithError(err).Warn("fsnotify unavailable; falling back to periodic re-reads")
		return
	}
	add := func(dir string) {
		if err := w.Add(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			m.log.WithError(err).WithField("dir", dir).Warn("cannot watch directory; changes there are seen only by periodic re-reads")
		}
	}
	for d := range boostDirs {
		add(d)
	}
	// chain: the directories from the root down to class/power_supply,
	// each watched for its child of the chain coming and going.
	chain := []string{fsys.Root(), fsys.Path("class"), classDir}
	inChain := map[string]bool{chain[1]: true, chain[2]: true}
	// syncSupplies watches what exists of the chain and every supply
	// directory; adding a directory already watched changes nothing, so
	// it is safe to call on every change to the chain.
	syncSupplies := func() {
		for _, d := range chain {
			if !isDir(d) {
				return
			}
			add(d)
		}
		entries, _ := os.ReadDir(classDir)
		for _, e := range entries {
			if p := filepath.Join(classDir, e.Name()); isDir(p) {
				add(p)
			}
		}
	}
	if full {
		syncSupplies()
		if isDir(cpuDir) {
			add(cpuDir)
		}
	}
	cpuOnline := filepath.Join(cpuDir, "online")

	if full {
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
		for {
			select {
			case <-ctx.Done():
				return
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				// An overflow means lost events: re-read.
				if errors.Is(err, fsnotify.ErrEventOverflow) {
					m.hint(TriggerFsnotify)
					signal(m.hotplug)
				}
			}
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if ev.Op == fsnotify.Chmod {
					continue
				}
				dir := filepath.Dir(ev.Name)
				switch {
				case boostFiles[ev.Name]:
					m.hint(TriggerFsnotify)
				case !full:
				case ev.Name == cpuOnline:
					signal(m.hotplug)
				case inChain[ev.Name]:
					// class/ or class/power_supply appeared, went away or
					// was renamed: watch what is there now, then re-read.
					syncSupplies()
					m.hint(TriggerFsnotify)
				case dir == classDir:
					// A supply appeared or went away.
					if ev.Has(fsnotify.Create) && isDir(ev.Name) {
						add(ev.Name)
					}
					m.hint(TriggerFsnotify)
				case filepath.Dir(dir) == classDir:
					m.hint(TriggerFsnotify)
				}
			}
		}
	}()
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
