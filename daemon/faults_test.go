package daemon

// Faults that need a hand inside the event loop: the watchdog
// stops when the loop stalls, and a workload removed between the plan and
// the cpuset write. d.do runs a function on the loop, which is both the
// stall and the exact moment between reading the workloads and writing.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// TestWatchdogStopsWhenLoopStalls: WATCHDOG=1 comes from the event loop,
// so while the loop is blocked no ping is sent (systemd would then kill and
// restart the daemon), and pings resume when it runs again.
func TestWatchdogStopsWhenLoopStalls(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pings := make(chan struct{}, 1000)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if strings.Contains(string(buf[:n]), "WATCHDOG=1") {
				pings <- struct{}{}
			}
		}
	}()
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "100000") // ping every 50 ms
	t.Setenv("WATCHDOG_PID", fmt.Sprint(os.Getpid()))
	m := newMockLaptop(t)
	d, cancel, done := m.start(t)
	waitPing := func(what string) {
		t.Helper()
		select {
		case <-pings:
		case <-time.After(10 * time.Second):
			t.Fatalf("no WATCHDOG=1 %s", what)
		}
	}
	waitPing("while the loop runs")

	entered, release := make(chan struct{}), make(chan struct{})
	go d.do(context.Background(), func() error {
		close(entered)
		<-release
		return nil
	})
	<-entered
	// A ping sent just before the stall may still be in the socket.
	time.Sleep(20 * time.Millisecond)
	for len(pings) > 0 {
		<-pings
	}
	time.Sleep(500 * time.Millisecond) // ten intervals
	if n := len(pings); n != 0 {
		t.Errorf("%d WATCHDOG=1 pings while the event loop was blocked, want none", n)
	}
	close(release)
	waitPing("after the loop runs again")
	cancel()
	<-done
}

// TestWatchdogBadIntervalLogged: a WATCHDOG_USEC that cannot be read
// leaves the daemon without pings; it runs on, and says so at start-up with
// go-systemd's reason, at error level, instead of taking it for "no
// watchdog".
func TestWatchdogBadIntervalLogged(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	t.Setenv("WATCHDOG_USEC", "30s")
	t.Setenv("WATCHDOG_PID", "")
	log := testutil.Logger(t)
	hook := logtest.NewLocal(log)
	m := newMockLaptop(t)
	d := m.startWith(t, func(c *Config) { c.Log = log })
	<-d.Ready()
	var got []*logrus.Entry
	testutil.Eventually(t, "the watchdog error logged", func() (bool, string) {
		got = nil
		for _, e := range hook.AllEntries() {
			if strings.Contains(e.Message, "no watchdog pings") {
				got = append(got, e)
			}
		}
		return len(got) > 0, fmt.Sprint(len(hook.AllEntries()), " entries")
	})
	if len(got) != 1 || got[0].Level != logrus.ErrorLevel {
		t.Fatalf("watchdog log entries %v, want one at error level", got)
	}
	err, _ := got[0].Data[logrus.ErrorKey].(error)
	if want := `systemd watchdog: error converting WATCHDOG_USEC: strconv.Atoi: parsing "30s": invalid syntax`; err == nil || err.Error() != want {
		t.Errorf("logged error %v, want %q", err, want)
	}
}

