package testutil

import (
	"errors"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// TestConnect: a connection to the bus, registered, closed at the
// subtest's cleanup; a bus that is not there fails the test.
func TestConnect(t *testing.T) {
	b := StartBus(t, BusOptions{})
	var c *dbus.Conn
	t.Run("connected", func(t *testing.T) {
		c = Connect(t, b.Addr)
		if !c.Connected() || len(c.Names()) == 0 || !strings.HasPrefix(c.Names()[0], ":") {
			t.Fatalf("connected %v, names %v; want a unique name", c.Connected(), c.Names())
		}
	})
	if c.Connected() {
		t.Error("the connection is open after the cleanup")
	}
	f := &fakeT{TB: t}
	f.catch(func() { Connect(f, "unix:path="+t.TempDir()+"/none") })
	if !strings.Contains(f.fatal, "no such file or directory") {
		t.Errorf("Connect to no bus: %q, want its dial error", f.fatal)
	}
}

// TestFakeUnitFiles: GetUnitFileState answers from SetUnitFiles's
// table, FileNotFound for a unit not in it; Subscribe answers;
// SetUnitFiles is not a method on the bus.
func TestFakeUnitFiles(t *testing.T) {
	b := StartBus(t, BusOptions{})
	f := NewFakeManager(t)
	f.SetUnitFiles(map[string]string{"a.service": "enabled"})
	srv, cli := f.ServeBus(b.Addr), Connect(t, b.Addr)
	obj := cli.Object(srv.Names()[0], SystemdPath)
	state := func(name string) (string, error) {
		var st string
		err := obj.Call(SystemdManager+".GetUnitFileState", 0, name).Store(&st)
		return st, err
	}
	if st, err := state("a.service"); st != "enabled" || err != nil {
		t.Errorf("a.service: %q, %v; want enabled", st, err)
	}
	var de dbus.Error
	if _, err := state("b.service"); !errors.As(err, &de) || de.Name != "org.freedesktop.DBus.Error.FileNotFound" {
		t.Errorf("b.service: %v; want FileNotFound", err)
	}
	f.SetUnitFiles(map[string]string{"b.service": "masked"})
	if st, err := state("b.service"); st != "masked" || err != nil {
		t.Errorf("b.service after Set: %q, %v; want masked", st, err)
	}
	if err := obj.Call(SystemdManager+".Subscribe", 0).Err; err != nil {
		t.Errorf("Subscribe: %v", err)
	}
	if err := obj.Call(SystemdManager+".SetUnitFiles", 0, map[string]string{}).Err; err == nil {
		t.Error("SetUnitFiles answered on the bus")
	}
}

// TestGoroutines: the caller's stack comes first, and a goroutine
// blocked elsewhere is listed with its own.
func TestGoroutines(t *testing.T) {
	stop := make(chan struct{})
	started := make(chan struct{})
	go func() { close(started); parked(stop) }()
	<-started
	defer close(stop)
	var all []string
	Eventually(t, "the parked goroutine listed", func() (bool, string) {
		all = Goroutines()
		return strings.Contains(strings.Join(all, "\n\n"), "testutil.parked("), ""
	})
	if !strings.HasPrefix(all[0], "goroutine ") || !strings.Contains(all[0], "testutil.TestGoroutines") {
		t.Errorf("first stack is not the caller's:\n%s", all[0])
	}
	for _, g := range all {
		if !strings.HasPrefix(g, "goroutine ") {
			t.Errorf("a stack that is not one goroutine's:\n%s", g)
		}
	}
}

func parked(stop chan struct{}) { <-stop }

// TestEntries: an entry as one line with its fields sorted; the entries
// at a level, containing a text, holding fields; their description.
func TestEntries(t *testing.T) {
	log, h := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	log.WithFields(logrus.Fields{"z": 1, "a": "x y"}).Warn("first")
	log.WithField("component", "dbus").WithError(errors.New("no bus")).Warn("second try")
	log.WithField("component", "acpi").Warn("second try")
	log.Debug("second")
	if got, want := EntryLine(h.AllEntries()[0]), "first a=x y z=1"; got != want {
		t.Errorf("EntryLine = %q, want %q", got, want)
	}
	for _, c := range []struct {
		lvl    logrus.Level
		msg    string
		fields logrus.Fields
		want   string
	}{
		{logrus.WarnLevel, "", nil, `warning "first" <nil>; warning "second try" no bus; warning "second try" <nil>`},
		{logrus.WarnLevel, "second", nil, `warning "second try" no bus; warning "second try" <nil>`},
		{logrus.WarnLevel, "second", logrus.Fields{"component": "dbus"}, `warning "second try" no bus`},
		{logrus.DebugLevel, "second", nil, `debug "second" <nil>`},
		{logrus.InfoLevel, "", nil, ``},
	} {
		if got := DescribeEntries(EntriesAt(h, c.lvl, c.msg, c.fields)); got != c.want {
			t.Errorf("EntriesAt(%v, %q, %v) = %s, want %s", c.lvl, c.msg, c.fields, got, c.want)
		}
	}
}
