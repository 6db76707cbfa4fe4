package testutil

import (
	"sync"

	"github.com/godbus/dbus/v5"
)

// FakeUnitFiles is as much of the system manager as a watch of installed
// unit files asks (the power-profiles units watch): Subscribe, and
// GetUnitFileState from a table of unit name → state ("enabled",
// "disabled", "masked", ...), answering
// org.freedesktop.DBus.Error.FileNotFound for a unit not in it, as systemd
// does for a unit without a file. Export serves it on a connection.
type FakeUnitFiles struct {
	mu    sync.Mutex
	files map[string]string
}

// NewFakeUnitFiles makes one answering from files (nil: no unit file).
func NewFakeUnitFiles(files map[string]string) *FakeUnitFiles {
	return &FakeUnitFiles{files: files}
}

// Set replaces the table it answers from.
func (f *FakeUnitFiles) Set(files map[string]string) {
	f.mu.Lock()
	f.files = files
	f.mu.Unlock()
}

// Export serves it on conn as the manager's object (SystemdPath,
// SystemdManager); the caller owns SystemdName on conn's bus, or not.
func (f *FakeUnitFiles) Export(conn *dbus.Conn) error {
	return conn.Export(unitFilesObj{f}, SystemdPath, SystemdManager)
}

// unitFilesObj is the exported object: its methods alone are the
// manager's (Set is not).
type unitFilesObj struct{ f *FakeUnitFiles }

func (o unitFilesObj) Subscribe() *dbus.Error { return nil }

func (o unitFilesObj) GetUnitFileState(name string) (string, *dbus.Error) {
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	if st, ok := o.f.files[name]; ok {
		return st, nil
	}
	return "", dbus.NewError("org.freedesktop.DBus.Error.FileNotFound", []any{"No such file or directory"})
}