// TestDaemonChoiceNotPersisted: when state.json cannot be written (the
// state directory is made immutable, which stops root too), a new choice
// is refused with the error and nothing changes: the policy, the cpusets
// and state.json stay as they were.
func TestDaemonChoiceNotPersisted(t *testing.T) {
	if _, err := exec.LookPath("chattr"); err != nil {
		t.Skip("needs chattr (e2fsprogs) to make the state directory immutable")
	}
	m := newMockLaptop(t)
	d := m.startWith(t, nil)
	before := d.Snapshot()
	saved := testutil.Read(t, filepath.Join(m.state, statefile.StateFile))
	if out, err := exec.Command("chattr", "+i", m.state).CombinedOutput(); err != nil {
		t.Skipf("cannot make %s immutable on this file system: %v %s", m.state, err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", m.state).Run() })
	err := d.do(context.Background(), func() error {
		return d.setKnob(d.dec.knob.WithCurrentPolicy(policy.Powersaving), "test")
	})
	if err == nil {
		t.Fatal("setKnob succeeded with an immutable state directory")
	}
	after := d.Snapshot()
	if after.Policy != before.Policy || after.Knob != before.Knob || !after.LastChange.Equal(before.LastChange) {
		t.Errorf("policy %s knob %+v last change %v after the failure, want %s %+v %v", after.Policy, after.Knob, after.LastChange, before.Policy, before.Knob, before.LastChange)
	}
	for i, w := range after.Workloads {
		if cur := strings.TrimSpace(testutil.Read(t, filepath.Join(w.Path, "cpuset.cpus"))); w.CPUs != before.Workloads[i].CPUs || cur != before.Workloads[i].CPUs {
			t.Errorf("%s: cpuset %s (file %s) after the failure, want %s", w.Name, w.CPUs, cur, before.Workloads[i].CPUs)
		}
	}
	if got := testutil.Read(t, filepath.Join(m.state, statefile.StateFile)); got != saved {
		t.Errorf("state.json changed:\n%s\nwant\n%s", got, saved)
	}
}

// TestSaveFailureLoggedOnce: while state.json cannot be written (the state
// directory is immutable), the daemon says so once, at error level with
// the cause, however many times the placement tries again (at every event
// and sample while a record is unsaved); and says once that it works again
// when the directory is writable.
func TestSaveFailureLoggedOnce(t *testing.T) {
	if _, err := exec.LookPath("chattr"); err != nil {
		t.Skip("needs chattr (e2fsprogs) to make the state directory immutable")
	}
	m := newMockLaptop(t)
	hook := new(msgLog)
	d := m.startWith(t, func(c *Config) { c.Log.(*logrus.Logger).AddHook(hook) })
	if out, err := exec.Command("chattr", "+i", m.state).CombinedOutput(); err != nil {
		t.Skipf("cannot make %s immutable on this file system: %v %s", m.state, err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", m.state).Run() })
	// b's cpuset changed by someone: its record must be saved (released).
	testutil.Put(t, filepath.Join(m.managed, "b", "cpuset.cpus"), "1")
	testutil.Eventually(t, "a failed save", func() (bool, string) { return hook.count("cannot save state.json;") > 0, "" })
	// What every event and sample does while the record is unsaved.
	for i := 0; i < 20; i++ {
		d.do(context.Background(), func() error { d.place.Flush(); return nil })
	}
	if n := hook.count("cannot save state.json;"); n != 1 {
		t.Fatalf("the save failure was logged %d times in 21 attempts, want once", n)
	}
	if e := hook.mentions("cannot save state.json;"); !strings.Contains(e, "operation not permitted") {
		t.Fatalf("the failure's entry %q does not give the cause", e)
	}
	if out, err := exec.Command("chattr", "-i", m.state).CombinedOutput(); err != nil {
		t.Fatalf("chattr -i: %v %s", err, out)
	}
	testutil.Eventually(t, "state.json saved again", func() (bool, string) {
		return hook.count("state.json saved again") == 1, ""
	})
}

// TestLoopPanicRestores: a panic on the event loop (a bug) is logged with
// its stack, every workload gets its original back as at a stop, and Run
// returns an error (the process exits non-zero, systemd restarts it),
// instead of dying with the workloads packed.
func TestLoopPanicRestores(t *testing.T) {
	m := newMockLaptop(t)
	ps := filepath.Join(m.sys, "class/power_supply")
	testutil.Put(t, ps+"/AC/online", "0")
	testutil.Put(t, ps+"/BAT0/status", "Discharging")
	hook := new(msgLog)
	d, _, done := m.startCfg(t, func(c *Config) { c.Log.(*logrus.Logger).AddHook(hook) })
	b := filepath.Join(m.managed, "b", "cpuset.cpus")
	testutil.Eventually(t, "b packed on battery", func() (bool, string) {
		got := testutil.ReadTrim(t, b)
		return got != "2-3" && !strings.ContainsAny(got, ",-"), got
	})
	if err := d.do(context.Background(), func() error { panic("injected fault") }); !errors.Is(err, ErrStopped) {
		t.Fatalf("the call that panicked returned %v, want ErrStopped", err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "internal error in the event loop: injected fault") {
			t.Fatalf("Run returned %v, want the internal error", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return after a panic on the loop")
	}
	if got := testutil.ReadTrim(t, b); got != "2-3" {
		t.Fatalf("b = %s after the panic, want its original 2-3 back", got)
	}
	if e := hook.mentions("internal error in the event loop: restoring every workload and exiting"); !strings.Contains(e, "panic=injected fault") || !strings.Contains(e, "stack=") {
		t.Fatalf("the panic's log entry: %q, want it with the panic and its stack", e)
	}
}
