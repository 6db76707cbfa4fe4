package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Floors: what the kernel and the Go runtime cost by
// themselves, measured in the same run as our rows.

// kernelSwitchFloor times one switch's worth of cgroup v1 cpuset writes
// with nothing else: n sibling cpusets (sched_load_balance cleared, as the
// daemon does on workloads), their cpuset.cpus pre-opened, each written
// with the other of two values in a tight loop; one observation per
// round of n writes. watched times each round as the daemon's switches
// are timed: until the bench's own inotify watch (cpusetWatch) has seen
// every file written. An inotify watch costs the writer: on this 2-CPU
// machine it took the loop over 1,000 files from 34 to 46 ms (p50) in a
// stand-alone check.
func (e *env) kernelSwitchFloor(n, rounds int, watched bool) (stats, error) {
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
		f, err := os.OpenFile(filepath.Join(c, "cpuset.cpus"), os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	var cw *cpusetWatch
	if watched {
		if cw, err = newCpusetWatch(w); err != nil {
			return nil, err
		}
		defer cw.close()
	}
	var s stats
	for r := 0; r < rounds+1; r++ {
		v := vals[r%2]
		var written <-chan waitResult
		if cw != nil {
			cw.drain()
			written = cw.waitAllAsync(5 * time.Second)
		}
		t0 := time.Now()
		for _, f := range files {
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
