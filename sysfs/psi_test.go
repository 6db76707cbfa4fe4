package sysfs

import (
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// TestPressureTriggerRejects: a plain file (a mock tree) is not PSI, and
// parameters are checked before anything is opened.
func TestPressureTriggerRejects(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cpu.pressure")
	if err := os.WriteFile(p, []byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenPressureTrigger(p, 100*time.Millisecond, 2*time.Second); !errors.Is(err, ErrNoPSI) {
		t.Fatalf("plain file: err %v, want ErrNoPSI", err)
	}
	if _, err := OpenPressureTrigger(filepath.Join(t.TempDir(), "absent"), 100*time.Millisecond, 2*time.Second); !errors.Is(err, ErrNoPSI) {
		t.Fatalf("absent file: err %v, want ErrNoPSI", err)
	}
	for _, c := range [][2]time.Duration{{0, time.Second}, {3 * time.Second, 2 * time.Second}} {
		if _, err := OpenPressureTrigger("/proc/pressure/cpu", c[0], c[1]); err == nil {
			t.Fatalf("stall %v window %v accepted", c[0], c[1])
		}
	}
}

// openCPUTrigger arms a trigger on the machine's /proc/pressure/cpu: 100
// ms of stall in a 2 s window. It skips t on a kernel without PSI and
// fails it on any other error.
func openCPUTrigger(t *testing.T) *PressureTrigger {
	t.Helper()
	const path = "/proc/pressure/cpu"
	tr, err := OpenPressureTrigger(path, 100*time.Millisecond, 2*time.Second)
	if errors.Is(err, ErrNoPSI) {
		t.Skipf("this kernel has no PSI at %s: %v", path, err)
	}
	if err != nil {
		t.Fatalf("OpenPressureTrigger: %v", err)
	}
	return tr
}

// TestPressureTriggerReal arms a trigger on the machine's
// /proc/pressure/cpu and makes CPU pressure: more busy processes than CPUs
// for a few seconds. The trigger must fire; Close must end it.
func TestPressureTriggerReal(t *testing.T) {
	tr := openCPUTrigger(t)
	defer tr.Close()
	// Drain a signal that other load on the machine may already have caused.
	select {
	case <-tr.C():
	default:
	}
	n := 3 * numCPU()
	var hogs []*exec.Cmd
	for i := 0; i < n; i++ {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		hogs = append(hogs, c)
	}
	defer func() {
		for _, c := range hogs {
			c.Process.Kill()
			c.Wait()
		}
	}()
	select {
	case <-tr.C():
	case <-time.After(20 * time.Second):
		t.Fatalf("no trigger after 20s with %d busy processes", n)
	}
	tr.Close()
	select {
	case <-tr.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if err := tr.Err(); err != nil {
		t.Fatalf("Err after Close: %v", err)
	}
	tr.Close() // twice is fine
}

func numCPU() int {
	return runtime.NumCPU()
}

func TestParseCPUPressure(t *testing.T) {
	if v, err := ParseCPUPressure("some avg10=12.50 avg60=1.00 avg300=0.00 total=123\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"); err != nil || v != (Pressure{Avg10: 12.5, Total: 123 * time.Microsecond}) {
		t.Fatalf("ParseCPUPressure = %v, %v", v, err)
	}
	if v, err := ParseCPUPressure("some avg10=0.50 avg60=0.00 avg300=0.00\n"); err != nil || v != (Pressure{Avg10: 0.5}) {
		t.Fatalf("ParseCPUPressure without total = %v, %v; want avg10 0.5, total 0", v, err)
	}
	for _, bad := range []string{"bogus", "some total=5", "some avg10=1.00 total=-1", "some avg10=1.00 total=x", "some avg10=1.00 total=9223372036854775807"} {
		if _, err := ParseCPUPressure(bad); !errors.Is(err, ErrPSIFormat) {
			t.Errorf("ParseCPUPressure(%q) err = %v, want ErrPSIFormat", bad, err)
		}
	}
}

// FuzzParseCPUPressure: the cgroup v2 cpu.pressure parser never panics
// and never returns a negative or NaN percentage or a negative total.
func FuzzParseCPUPressure(f *testing.F) {
	for _, s := range []string{
		"some avg10=1.23 avg60=0.50 avg300=0.10 total=12345\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"some avg10=-1", "some avg10=NaN", "some avg10=1e400", "some avg10=Inf", "some", "", "full avg10=5",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseCPUPressure(s)
		if err == nil && (v.Avg10 < 0 || math.IsNaN(v.Avg10) || math.IsInf(v.Avg10, 0) || v.Total < 0) {
			t.Fatalf("ParseCPUPressure(%q) = %v", s, v)
		}
	})
}

// TestPressureTriggerPauseResume: a paused trigger is polled again after
// Resume — busy processes then signal on C — and one paused again closes
// at once (the poll goroutine ends) without Resume.
func TestPressureTriggerPauseResume(t *testing.T) {
	tr := openCPUTrigger(t)
	defer tr.Close()
	tr.Pause()
	tr.Pause()
	tr.Resume()
	tr.Resume()
	select {
	case <-tr.C():
	default:
	}
	n := 3 * numCPU()
	for i := 0; i < n; i++ {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { c.Process.Kill(); c.Wait() }()
	}
	select {
	case <-tr.C():
	case <-time.After(20 * time.Second):
		t.Fatalf("no trigger after 20s with %d busy processes, after a pause and a resume", n)
	}
	tr.Pause()
	tr.Close()
	select {
	case <-tr.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if err := tr.Err(); err != nil {
		t.Fatalf("Err after Close: %v", err)
	}
}
