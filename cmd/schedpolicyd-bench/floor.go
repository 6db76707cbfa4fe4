package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// Floors: what the kernel and the Go runtime cost by
// themselves, measured in the same run as our rows.

// floorMode is how kernelSwitchFloor's loop is timed and what it does
// besides the writes.
type floorMode int

const (
	// floorBare: the writes alone, timed by the loop.
	floorBare floorMode = iota
	// floorWatched: timed until the bench's own inotify watch
	// (cpusetWatch) has seen every file written, as the daemon's
	// switches are timed. An inotify watch costs the writer: on this
	// 2-CPU machine it took the loop over 1,000 files from 34 to 46 ms
	// (p50) in a stand-alone check.
	floorWatched
	// floorRules: floorWatched plus what the project's rules require of
	// a switch besides the writes — the value about to be written
	// recorded for every cgroup in state.json (statefile.SaveState: write,
	// fsync, rename, directory fsync) before the first write, and each
	// file re-read (pread, parsed) just before it is written, so that a
	// value someone else wrote is kept (record before writing; restore
	// only what is still yours: docs/ARCHITECTURE.md's state table).
	floorRules
)

// kernelSwitchFloor times one switch's worth of cgroup v1 cpuset writes
// with nothing else (but what mode adds): n sibling cpusets
// (sched_load_balance cleared, as the daemon does on workloads), their
// cpuset.cpus pre-opened, each written with the other of two values in a
// tight loop; one observation per round of n writes, in ms.
func (e *env) kernelSwitchFloor(n, rounds int, mode floorMode) (stats, error) {
	w, err := e.makeWorkloads(n, 0)
	if err != nil {
		return nil, err
	}
	defer e.release(w)
	all := readCPUs(w.dir)
	vals := [][]byte{[]byte(fmt.Sprint(all.First())), []byte(all.String())}
	files := make([]*os.File, 0, n)
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, c := range w.children {
		writeFile(filepath.Join(c, "cpuset.sched_load_balance"), []byte("0"))
		f, err := os.OpenFile(filepath.Join(c, "cpuset.cpus"), os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	var cw *cpusetWatch
	if mode != floorBare {
		if cw, err = newCpusetWatch(w); err != nil {
			return nil, err
		}
		defer cw.close()
	}
	// floorRules' records, as the daemon keeps them for its workloads.
	var recs []statefile.Record
	stateDir := filepath.Join(e.tmp, fmt.Sprintf("floor-state-%d", n))
	if mode == floorRules {
		defer os.RemoveAll(stateDir)
		for _, c := range w.children {
			var st unix.Stat_t
			if err := unix.Stat(c, &st); err != nil {
				return nil, fmt.Errorf("floor record: %w", err)
			}
			recs = append(recs, statefile.Record{Path: c, Inode: st.Ino, Values: statefile.Values{Original: all.String()}, LoadBalanceCleared: true})
		}
	}
	var buf [4096]byte
	var s stats
	for r := 0; r < rounds+1; r++ {
		v := vals[r%2]
		var written <-chan waitResult
		if cw != nil {
			cw.drain()
			written = cw.waitAllAsync(5 * time.Second)
		}
		t0 := time.Now()
		if mode == floorRules {
			for i := range recs {
				recs[i].Applied, recs[i].Pending = string(vals[(r+1)%2]), string(v)
			}
			if err := statefile.SaveState(stateDir, statefile.State{Knob: policy.DefaultKnob(), Cgroups: recs}); err != nil {
				return nil, fmt.Errorf("floor state save: %w", err)
			}
		}
		for _, f := range files {
			if mode == floorRules {
				k, err := f.ReadAt(buf[:], 0)
				if err != nil && !errors.Is(err, io.EOF) {
					return nil, fmt.Errorf("floor re-read: %w", err)
				}
				if _, err := sysfs.ParseCPUList(strings.TrimSpace(string(buf[:k]))); err != nil {
					return nil, fmt.Errorf("floor re-read: %w", err)
				}
			}
			if _, err := f.WriteAt(v, 0); err != nil {
				return nil, fmt.Errorf("floor write: %w", err)
			}
		}
		end := time.Now()
		if written != nil {
			res := <-written
			if res.err != nil {
				return nil, fmt.Errorf("floor through the watch: %w", res.err)
			}
			end = res.at
		}
		if r > 0 { // the first round is a warm-up
			s = append(s, ms(end.Sub(t0)))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s, nil
}

// goFloorSrc is the Go runtime's idle floor: a static program that only
// waits for SIGTERM, as a daemon's main does.
const goFloorSrc = `package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM)
	<-c
}
`

// startGoFloor builds (with the go found on PATH or in /usr/local/go/bin)
// and starts the floor program.
func (e *env) startGoFloor() (*daemonProc, error) {
	dir := filepath.Join(e.tmp, "gofloor")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "gofloor")
	if _, err := os.Stat(bin); err != nil {
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(goFloorSrc), 0o644); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module gofloor\n\ngo 1.22\n"), 0o644); err != nil {
			return nil, err
		}
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = "/usr/local/go/bin/go"
		}
		b := exec.Command(goBin, "build", "-o", bin, ".")
		b.Dir = dir
		b.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := b.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building the Go floor program: %v: %s", err, out)
		}
	}
	p := &daemonProc{name: "go-floor", cmd: exec.Command(bin)}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	e.track(p.cmd)
	p.pid = p.cmd.Process.Pid
	p.exited = make(chan struct{})
	go func() { p.cmd.Wait(); close(p.exited) }()
	return p, nil
}
