package acpi

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// Reasons of the states the tests below go through.
const (
	reasonACOnline  = "AC: Mains supply AC reports online=1 (rule 2)"
	reasonACOffline = "unknown: no system supply is online and no system battery is charging or discharging (rule 4: without evidence either way the source is unknown, treated as AC)"
	reasonNoSupply  = "unknown: no power supplies (rule 4: without evidence either way the source is unknown, treated as AC)"
)

// stageSupply builds a Mains supply directory "AC" with the given online
// value under <root>/.stage/<tag>, outside the watched tree, and returns
// its path; renaming it into place makes it appear complete in one step,
// so no half-written supply is ever read.
func stageSupply(t *testing.T, root, tag, online string) string {
	t.Helper()
	dir := filepath.Join(root, ".stage", tag, "AC")
	testutil.WriteFile(t, filepath.Join(dir, "type"), "Mains\n")
	testutil.WriteFile(t, filepath.Join(dir, "online"), online+"\n")
	return dir
}

// TestMonitorFsnotifyRecreatedDirs: on a mock root, a
// class/power_supply directory, class/ itself or a supply's directory that
// is removed (or renamed away) and made again is watched again, and its
// appearance causes a re-read. Each case starts on a tree with one Mains
// supply AC online, takes the directory away (state: no power supplies),
// brings it back holding AC with online=0 (state: offline — seen only if
// the new directory is watched or re-read), then writes online=1 into the
// new AC directory (state: AC — seen only if the new supply directory is
// watched). Real inotify on real directories.
func TestMonitorFsnotifyRecreatedDirs(t *testing.T) {
	for _, tc := range []struct {
		name string
		// remove takes the directory away; restore brings it back with the
		// staged supply directory ac in it.
		remove  func(t *testing.T, root string)
		restore func(t *testing.T, root, ac string)
	}{
		{
			name:   "class/power_supply removed and made again",
			remove: func(t *testing.T, root string) { removeAll(t, filepath.Join(root, "class/power_supply")) },
			restore: func(t *testing.T, root, ac string) {
				mkdir(t, filepath.Join(root, "class/power_supply"))
				rename(t, ac, filepath.Join(root, "class/power_supply/AC"))
			},
		},
		{
			name:   "class removed and made again",
			remove: func(t *testing.T, root string) { removeAll(t, filepath.Join(root, "class")) },
			restore: func(t *testing.T, root, ac string) {
				mkdir(t, filepath.Join(root, "class"))
				mkdir(t, filepath.Join(root, "class/power_supply"))
				rename(t, ac, filepath.Join(root, "class/power_supply/AC"))
			},
		},
		{
			name: "class/power_supply renamed away and a new one renamed in",
			remove: func(t *testing.T, root string) {
				rename(t, filepath.Join(root, "class/power_supply"), filepath.Join(root, ".old_power_supply"))
			},
			restore: func(t *testing.T, root, ac string) {
				// The old directory, no longer in the tree, must not be
				// taken for the new one.
				removeAll(t, filepath.Join(root, ".old_power_supply"))
				rename(t, filepath.Dir(ac), filepath.Join(root, "class/power_supply"))
			},
		},
		{
			name:   "supply directory removed and made again",
			remove: func(t *testing.T, root string) { removeAll(t, filepath.Join(root, "class/power_supply/AC")) },
			restore: func(t *testing.T, root, ac string) {
				rename(t, ac, filepath.Join(root, "class/power_supply/AC"))
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			testutil.WriteFile(t, filepath.Join(root, "class/power_supply/AC/type"), "Mains\n")
			testutil.WriteFile(t, filepath.Join(root, "class/power_supply/AC/online"), "1\n")
			fsys := mustFS(t, root)
			m := NewMonitor(MonitorConfig{FS: fsys, Events: EventsFsnotify, Debounce: 10 * time.Millisecond, Settle: -1, Interval: -1, Log: testutil.Logger(t)})
			stop := runMonitor(t, m)
			defer stop()
			expect := func(step string, src Source, reason string) {
				t.Helper()
				st := recvState(t, m)
				if st.Power.Source != src || st.Power.Reason != reason || st.Trigger != TriggerFsnotify && step != "start" {
					t.Fatalf("%s: state %+v, want %s %q by %s", step, st, src, reason, TriggerFsnotify)
				}
			}
			expect("start", AC, reasonACOnline)
			ac := stageSupply(t, root, "new", "0")

			tc.remove(t, root)
			expect("removed", Unknown, reasonNoSupply)
			tc.restore(t, root, ac)
			expect("made again", Unknown, reasonACOffline)
			testutil.WriteFile(t, filepath.Join(root, "class/power_supply/AC/online"), "1\n")
			expect("online=1 in the new directory", AC, reasonACOnline)
			// Twice, so a watch added twice or left on the old directory
			// would show.
			removeAll(t, filepath.Join(root, "class/power_supply/AC"))
			expect("removed again", Unknown, reasonNoSupply)
			rename(t, stageSupply(t, root, "again", "1"), filepath.Join(root, "class/power_supply/AC"))
			expect("made again twice", AC, reasonACOnline)
		})
	}
}

// removeAll takes p out of the tree at once, as the kernel removes a
// power_supply directory with everything in it: it renames p out of the
// watched tree (into a fresh test directory on the same file system) and
// deletes it there. os.RemoveAll in place deletes file by file, and a read
// between two deletions would see a supply with a type but no online file,
// a state no kernel shows.
func removeAll(t *testing.T, p string) {
	t.Helper()
	gone := filepath.Join(t.TempDir(), "gone")
	if err := os.Rename(p, gone); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(gone); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func rename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}
