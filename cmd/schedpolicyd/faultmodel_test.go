package main

// A model-based fault test. Random sequences of faults
// drive the real binary on a real cgroup v1 cpuset parent, and after a
// final clean stop every workload's cpuset.cpus and
// cpuset.sched_load_balance must be as the model says — its original, or
// the user's own later edit — and state.json must hold no record for a
// workload that was restored.
//
// The model is the user's view, not the daemon's: what a workload held
// when it appeared, and every hand edit since. It follows the daemon's
// documented rules where they decide what a user can expect:
//
//   - A hand edit seen by a daemon that manages the parent releases the
//     workload: its value is kept, it is never placed or restored again,
//     so a later hotplug trim of it (cgroup v1 takes an offlined CPU out of
//     every cpuset for good) stands. A hand edit made while no daemon
//     manages the parent becomes the workload's original at the next start.
//   - An empty v1 cpuset.cpus (a released workload whose CPUs all went
//     offline) is filled with the parent's CPUs when a daemon adopts it.
//
// and it avoids, by its preconditions, the two things no daemon can tell
// apart, saying why at each:
//
//   - CPUs go offline and online only while a daemon manages the parent
//     and has seen every change: cgroup v1 trims cpusets nobody watches,
//     and never gives the CPUs back.
//   - While no daemon manages the parent, a hand edit does not end on a
//     value that state.json claims as the daemon's and that the file held
//     when the last managing run ended (after a crash in the middle of a
//     write — kill -9 shortly after a trigger, during start-up or during
//     the restore — on any value it claims as applied or pending): the
//     file then holds that value, whoever wrote it (ABA). A claim of a
//     value the file did not hold (a record behind the file) is no excuse.
//
// Each step waits until the daemon is quiet (its log and the parent's
// files unchanged for faultQuiet) before the next, so that a hand edit
// never races the daemon's own write of the same file (a cgroup file has
// no compare-and-swap). The "appear" and "re-create" steps stop the daemon
// (SIGSTOP) around mkdir and the first writes, so that a cgroup appears
// with its original at once, as from a tool that prepares it in one go
// (else the daemon's fill of an empty v1 cpuset.cpus races with the
// test's first write, by design). Other processes' CPU hotplug (tests run
// in parallel) leaves a sequence unjudged (faultDisturbed), not failed.
//
// Run it bounded (default 6 sequences of ~25 steps, and no new sequence
// after faultBudget: a loaded machine runs fewer, and says so) in make test's serial
// run (SCHEDPOLICYD_TEST_HOTPLUG=1, or SCHEDPOLICYD_FAULT_HOTPLUG set), or long
// with `make fault` (FAULT_CHECKS, FAULT_STEPS). -rapid.checks and
// -rapid.steps override the counts; SCHEDPOLICYD_FAULT_HOTPLUG=real|mock
// picks the CPU hotplug (see faultHotplugMode: real only in make test's
// serial hotplug run and make fault).

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"pgregory.net/rapid"

	"github.com/schedpolicyd/schedpolicyd/daemon"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// Bounds: how long a quiet daemon must stay quiet to count as settled, and
// the generous bound of every wait (a failing test does not hang; never a
// speed claim).
const (
	faultQuiet = 400 * time.Millisecond
	faultBound = 30 * time.Second
)

// Defaults of the bounded run, used unless -rapid.checks / -rapid.steps
// (or RAPID_CHECKS / RAPID_STEPS) are given.
const (
	faultDefaultChecks = 6
	faultDefaultSteps  = 25
	// faultBudget: the bounded run starts no sequence after this long (a
	// quiet machine runs its 6 sequences in about 1.5 minutes; a busy
	// one may take several times that, within make test's -timeout).
	faultBudget = 5 * time.Minute
)

// faultCPUEvents counts the kernel's CPU online/offline uevents (seen) and
// the toggles this process made (ours): another process that takes a CPU
// offline or online (another test of the suite, run in parallel) changes
// every v1 cpuset behind the model's back, and the sequence it disturbed
// is not judged (faultDisturbed).
var faultCPUEvents struct{ seen, ours atomic.Int64 }

// watchCPUEvents counts CPU uevents until stop is called.
func watchCPUEvents() (stop func(), err error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	var quit atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for !quit.Load() {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				continue
			}
			fields := map[string]string{}
			for _, kv := range strings.Split(string(buf[:n]), "\x00") {
				if k, v, ok := strings.Cut(kv, "="); ok {
					fields[k] = v
				}
			}
			if fields["SUBSYSTEM"] == "cpu" && (fields["ACTION"] == "online" || fields["ACTION"] == "offline") {
				faultCPUEvents.seen.Add(1)
			}
		}
	}()
	return func() { quit.Store(true); <-done; unix.Close(fd) }, nil
}

// faultDisturbed is panicked (and recovered by TestFaultModel) when a
// sequence was disturbed by another process's CPU hotplug.
type faultDisturbed struct{ why string }

// TestFaultModel is the model-based fault test (see the top of this
// file).
func TestFaultModel(t *testing.T) {
	// It runs alone: its real CPU hotplug trims every v1 cpuset on the
	// machine, and its waits for a quiet daemon are best without the rest
	// of the suite beside it (make test's serial run, make fault).
	if os.Getenv("SCHEDPOLICYD_FAULT_HOTPLUG") == "" {
		testutil.NeedRealHotplug(t)
	}
	requireMachine(t)
	all := rootCpusetCPUs(t)
	set, err := sysfs.ParseCPUList(all)
	if err != nil || len(set.List()) < 2 {
		t.Skipf("needs at least 2 online CPUs, this machine has %q", all)
	}
	cpus := set.List()
	hp := cpus[len(cpus)-1] // the CPU that goes offline
	realHP := faultHotplugMode() != "mock"
	if _, err := os.Stat(fmt.Sprintf("/sys/devices/system/cpu/cpu%d/online", hp)); err != nil && realHP {
		t.Logf("CPU %d has no online file (%v): hotplug in the daemon's view only", hp, err)
		realHP = false
	}
	// Defaults of the bounded run.
	given := map[string]bool{}
	flagVisit(func(name string) { given[name] = true })
	budget := time.Duration(0) // none when the count was asked for
	if _, ok := os.LookupEnv("RAPID_CHECKS"); !ok && !given["rapid.checks"] {
		flagSet("rapid.checks", strconv.Itoa(faultDefaultChecks))
		budget = faultBudget
	}
	if _, ok := os.LookupEnv("RAPID_STEPS"); !ok && !given["rapid.steps"] {
		flagSet("rapid.steps", strconv.Itoa(faultDefaultSteps))
	}

	// A CPU taken offline comes back in every path: cleanup, and an
	// interrupt of the test (Ctrl-C on make fault).
	t.Cleanup(faultPutCPUBack)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		if _, ok := <-sigs; ok {
			faultPutCPUBack()
			os.Exit(3)
		}
	}()
	if c := faultCPUOffline.Load(); c > 0 {
		t.Fatalf("CPU %d left offline by an earlier run in this process", c-1)
	}

	stopEvents, err := watchCPUEvents()
	if err != nil {
		t.Logf("cannot watch CPU uevents (%v): another process's CPU hotplug is seen only in the online CPUs", err)
	} else {
		defer stopEvents()
	}

	bin := buildDaemon(t)
	defer startFaultWatchdog()()
	stats := &faultStats{actions: map[string]int{}}
	start := time.Now()
	rapid.Check(t, func(rt *rapid.T) {
		if budget > 0 && time.Since(start) > budget {
			stats.overBudget++
			return
		}
		m := newFaultModel(t, bin, all, hp, realHP, stats)
		watchSequence(m.dir, m.parent, m.other)
		defer m.teardown()
		defer func() {
			if r := recover(); r != nil {
				d, ok := r.(faultDisturbed)
				if !ok {
					panic(r)
				}
				stats.disturbed++
				t.Logf("fault model: sequence not judged after %d steps: %s", m.steps, d.why)
			}
		}()
		m.waitCPUsBack()
		m.checkDisturbed()
		m.setup(rt)
		rt.Repeat(m.actions())
		m.finish(rt)
		stats.seqs++
		t.Logf("fault model: sequence %d: %d steps (%d in all, %v)", stats.seqs, m.steps, stats.steps, time.Since(start).Round(time.Second))
	})
	var names []string
	for n := range stats.actions {
		names = append(names, n)
	}
	sort.Strings(names)
	var per []string
	for _, n := range names {
		per = append(per, fmt.Sprintf("%s %d", n, stats.actions[n]))
	}
	t.Logf("fault model: %d sequences, %d steps, %d daemon runs, CPU offline %d times (%d real), %d sequences disturbed by another process's CPU hotplug, %v",
		stats.seqs, stats.steps, stats.runs, stats.offline, stats.realOffline, stats.disturbed, time.Since(start).Round(time.Second))
	t.Logf("fault model: steps by kind: %s", strings.Join(per, ", "))
	if stats.overBudget > 0 {
		t.Logf("fault model: %d sequences not run: the bounded run's budget of %v was spent (a busy machine)", stats.overBudget, budget)
	}
	t.Logf("fault model: the daemon's peak RSS after a flapping power-profiles daemon (%d profiles a step): %.1f MiB (bound %d MiB)",
		faultFlaps, float64(stats.peakRSS)/(1<<20), faultRSSBound>>20)
}

// faultStats are the figures printed at the end (all sequences, including
// those rapid runs while shrinking a failure).
type faultStats struct {
	seqs, steps, runs, offline, realOffline, disturbed, overBudget int
	actions                                                        map[string]int
	peakRSS                                                        int64 // the highest VmHWM after a flap step
}

// faultWorkload is the model of one workload.
type faultWorkload struct {
	expect   string // cpuset.cpus after the final stop
	lb       string // cpuset.sched_load_balance as found
	released bool   // a managing daemon saw a hand edit
	// seen: values the file held after steps with a managing daemon; hand
	// edits like to put one back (where a daemon's records matter most).
	seen map[string]bool
}

// faultModel is one sequence: its machine, its daemon and its model.
type faultModel struct {
	t     *testing.T // the outer test: temporary directories, progress
	bin   string
	stats *faultStats
	dir   string // this sequence's files
	sys   string // mock sysfs root (the daemon's view)
	hp    int    // the CPU that goes offline
	// realHP: the real CPU may go offline (faultHotplugMode).
	realHP bool

	parent, other, unopenable string // cgroup roots
	cpus, mems                string // the parent's, as made
	stateDir, treeDir, conf   string

	wls map[string]*faultWorkload
	d   *faultDaemon // the running daemon, nil when none

	realOff, mockOff bool // the hotplug CPU is offline: really, in the mock
	confValid        bool // conf is a configuration a daemon starts with
	// claimed: per workload, the values a hand edit made while no daemon
	// manages the parent must not produce, because state.json claims them
	// as the daemon's (see claims and the top of the file).
	claimed map[string][]string
	// recordsMayRemain: a managing run ended without a clean stop with
	// every CPU online; the final phase runs one more managing daemon.
	recordsMayRemain bool

	steps   int
	runs    int
	logs    []string // every run's log, for a failure
	trace   []string // the steps, for a failure
	seconds []string // directories of second daemons (unmounted at teardown)

	fb *faultBus // the bus every daemon of the sequence uses (faultbus_test.go)
}

var faultNames = []string{"w0", "w1", "w2", "w3", "w4", "w5"}

func newFaultModel(t *testing.T, bin, cpus string, hp int, realHP bool, stats *faultStats) *faultModel {
	m := &faultModel{t: t, bin: bin, stats: stats, hp: hp, realHP: realHP, cpus: cpus, wls: map[string]*faultWorkload{}, confValid: true}
	m.dir = t.TempDir()
	m.sys = mockMachine(t, "ac-offline-battery-unknown")
	m.stateDir, m.treeDir, m.conf = filepath.Join(m.dir, "state"), filepath.Join(m.dir, "tree"), filepath.Join(m.dir, "schedpolicyd.conf")
	m.unopenable = filepath.Join(m.dir, "not-a-cgroup", "schedpolicyd")
	os.MkdirAll(filepath.Dir(m.unopenable), 0o755)
	id := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
	m.parent = filepath.Join(testutil.CpusetRoot, "schedpolicyd-fault-"+id)
	m.other = filepath.Join(testutil.CpusetRoot, "schedpolicyd-fault-other-"+id)
	return m
}

// setup makes the parent cgroup and the configuration file.
func (m *faultModel) setup(rt *rapid.T) {
	b, err := os.ReadFile(testutil.CpusetRoot + "/cpuset.mems")
	if err != nil {
		m.fatalf(rt, "read the root's mems: %v", err)
	}
	m.mems = strings.TrimSpace(string(b))
	if err := os.Mkdir(m.parent, 0o755); err != nil {
		m.fatalf(rt, "make the parent: %v", err)
	}
	if err := m.writeFile(m.parent+"/cpuset.cpus", m.cpus); err != nil {
		m.fatalf(rt, "%v", err)
	}
	if err := m.writeFile(m.parent+"/cpuset.mems", m.mems); err != nil {
		m.fatalf(rt, "%v", err)
	}
	if err := os.WriteFile(m.conf, nil, 0o644); err != nil {
		m.fatalf(rt, "%v", err)
	}
	m.startBus(rt)
}

// teardown ends every process of the sequence, brings the CPU back, and
// removes the mounts and cgroups it made.
func (m *faultModel) teardown() {
	if m.d != nil {
		m.d.cmd.Process.Signal(syscall.SIGCONT)
		m.d.kill()
		m.d = nil
	}
	if m.realOff {
		faultCPUEvents.ours.Add(1)
		faultPutCPUBack()
		m.realOff = false
	}
	m.stopBus()
	for _, dir := range append([]string{m.treeDir}, m.seconds...) {
		syscall.Unmount(dir, syscall.MNT_DETACH)
	}
	for _, root := range []string{m.parent, m.other} {
		removeCgroupTree(root)
	}
}

// actions are the steps rapid draws from; names repeat to weigh them.
func (m *faultModel) actions() map[string]func(*rapid.T) {
	a := map[string]func(*rapid.T){"": m.check}
	for kind, w := range map[string]struct {
		fn     func(*rapid.T)
		weight int
	}{
		"appear": {m.actAppear, 2}, "vanish": {m.actVanish, 1}, "recreate": {m.actRecreate, 1},
		"edit": {m.actEdit, 2}, "policy": {m.actPolicy, 3}, "power": {m.actPower, 2},
		"hotplug": {m.actHotplug, 3}, "kill9": {m.actKill, 2}, "start": {m.actStart, 4},
		"stop": {m.actStop, 1}, "restart": {m.actRestart, 1}, "sighup": {m.actHup, 1},
		"second": {m.actSecond, 1}, "fixup": {m.actFixUp, 1},
		"forge": {m.actForge, 2}, "hold": {m.actHold, 1}, "leave": {m.actLeave, 1}, "flap": {m.actFlap, 1},
	} {
		for i := 0; i < w.weight; i++ {
			a[fmt.Sprintf("%s%d", kind, i)] = w.fn
		}
	}
	return a
}

// step records a step that is taken (past its preconditions).
func (m *faultModel) step(rt *rapid.T, kind, format string, args ...any) {
	m.steps++
	m.stats.steps++
	m.stats.actions[kind]++
	s := fmt.Sprintf("step %d: %s: ", m.steps, kind) + fmt.Sprintf(format, args...)
	m.trace = append(m.trace, s)
	watchStep(s)
	rt.Log(s)
}

// fatalf fails the sequence with the steps so far and the daemons' logs.
func (m *faultModel) fatalf(rt *rapid.T, format string, args ...any) {
	rt.Helper()
	time.Sleep(200 * time.Millisecond) // a foreign CPU event on its way
	m.checkDisturbed()
	if m.d != nil {
		m.logs = append(m.logs, m.d.logText())
	}
	for i, l := range m.logs {
		if len(l) > 40000 {
			l = "…" + l[len(l)-40000:]
		}
		rt.Logf("daemon run %d log:\n%s", i+1, l)
	}
	rt.Logf("steps:\n%s", strings.Join(m.trace, "\n"))
	rt.Fatalf(format, args...)
}

// writeFile writes v and a newline to p.
//
// A write the kernel does not finish within faultBound (one to the tree of
// a daemon that hangs) fails the step instead of blocking the test; the
// write itself goes on until the daemon is killed at teardown.
func (m *faultModel) writeFile(p, v string) error {
	done := make(chan error, 1)
	go func() { done <- os.WriteFile(p, []byte(v+"\n"), 0o644) }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("write %q to %s: %w", v, p, err)
		}
		return nil
	case <-time.After(faultBound):
		return fmt.Errorf("write %q to %s: not finished after %v", v, p, faultBound)
	}
}

func (m *faultModel) wlPath(name string) string { return filepath.Join(m.parent, name) }

func (m *faultModel) names() []string {
	var out []string
	for n := range m.wls {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// managing reports whether a daemon runs that manages the parent.
func (m *faultModel) managing() bool { return m.d != nil && m.d.kind == "managed" }

// subsets are the non-empty cpulists within cpus (all of them up to 4
// CPUs).
func faultSubsets(cpus string) []string {
	set, _ := sysfs.ParseCPUList(cpus)
	l := set.List()
	if len(l) > 4 {
		l = l[:4]
	}
	var out []string
	for mask := 1; mask < 1<<len(l); mask++ {
		var pick []int
		for i, c := range l {
			if mask&(1<<i) != 0 {
				pick = append(pick, c)
			}
		}
		out = append(out, sysfs.NewCPUSet(pick...).String())
	}
	if len(set.List()) > 4 {
		out = append(out, set.String())
	}
	return out
}

func faultIntersect(a, b string) string {
	x, _ := sysfs.ParseCPUList(a)
	y, _ := sysfs.ParseCPUList(b)
	return x.Intersect(y).String()
}

// snapshot is every file the daemon may write in the parent: for "did
// nothing change" and for settling.
func (m *faultModel) snapshot() string {
	var b strings.Builder
	fmt.Fprintf(&b, "parent=%s", faultRead(m.parent+"/cpuset.cpus"))
	for _, n := range m.names() {
		fmt.Fprintf(&b, " %s=%s/%s", n, faultRead(m.wlPath(n)+"/cpuset.cpus"), faultRead(m.wlPath(n)+"/cpuset.sched_load_balance"))
	}
	return b.String()
}

// records returns state.json's records of the parent and its children.
func (m *faultModel) records(rt *rapid.T) []statefile.Record {
	st, err := statefile.LoadState(m.stateDir)
	if err != nil {
		m.fatalf(rt, "state.json: %v", err)
	}
	var out []statefile.Record
	for _, r := range st.Cgroups {
		if r.Path == m.parent || filepath.Dir(r.Path) == m.parent {
			out = append(out, r)
		}
	}
	return out
}

// faultLive keeps the records whose cgroup is still there (the same
// directory: its inode).
func faultLive(rs []statefile.Record) []statefile.Record {
	var out []statefile.Record
	for _, r := range rs {
		var st syscall.Stat_t
		if syscall.Stat(r.Path, &st) == nil && (r.Inode == 0 || st.Ino == r.Inode) {
			out = append(out, r)
		}
	}
	return out
}

func faultRecordsString(rs []statefile.Record) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%+v", r))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// --- the daemon ---

// faultDaemon is one run of the real binary.
type faultDaemon struct {
	kind  string // managed, none, unopenable, other
	tree  string // its --tree-dir
	cmd   *exec.Cmd
	log   *testutil.LockedBuffer
	done  chan struct{}
	err   error // after done
	msgs  chan string
	sock  *net.UnixConn
	ready bool
	// before: for a run that does not manage the parent, state.json's
	// records of the parent at its start, which it must keep as they are
	// while their cgroups exist (a record of a cgroup that is gone covers
	// nothing and may go).
	before []statefile.Record
	// startOnly: what of its configuration file only a start reads
	// (faultStartOnly), as it runs with it.
	startOnly string
}

func (d *faultDaemon) logText() string { return d.log.String() }

func (d *faultDaemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// count is how often s occurs in the log.
func (d *faultDaemon) count(s string) int { return strings.Count(d.log.String(), s) }

// spawn starts the binary with args and a notify socket, without waiting.
func (m *faultModel) spawn(rt *rapid.T, kind string, args ...string) *faultDaemon {
	m.runs++
	m.stats.runs++
	sockPath := filepath.Join(m.dir, fmt.Sprintf("notify-%d.sock", m.runs))
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		m.fatalf(rt, "notify socket: %v", err)
	}
	d := &faultDaemon{kind: kind, log: &testutil.LockedBuffer{}, done: make(chan struct{}), msgs: make(chan string, 256), sock: sock}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := sock.Read(buf)
			if err != nil {
				return
			}
			select {
			case d.msgs <- string(buf[:n]):
			default:
			}
		}
	}()
	for i, a := range args {
		if a == "--tree-dir" && i+1 < len(args) {
			d.tree = args[i+1]
		}
	}
	d.cmd = exec.Command(m.bin, args...)
	d.cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sockPath)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		m.fatalf(rt, "start %s: %v", m.bin, err)
	}
	watchDaemon(d.cmd.Process.Pid, d.log)
	go func() {
		d.err = d.cmd.Wait()
		watchDaemonGone(d.cmd.Process.Pid)
		sock.Close()
		close(d.done)
	}()
	return d
}

// waitReady waits for READY=1; false if the daemon exited first.
func (d *faultDaemon) waitReady() (bool, error) {
	timeout := time.After(faultBound)
	for {
		select {
		case s := <-d.msgs:
			if strings.Contains(s, "READY=1") {
				d.ready = true
				return true, nil
			}
		case <-d.done:
			return false, nil
		case <-timeout:
			return false, errors.New("no READY=1 and no exit")
		}
	}
}

// kill ends the daemon with SIGKILL and waits for it. A FUSE server killed
// while a request to its own mount is in flight (one it has already read,
// or a FLUSH of its own file at exit) waits for itself uninterruptibly and
// never exits: then the tree's FUSE connection is aborted (fusectl) so
// that the process goes, and kill describes what it saw ("" when the
// daemon simply died).
func (d *faultDaemon) kill() string {
	d.cmd.Process.Kill()
	select {
	case <-d.done:
		return ""
	case <-time.After(faultBound / 3):
	}
	var tasks []string
	pid := d.cmd.Process.Pid
	ids, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, id := range ids {
		dir := fmt.Sprintf("/proc/%d/task/%s", pid, id.Name())
		st := faultRead(dir + "/stat")
		state := "?"
		if i := strings.LastIndexByte(st, ')'); i > 0 && len(st) > i+2 {
			state = st[i+2 : i+3]
		}
		var frames []string
		for _, f := range strings.Fields(faultRead(dir + "/stack")) {
			if i := strings.Index(f, "+0x"); i > 0 {
				frames = append(frames, f[:i])
			}
		}
		tasks = append(tasks, fmt.Sprintf("task %s state %s in %s", id.Name(), state, strings.Join(frames, " ← ")))
	}
	abortErr := faultAbortFUSE(d.tree)
	select {
	case <-d.done:
	case <-time.After(faultBound):
		return fmt.Sprintf("kill -9 did not end the daemon (pid %d: %s); aborting its FUSE connection did not either: %v", pid, strings.Join(tasks, "; "), abortErr)
	}
	return fmt.Sprintf("kill -9 did not end the daemon (pid %d) until its FUSE connection was aborted (abort: %v): %s; a FUSE server "+
		"killed while a request to its own mount is in flight waits for itself, and go-fuse's WaitMount makes one at every mount "+
		"(its poll hack on .go-fuse-epoll-hack)", pid, abortErr, strings.Join(tasks, "; "))
}

// faultAbortFUSE aborts the FUSE connection of the mount at dir through
// fusectl, mounting fusectl for the time being where it is not mounted.
func faultAbortFUSE(dir string) error {
	var minor string
	for _, line := range strings.Split(faultRead("/proc/self/mountinfo"), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == dir {
			if _, mn, ok := strings.Cut(f[2], ":"); ok {
				minor = mn
			}
		}
	}
	if minor == "" {
		return fmt.Errorf("no mount at %s", dir)
	}
	const ctl = "/sys/fs/fuse/connections"
	if _, err := os.Stat(filepath.Join(ctl, minor)); err != nil {
		if err := syscall.Mount("fusectl", ctl, "fusectl", 0, ""); err != nil {
			return fmt.Errorf("mount fusectl: %w", err)
		}
		defer syscall.Unmount(ctl, 0)
	}
	return os.WriteFile(filepath.Join(ctl, minor, "abort"), []byte("1"), 0o200)
}

func (d *faultDaemon) waitExit() error {
	select {
	case <-d.done:
		return nil
	case <-time.After(faultBound):
		return errors.New("still running")
	}
}

// daemonArgs are the flags of a run of this installation (its state and
// tree directories) on root.
func (m *faultModel) daemonArgs(root, stateDir, treeDir string) []string {
	return []string{"--sysfs-root", m.sys, "--cgroup-root", root, "--tree-dir", treeDir, "--tree-backend", "fuse",
		"--state-dir", stateDir, "--bus", m.fb.bus.Addr, "--events", "fsnotify", "--debounce", "50ms", "--upower", "off",
		"--logind=false", "--log-level", "debug", "--config", m.conf}
}

func (m *faultModel) rootOf(kind string) string {
	switch kind {
	case "managed":
		return m.parent
	case "other":
		return m.other
	case "unopenable":
		return m.unopenable
	}
	return "none"
}

// pause stops the running daemon (SIGSTOP) until resume, waiting until it
// really is stopped.
func (m *faultModel) pause(rt *rapid.T) {
	if m.d == nil {
		return
	}
	m.d.cmd.Process.Signal(syscall.SIGSTOP)
	m.poll(rt, "daemon stopped by SIGSTOP", func() (bool, string) {
		s := faultRead(fmt.Sprintf("/proc/%d/stat", m.d.cmd.Process.Pid))
		i := strings.LastIndexByte(s, ')')
		return i > 0 && len(s) > i+2 && s[i+2] == 'T', s
	})
}

func (m *faultModel) resume() {
	if m.d != nil {
		m.d.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// poll waits for cond within faultBound.
func (m *faultModel) poll(rt *rapid.T, what string, cond func() (bool, string)) {
	rt.Helper()
	deadline := time.Now().Add(faultBound)
	var last string
	for time.Now().Before(deadline) {
		ok, s := cond()
		if ok {
			return
		}
		last = s
		time.Sleep(20 * time.Millisecond)
	}
	m.fatalf(rt, "timed out waiting for %s; last seen: %s", what, last)
}

// settle waits until the running daemon is quiet: its log and the
// parent's files unchanged for faultQuiet.
func (m *faultModel) settle(rt *rapid.T) {
	rt.Helper()
	if m.d == nil {
		return
	}
	deadline := time.Now().Add(faultBound)
	lastLog, lastFiles, since := -1, "", time.Now()
	for time.Now().Before(deadline) {
		if m.d.exited() {
			m.fatalf(rt, "the daemon (%s) exited: %v", m.d.kind, m.d.err)
		}
		l, f := len(m.d.logText()), m.snapshot()
		if l != lastLog || f != lastFiles {
			lastLog, lastFiles, since = l, f, time.Now()
		} else if time.Since(since) >= faultQuiet {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	m.fatalf(rt, "the daemon did not settle within %v", faultBound)
}

// startDaemon starts a daemon of kind on this installation and waits for
// READY (or, with killAfter ≥ 0, kills it that long after its start: a
// crash during start-up).
func (m *faultModel) startDaemon(rt *rapid.T, kind string, killAfter time.Duration) {
	if m.d != nil {
		m.fatalf(rt, "model: a daemon is running already")
	}
	var before []statefile.Record
	if kind != "managed" {
		before = m.records(rt)
	}
	var emptied []string
	if kind == "managed" {
		emptied = m.emptiedReleased()
	}
	d := m.spawn(rt, kind, m.daemonArgs(m.rootOf(kind), m.stateDir, m.treeDir)...)
	d.before = before
	d.startOnly = faultStartOnly(faultRead(m.conf))
	if killAfter >= 0 {
		time.Sleep(killAfter)
		wedged := d.kill()
		m.logs = append(m.logs, d.logText())
		if wedged != "" {
			m.fatalf(rt, "%s", wedged)
		}
		m.afterEnd(rt, d, false, true) // it may have been writing
		m.fillRule(rt, emptied)
		return
	}
	ok, err := d.waitReady()
	if err != nil || !ok {
		m.d = d
		m.fatalf(rt, "daemon (%s) did not become ready: %v (exit %v)", kind, err, d.err)
	}
	m.d = d
	m.settle(rt)
	if kind == "managed" {
		m.claimed = map[string][]string{} // every workload reconciled
		m.fillRule(rt, emptied)
	}
}

// emptiedReleased lists the released workloads whose cpuset is empty,
// which a managing daemon fills when it adopts them (fillRule).
func (m *faultModel) emptiedReleased() []string {
	var out []string
	for _, n := range m.names() {
		if m.wls[n].released && faultRead(m.wlPath(n)+"/cpuset.cpus") == "" {
			out = append(out, n)
		}
	}
	return out
}

// fillRule: a managing daemon fills an empty v1 cpuset.cpus with the
// parent's CPUs when it adopts it (documented); a released workload the
// kernel emptied is then expected to keep that.
func (m *faultModel) fillRule(rt *rapid.T, emptied []string) {
	parent := faultRead(m.parent + "/cpuset.cpus")
	for _, n := range emptied {
		got := faultRead(m.wlPath(n) + "/cpuset.cpus")
		switch got {
		case "":
		case parent:
			m.wls[n].expect = got
		default:
			m.fatalf(rt, "%s: empty cpuset filled with %q at adoption, want the parent's %q", n, got, parent)
		}
	}
}

// afterEnd checks what a run that ended must have left: a run that did not
// manage the parent kept its records as they were; a managing run that
// stopped cleanly with every CPU online restored everything. midWrite: it
// was killed while it may have been writing.
func (m *faultModel) afterEnd(rt *rapid.T, d *faultDaemon, clean, midWrite bool) {
	rt.Helper()
	if d.kind != "managed" {
		if before, after := faultRecordsString(faultLive(d.before)), faultRecordsString(faultLive(m.records(rt))); after != before {
			m.fatalf(rt, "a run on %s changed the records of %s:\nbefore %s\nafter  %s", d.kind, m.parent, before, after)
		}
		return
	}
	m.claims(rt, midWrite)
	if !clean || m.realOff {
		m.recordsMayRemain = true
		return
	}
	m.recordsMayRemain = false
	m.checkRestored(rt, "after a clean stop")
}

// claims computes, once a managing run has ended, what no daemon can tell
// from its own value (ABA): a workload's file holds a value state.json
// claims as the daemon's (applied or pending); a hand edit made while no
// daemon runs that ends on that value is that value. After a crash in the
// middle of a write the write may or may not have happened, so every value
// claimed counts. Values claimed but not in the file (a record that is
// behind) are not excluded: a daemon that acts on them is wrong.
func (m *faultModel) claims(rt *rapid.T, midWrite bool) {
	m.claimed = map[string][]string{}
	for _, r := range m.records(rt) {
		n := filepath.Base(r.Path)
		if r.Path == m.parent || m.wls[n] == nil || (r.Inode != 0 && r.Inode != faultInode(r.Path)) {
			continue
		}
		cur := faultRead(r.Path + "/cpuset.cpus")
		for _, v := range []string{r.Applied, r.Pending} {
			if v != "" && (midWrite || v == cur || r.Unverified) {
				m.claimed[n] = append(m.claimed[n], v)
			}
		}
		if r.Unverified {
			m.claimed[n] = append(m.claimed[n], cur)
		}
	}
}

func faultInode(p string) uint64 {
	var st syscall.Stat_t
	if syscall.Stat(p, &st) != nil {
		return 0
	}
	return st.Ino
}

// checkRestored asserts the promise: every workload as the model says,
// the parent with its CPUs, and no record for a restored workload.
func (m *faultModel) checkRestored(rt *rapid.T, when string) {
	rt.Helper()
	var bad []string
	if got := faultRead(m.parent + "/cpuset.cpus"); got != m.cpus {
		bad = append(bad, fmt.Sprintf("parent cpuset.cpus %q, want %q", got, m.cpus))
	}
	for _, n := range m.names() {
		w := m.wls[n]
		if got := faultRead(m.wlPath(n) + "/cpuset.cpus"); got != w.expect {
			bad = append(bad, fmt.Sprintf("%s cpuset.cpus %q, want %q (released %v)", n, got, w.expect, w.released))
		}
		if got := faultRead(m.wlPath(n) + "/cpuset.sched_load_balance"); got != w.lb {
			bad = append(bad, fmt.Sprintf("%s cpuset.sched_load_balance %q, want %q", n, got, w.lb))
		}
	}
	for _, r := range m.records(rt) {
		n := filepath.Base(r.Path)
		w := m.wls[n]
		switch {
		case r.Path == m.parent:
			bad = append(bad, fmt.Sprintf("the parent's record kept after it was restored: %+v", r))
		case w == nil:
			bad = append(bad, fmt.Sprintf("a record kept after its cgroup is gone: %+v", r))
		case r.Applied != "" || r.Pending != "" || r.Unverified || r.LoadBalanceCleared || r.Created:
			bad = append(bad, fmt.Sprintf("a record kept for restored workload %s: %+v", n, r))
		case r.Released != w.released:
			bad = append(bad, fmt.Sprintf("%s: record released=%v, model released=%v: %+v", n, r.Released, w.released, r))
		}
	}
	if len(bad) > 0 {
		m.fatalf(rt, "%s: %s", when, strings.Join(bad, "; "))
	}
}

// stopDaemon stops the running daemon with SIGTERM and checks what it left.
func (m *faultModel) stopDaemon(rt *rapid.T) {
	d := m.d
	d.cmd.Process.Signal(syscall.SIGTERM)
	if err := d.waitExit(); err != nil {
		m.fatalf(rt, "daemon (%s) after SIGTERM: %v", d.kind, err)
	}
	m.d = nil
	m.logs = append(m.logs, d.logText())
	if d.err != nil {
		m.d = d
		m.fatalf(rt, "daemon (%s) exit after SIGTERM: %v", d.kind, d.err)
	}
	m.afterEnd(rt, d, true, false)
}

// killDaemon kills the running daemon (SIGKILL).
func (m *faultModel) killDaemon(rt *rapid.T, midWrite bool) {
	d := m.d
	wedged := d.kill()
	m.d = nil
	m.logs = append(m.logs, d.logText())
	if wedged != "" {
		m.fatalf(rt, "%s", wedged)
	}
	m.afterEnd(rt, d, false, midWrite)
}

// validConf makes sure the configuration file is one a daemon starts
// with.
func (m *faultModel) validConf(rt *rapid.T) {
	if m.confValid {
		return
	}
	os.RemoveAll(m.conf)
	if err := os.WriteFile(m.conf, []byte(faultValidConfs[0]), 0o644); err != nil {
		m.fatalf(rt, "%v", err)
	}
	m.confValid = true
}

// waitCPUsBack waits, before a sequence, until another process's CPU
// hotplug is over (every CPU online, no CPU uevent for a second; bounded),
// and forgets the events seen before.
func (m *faultModel) waitCPUsBack() {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		seen := faultCPUEvents.seen.Load()
		if faultRead("/sys/devices/system/cpu/online") == m.cpus {
			time.Sleep(time.Second)
			if faultCPUEvents.seen.Load() == seen && faultRead("/sys/devices/system/cpu/online") == m.cpus {
				faultCPUEvents.ours.Store(seen)
				return
			}
			continue
		}
		if time.Now().After(deadline) {
			return // checkDisturbed says why
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkDisturbed ends the sequence, unjudged, when another process took a
// CPU offline or online (faultCPUEvents), or the online CPUs are not what
// the model has.
func (m *faultModel) checkDisturbed() {
	want, _ := sysfs.ParseCPUList(m.cpus)
	if m.realOff {
		want = want.Difference(sysfs.NewCPUSet(m.hp))
	}
	if seen, ours := faultCPUEvents.seen.Load(), faultCPUEvents.ours.Load(); seen > ours {
		faultCPUEvents.ours.Store(seen) // counted once
		panic(faultDisturbed{fmt.Sprintf("%d CPU online/offline uevents not of this test", seen-ours)})
	}
	if got := faultRead("/sys/devices/system/cpu/online"); got != want.String() {
		panic(faultDisturbed{fmt.Sprintf("online CPUs %s, the model has %s", got, want)})
	}
}

// --- the steps ---

// check is rapid's invariant, after every step: the daemon the model
// thinks runs does.
func (m *faultModel) check(rt *rapid.T) {
	m.checkDisturbed()
	if m.managing() {
		for n, w := range m.wls {
			w.seen[faultRead(m.wlPath(n)+"/cpuset.cpus")] = true
		}
	}
	if m.d != nil && m.d.exited() {
		m.fatalf(rt, "the daemon (%s) exited: %v", m.d.kind, m.d.err)
	}
	if _, err := os.Stat(m.parent + "/cpuset.cpus"); err != nil {
		m.fatalf(rt, "the parent: %v", err)
	}
}

// actAppear: a workload appears, with an original chosen among the
// parent's CPUs; or, with a managing daemon, as a bare mkdir the daemon
// fills with the parent's CPUs.
func (m *faultModel) actAppear(rt *rapid.T) {
	var free []string
	for _, n := range faultNames {
		if m.wls[n] == nil {
			free = append(free, n)
		}
	}
	if len(free) == 0 {
		rt.Skip("every name in use")
	}
	name := rapid.SampledFrom(free).Draw(rt, "name")
	parent := faultRead(m.parent + "/cpuset.cpus")
	bare := m.managing() && rapid.IntRange(0, 3).Draw(rt, "bare") == 0
	cpus := parent
	if !bare {
		cpus = rapid.SampledFrom(faultSubsets(parent)).Draw(rt, "cpus")
	}
	m.step(rt, "appear", "%s with %s (bare mkdir: %v)", name, cpus, bare)
	m.makeWorkload(rt, name, cpus, bare)
	m.settle(rt)
}

func (m *faultModel) makeWorkload(rt *rapid.T, name, cpus string, bare bool) {
	p := m.wlPath(name)
	m.pause(rt)
	if err := os.Mkdir(p, 0o755); err != nil {
		m.resume()
		m.fatalf(rt, "mkdir %s: %v", p, err)
	}
	lb := faultRead(p + "/cpuset.sched_load_balance")
	if !bare {
		for file, v := range map[string]string{"cpuset.cpus": cpus, "cpuset.mems": m.mems} {
			if err := m.writeFile(filepath.Join(p, file), v); err != nil {
				m.resume()
				m.fatalf(rt, "%v", err)
			}
		}
	}
	m.resume()
	m.wls[name] = &faultWorkload{expect: cpus, lb: lb, seen: map[string]bool{}}
	if bare {
		m.poll(rt, name+" filled by the daemon", func() (bool, string) {
			got := faultRead(p + "/cpuset.cpus")
			return got != "", got
		})
	}
}

// actVanish: a workload's cgroup is removed.
func (m *faultModel) actVanish(rt *rapid.T) {
	names := m.names()
	if len(names) == 0 {
		rt.Skip("no workload")
	}
	name := rapid.SampledFrom(names).Draw(rt, "name")
	m.step(rt, "vanish", "%s", name)
	if err := syscall.Rmdir(m.wlPath(name)); err != nil {
		m.fatalf(rt, "rmdir %s: %v", name, err)
	}
	delete(m.wls, name)
	delete(m.claimed, name)
	m.goneUnseen()
	m.settle(rt)
}

// goneUnseen: a cgroup went away while no daemon manages the parent; its
// record (a released workload's, say) is dropped only by the next
// managing run, so the final phase has one.
func (m *faultModel) goneUnseen() {
	if !m.managing() {
		m.recordsMayRemain = true
	}
}

// actRecreate: a workload is removed and made again under the same name
// at once, with a new original.
func (m *faultModel) actRecreate(rt *rapid.T) {
	names := m.names()
	if len(names) == 0 {
		rt.Skip("no workload")
	}
	name := rapid.SampledFrom(names).Draw(rt, "name")
	parent := faultRead(m.parent + "/cpuset.cpus")
	cpus := rapid.SampledFrom(faultSubsets(parent)).Draw(rt, "cpus")
	m.step(rt, "recreate", "%s with %s", name, cpus)
	m.pause(rt)
	err := syscall.Rmdir(m.wlPath(name))
	m.resume()
	if err != nil {
		m.fatalf(rt, "rmdir %s: %v", name, err)
	}
	delete(m.wls, name)
	delete(m.claimed, name)
	m.goneUnseen()
	m.makeWorkload(rt, name, cpus, false)
	m.settle(rt)
}

// actEdit: the user writes a workload's cpuset.cpus by hand.
func (m *faultModel) actEdit(rt *rapid.T) {
	names := m.names()
	if len(names) == 0 {
		rt.Skip("no workload")
	}
	name := rapid.SampledFrom(names).Draw(rt, "name")
	choices, back := m.editChoices(name)
	if len(choices) == 0 {
		rt.Skip("no value to edit to")
	}
	if len(back) > 0 && rapid.Bool().Draw(rt, "put_back") {
		choices = back
	}
	v := rapid.SampledFrom(choices).Draw(rt, "cpus")
	m.step(rt, "edit", "%s: %s → %s (a managing daemon sees it: %v)", name, faultRead(m.wlPath(name)+"/cpuset.cpus"), v, m.managing())
	m.edit(rt, name, v)
	m.settle(rt)
}

// actFixUp: while no daemon manages the parent (after a crash, say), the
// user puts every workload back by hand to a value it held before, where
// there is one.
func (m *faultModel) actFixUp(rt *rapid.T) {
	if m.managing() || len(m.wls) == 0 {
		rt.Skip("a daemon manages the parent, or no workload")
	}
	var done []string
	for _, n := range m.names() {
		_, back := m.editChoices(n)
		if len(back) == 0 {
			continue
		}
		v := rapid.SampledFrom(back).Draw(rt, "cpus")
		done = append(done, fmt.Sprintf("%s: %s → %s", n, faultRead(m.wlPath(n)+"/cpuset.cpus"), v))
		m.edit(rt, n, v)
	}
	m.step(rt, "fixup", "%s", strings.Join(done, ", "))
	m.settle(rt)
}

// editChoices are the values a hand edit of workload name may write now
// (not its current value, nor one the daemon's records claim while no
// daemon manages the parent), and those of them it held before.
func (m *faultModel) editChoices(name string) (choices, back []string) {
	cur := faultRead(m.wlPath(name) + "/cpuset.cpus")
	parent := faultRead(m.parent + "/cpuset.cpus")
	avoid := map[string]bool{cur: true}
	if !m.managing() {
		for _, v := range m.claimed[name] {
			// v less CPUs offline now is the daemon's too (v1 hotplug).
			avoid[v], avoid[faultIntersect(v, parent)] = true, true
		}
	}
	for _, v := range faultSubsets(parent) {
		if !avoid[v] {
			choices = append(choices, v)
			if m.wls[name].seen[v] {
				back = append(back, v)
			}
		}
	}
	return choices, back
}

// edit writes v into workload name's cpuset.cpus: the user's own value.
func (m *faultModel) edit(rt *rapid.T, name, v string) {
	if err := m.writeFile(m.wlPath(name)+"/cpuset.cpus", v); err != nil {
		m.fatalf(rt, "%v", err)
	}
	w := m.wls[name]
	w.expect = v
	if m.managing() {
		w.released = true
	}
}

// actPolicy: a policy or knob written into the served tree (bad values
// must fail with EINVAL).
func (m *faultModel) actPolicy(rt *rapid.T) {
	if m.d == nil {
		rt.Skip("no daemon serves the tree")
	}
	type w struct{ file, value string }
	pick := rapid.SampledFrom([]w{
		{"current_sched_policy", "performance"}, {"current_sched_policy", "balance"},
		{"current_sched_policy", "powersaving"}, {"current_sched_policy", "powersaving"},
		{"current_sched_policy", "bogus"}, {"power_aware", "0"}, {"power_aware", "1"},
		{"power_aware", "2"}, {"power_aware", "7"}, {"power_aware_policy", "balance"},
		{"power_aware", "1"}, {"power_aware", "1"}, // automatic: power changes count
	}).Draw(rt, "write")
	m.step(rt, "policy", "%s ← %s", pick.file, pick.value)
	err := m.writeFile(filepath.Join(m.treeDir, daemon.TreePrefix, pick.file), pick.value)
	bad := pick.value == "bogus" || pick.value == "7"
	switch {
	case bad && !errors.Is(err, syscall.EINVAL):
		m.fatalf(rt, "writing %q: %v, want EINVAL", pick.value, err)
	case !bad && err != nil:
		m.fatalf(rt, "%v", err)
	}
	m.settle(rt)
}

// actPower: the machine goes on battery or back on AC (mock power supply).
func (m *faultModel) actPower(rt *rapid.T) {
	battery := rapid.Bool().Draw(rt, "battery")
	m.step(rt, "power", "battery %v", battery)
	m.setPower(rt, battery)
	m.settle(rt)
}

func (m *faultModel) setPower(rt *rapid.T, battery bool) {
	ps := filepath.Join(m.sys, "class/power_supply")
	ac, status := "1", "Charging"
	if battery {
		ac, status = "0", "Discharging"
	}
	if err := m.writeFile(ps+"/AC/online", ac); err != nil {
		m.fatalf(rt, "%v", err)
	}
	if err := m.writeFile(ps+"/BAT0/status", status); err != nil {
		m.fatalf(rt, "%v", err)
	}
}

// actHotplug: the hotplug CPU goes offline (really, or in the daemon's
// view only) or comes back. Only while a daemon manages the parent (see
// the top of the file).
func (m *faultModel) actHotplug(rt *rapid.T) {
	if !m.managing() {
		rt.Skip("CPUs change only while a daemon manages the parent")
	}
	if m.realOff || m.mockOff {
		m.step(rt, "hotplug", "CPU %d online (real %v)", m.hp, m.realOff)
		m.online(rt)
		return
	}
	real := m.realHP && rapid.IntRange(0, 2).Draw(rt, "real") > 0
	m.step(rt, "hotplug", "CPU %d offline (real %v)", m.hp, real)
	m.offline(rt, real)
}

func (m *faultModel) cpuDirs() (string, string) {
	dir := filepath.Join(m.sys, "devices/system/cpu", fmt.Sprintf("cpu%d", m.hp), "topology")
	return dir, filepath.Join(m.dir, "hidden-topology")
}

func (m *faultModel) mockOnline(rt *rapid.T, on bool) {
	dir, hidden := m.cpuDirs()
	set, _ := sysfs.ParseCPUList(m.cpus)
	if on {
		os.Rename(hidden, dir)
	} else {
		set = set.Difference(sysfs.NewCPUSet(m.hp))
		os.Rename(dir, hidden)
	}
	if err := m.writeFile(filepath.Join(m.sys, "devices/system/cpu/online"), set.String()); err != nil {
		m.fatalf(rt, "%v", err)
	}
	m.mockOff = !on
}

// waitHotplug waits until the daemon has handled a change of its online
// CPUs (n: the count of "online CPUs changed" before).
func (m *faultModel) waitHotplug(rt *rapid.T, n int) {
	m.poll(rt, "the daemon to see the CPU change", func() (bool, string) {
		return m.d.count(`msg="online CPUs changed"`) > n, ""
	})
	m.settle(rt)
}

func (m *faultModel) offline(rt *rapid.T, real bool) {
	n := m.d.count(`msg="online CPUs changed"`)
	m.stats.offline++
	if real {
		m.stats.realOffline++
		faultCPUOffline.Store(int32(m.hp + 1))
		faultCPUEvents.ours.Add(1)
		if err := m.writeFile(fmt.Sprintf("/sys/devices/system/cpu/cpu%d/online", m.hp), "0"); err != nil {
			faultCPUOffline.Store(0)
			faultCPUEvents.ours.Add(-1)
			m.fatalf(rt, "%v", err)
		}
		m.realOff = true
		// The kernel first: v1 takes the CPU out of every cpuset.
		hp := strconv.Itoa(m.hp)
		m.poll(rt, "the kernel to trim the parent", func() (bool, string) {
			set, _ := sysfs.ParseCPUList(faultRead(m.parent + "/cpuset.cpus"))
			return !set.Contains(m.hp), hp
		})
		online := faultRead(m.parent + "/cpuset.cpus")
		for _, n := range m.names() {
			if w := m.wls[n]; w.released {
				w.expect = faultIntersect(w.expect, online) // the user's value, trimmed for good
			}
		}
	}
	m.mockOnline(rt, false)
	m.waitHotplug(rt, n)
}

func (m *faultModel) online(rt *rapid.T) {
	n := m.d.count(`msg="online CPUs changed"`)
	if m.realOff {
		faultCPUEvents.ours.Add(1)
		if err := m.writeFile(fmt.Sprintf("/sys/devices/system/cpu/cpu%d/online", m.hp), "1"); err != nil {
			faultCPUEvents.ours.Add(-1)
			m.fatalf(rt, "%v", err)
		}
		faultCPUOffline.Store(0)
		m.realOff = false
		m.poll(rt, "the CPU online", func() (bool, string) {
			s := faultRead("/sys/devices/system/cpu/online")
			return s == m.cpus, s
		})
	}
	m.mockOnline(rt, true)
	m.waitHotplug(rt, n)
}

// actKill: kill -9, when the daemon is quiet (also once it has handled a
// power change), or shortly after a trigger that makes it write (a power
// change, a policy write, SIGTERM's restore).
func (m *faultModel) actKill(rt *rapid.T) {
	if m.d == nil {
		rt.Skip("no daemon")
	}
	trigger := rapid.SampledFrom([]string{"quiet", "quiet", "power", "power handled", "policy", "sigterm"}).Draw(rt, "trigger")
	delay := time.Duration(rapid.IntRange(0, 80).Draw(rt, "delay_ms")) * time.Millisecond
	m.step(rt, "kill9", "%s daemon, trigger %s, after %v", m.d.kind, trigger, delay)
	var wg sync.WaitGroup
	switch trigger {
	case "power":
		m.setPower(rt, rapid.Bool().Draw(rt, "battery"))
	case "power handled": // what the daemon does on its own, then a crash
		m.setPower(rt, rapid.Bool().Draw(rt, "battery"))
		m.settle(rt)
	case "policy":
		v := rapid.SampledFrom([]string{"performance", "balance", "powersaving"}).Draw(rt, "policy")
		wg.Add(1)
		go func() {
			defer wg.Done()
			os.WriteFile(filepath.Join(m.treeDir, daemon.TreePrefix, "current_sched_policy"), []byte(v+"\n"), 0o644)
		}()
	case "sigterm":
		m.d.cmd.Process.Signal(syscall.SIGTERM)
	}
	time.Sleep(delay)
	m.killDaemon(rt, trigger != "quiet" && trigger != "power handled")
	wg.Wait() // the write fails once the FUSE server is gone
}

// actStart: a daemon starts on this installation: managing the parent,
// with --cgroup-root none, on a root it cannot open, or on another v1
// root. A bad configuration file must make it refuse to start, changing
// nothing.
func (m *faultModel) actStart(rt *rapid.T) {
	if m.d != nil {
		rt.Skip("a daemon runs")
	}
	kind := rapid.SampledFrom([]string{"managed", "managed", "managed", "none", "unopenable", "other"}).Draw(rt, "kind")
	killAfter := time.Duration(-1)
	if kind == "managed" && rapid.IntRange(0, 4).Draw(rt, "crash") == 0 {
		killAfter = time.Duration(rapid.IntRange(0, 300).Draw(rt, "kill_ms")) * time.Millisecond
	}
	m.step(rt, "start", "%s (bad config first: %v, kill -9 after %v)", kind, !m.confValid, killAfter)
	if !m.confValid {
		before, recs := m.snapshot(), faultRecordsString(m.records(rt))
		d := m.spawn(rt, kind, m.daemonArgs(m.rootOf(kind), m.stateDir, m.treeDir)...)
		if err := d.waitExit(); err != nil {
			d.kill()
			m.logs = append(m.logs, d.logText())
			m.fatalf(rt, "a daemon with a bad configuration file: %v", err)
		}
		m.logs = append(m.logs, d.logText())
		var ee *exec.ExitError
		if !errors.As(d.err, &ee) || ee.ExitCode() != 2 {
			m.fatalf(rt, "a daemon with a bad configuration file: exit %v, want 2", d.err)
		}
		if after := m.snapshot(); after != before {
			m.fatalf(rt, "a daemon that refused its configuration changed cpusets: %s → %s", before, after)
		}
		if after := faultRecordsString(m.records(rt)); after != recs {
			m.fatalf(rt, "a daemon that refused its configuration changed state.json: %s → %s", recs, after)
		}
		m.validConf(rt)
	}
	m.startDaemon(rt, kind, killAfter)
}

// actStop: SIGTERM, and the clean stop's checks.
func (m *faultModel) actStop(rt *rapid.T) {
	if m.d == nil {
		rt.Skip("no daemon")
	}
	m.step(rt, "stop", "%s daemon (CPU %d really offline: %v)", m.d.kind, m.hp, m.realOff)
	m.stopDaemon(rt)
}

// actRestart: a clean stop and a start of another kind at once.
func (m *faultModel) actRestart(rt *rapid.T) {
	if m.d == nil {
		rt.Skip("no daemon")
	}
	kind := rapid.SampledFrom([]string{"managed", "managed", "none", "unopenable", "other"}).Draw(rt, "kind")
	m.step(rt, "restart", "%s → %s", m.d.kind, kind)
	m.stopDaemon(rt)
	m.validConf(rt)
	m.startDaemon(rt, kind, -1)
}

// Configuration files for SIGHUP (and the next start).
var faultValidConfs = []string{
	"",
	"sample_interval = \"200ms\"\n",
	"power_aware = 2\npower_aware_policy = \"balance\"\n",
	"power_aware = 0\n",
	"sample_interval = \"10ms\"\nboost_on_battery = \"off\"\n",
	"# flags win over these\ncgroup_root = \"none\"\nlog_level = \"error\"\ntree_dir = \"/nonexistent\"\n",
	"power_aware = 1\npower_aware_policy = \"powersaving\"\nrecheck_interval = \"-1s\"\n",
	"debounce = \"0s\"\nboost_on_battery = \"keep\"\n",
}

var faultInvalidConfs = []string{
	"bogus_key = 1\n",
	// Out of bounds since the daemon bounds every duration
	// (daemon/bounds.go): refused, no panic.
	"sample_interval = \"2562047h\"\n",
	"power_aware = 7\n",
	"sample_interval = \"5ms\"\n",
	"sample_interval = \"forever\"\n",
	"power_aware = \"2\"\n",
	"[table]\nx = 1\n",
	"power_aware =\n",
	"\x00\xff\xfe garbage",
	"recheck_interval = \"10ms\"\n",
	"cgroup_root = \"relative/path\"\n",
	"<missing>",
	"<directory>",
}

// actHup: SIGHUP with a random valid or invalid configuration file.
func (m *faultModel) actHup(rt *rapid.T) {
	if m.d == nil {
		rt.Skip("no daemon")
	}
	valid := rapid.Bool().Draw(rt, "valid")
	var content string
	if valid {
		content = rapid.SampledFrom(faultValidConfs).Draw(rt, "config")
	} else {
		content = rapid.SampledFrom(faultInvalidConfs).Draw(rt, "config")
	}
	m.step(rt, "sighup", "valid %v: %q", valid, content)
	os.RemoveAll(m.conf)
	switch content {
	case "<missing>":
	case "<directory>":
		os.Mkdir(m.conf, 0o755)
	default:
		if err := os.WriteFile(m.conf, []byte(content), 0o644); err != nil {
			m.fatalf(rt, "%v", err)
		}
	}
	m.confValid = valid
	// A valid file that changes a setting only a start reads restarts the
	// daemon in its process: a clean stop's restore, then a new start
	// that adopts every workload again (as actRestart, with no look in
	// between).
	restart := valid && faultStartOnly(content) != m.d.startOnly
	var emptied []string
	if restart {
		emptied = m.emptiedReleased()
	}
	const (
		reloaded   = `msg="configuration reloaded"`
		kept       = `msg="reload: keeping the running configuration"`
		restarting = `msg="reload: these settings are read at start`
		ready      = `msg=ready`
	)
	ok, keep, restarts, readies := m.d.count(reloaded), m.d.count(kept), m.d.count(restarting), m.d.count(ready)
	m.d.cmd.Process.Signal(syscall.SIGHUP)
	want := map[bool]string{false: "configuration reloaded", true: "a restart in the process and its new start's ready"}[restart]
	if !valid {
		want = "keeping the running configuration"
	}
	m.poll(rt, "the reload's outcome in the log: "+want, func() (bool, string) {
		seen := fmt.Sprintf("reloaded %d→%d, kept %d→%d, restarts %d→%d, ready %d→%d", ok, m.d.count(reloaded),
			keep, m.d.count(kept), restarts, m.d.count(restarting), readies, m.d.count(ready))
		switch {
		case m.d.exited():
			return true, ""
		case !valid:
			return m.d.count(kept) > keep, seen
		case restart:
			return m.d.count(restarting) > restarts && m.d.count(ready) > readies, seen
		}
		return m.d.count(reloaded) > ok, seen
	})
	if m.d.exited() {
		return // the next step's checks say why
	}
	if valid && (m.d.count(restarting) > restarts) != restart {
		m.fatalf(rt, "reload restarted the daemon: %v, want %v (start-only settings %q → %q)", !restart, restart, m.d.startOnly, faultStartOnly(content))
	}
	m.settle(rt)
	if restart {
		m.d.startOnly = faultStartOnly(content)
		if m.managing() {
			m.claimed = map[string][]string{} // every workload reconciled
			m.fillRule(rt, emptied)
		}
	}
}

// faultStartOnly is what of a valid configuration file of
// faultValidConfs only a start reads and no flag of daemonArgs overrides
// (daemon.ReloadNeedsRestart): its recheck_interval line.
func faultStartOnly(content string) string {
	for _, l := range strings.Split(content, "\n") {
		if strings.HasPrefix(l, "recheck_interval") {
			return l
		}
	}
	return ""
}

// actSecond: a second daemon on the same parent, with its own state and
// tree directories (or sharing one of them, or naming the parent through
// a symlink), must not change any cpuset; it must be refused, except
// through the symlink, where it may run without managing anything.
func (m *faultModel) actSecond(rt *rapid.T) {
	if !m.managing() {
		rt.Skip("no daemon manages the parent")
	}
	variant := rapid.SampledFrom([]string{"own dirs", "own dirs", "same state dir", "same tree dir", "symlinked parent"}).Draw(rt, "variant")
	m.step(rt, "second", "%s", variant)
	dir := filepath.Join(m.dir, fmt.Sprintf("second-%d", m.steps))
	state, tree, root := filepath.Join(dir, "state"), filepath.Join(dir, "tree"), m.parent
	switch variant {
	case "same state dir":
		state = m.stateDir
	case "same tree dir":
		tree = m.treeDir
	case "symlinked parent":
		os.MkdirAll(dir, 0o755)
		root = filepath.Join(dir, "link")
		if err := os.Symlink(m.parent, root); err != nil {
			m.fatalf(rt, "%v", err)
		}
	}
	if tree != m.treeDir {
		m.seconds = append(m.seconds, tree)
	}
	before, stateBefore := m.snapshot(), faultRead(filepath.Join(m.stateDir, statefile.StateFile))
	args := m.daemonArgs(root, state, tree)
	args[len(args)-1] = emptyConfIn(dir) // its own, valid configuration
	for i := range args {
		if args[i] == m.fb.bus.Addr {
			args[i] = "none" // the first daemon's bus name and power profiles are its own
		}
	}
	d := m.spawn(rt, "second", args...)
	ready, err := d.waitReady()
	if err != nil {
		d.kill()
		m.logs = append(m.logs, d.logText())
		m.fatalf(rt, "second daemon: %v", err)
	}
	if ready {
		if variant != "symlinked parent" {
			d.kill()
			m.logs = append(m.logs, d.logText())
			m.fatalf(rt, "a second daemon on the parent started (%s)", variant)
		}
		time.Sleep(faultQuiet)
		d.cmd.Process.Signal(syscall.SIGTERM)
		if err := d.waitExit(); err != nil {
			d.kill()
		}
	}
	m.logs = append(m.logs, d.logText())
	if !ready && !strings.Contains(d.logText(), "another") {
		m.fatalf(rt, "second daemon (%s) exited (%v) without saying another one runs", variant, d.err)
	}
	if after := m.snapshot(); after != before {
		m.fatalf(rt, "a second daemon (%s) changed cpusets: %s → %s", variant, before, after)
	}
	if after := faultRead(filepath.Join(m.stateDir, statefile.StateFile)); after != stateBefore {
		m.fatalf(rt, "a second daemon (%s) changed the first one's state.json:\n%s\n→\n%s", variant, stateBefore, after)
	}
	m.settle(rt)
}

func emptyConfIn(dir string) string {
	os.MkdirAll(dir, 0o755)
	p := filepath.Join(dir, "empty.conf")
	os.WriteFile(p, nil, 0o644)
	return p
}

// finish is the final phase: every CPU online (under a managing daemon),
// a clean stop, one more managing run if records may remain, and the
// promise checked.
func (m *faultModel) finish(rt *rapid.T) {
	m.trace = append(m.trace, "final phase")
	if m.realOff || m.mockOff {
		if !m.managing() {
			if m.d != nil {
				m.stopDaemon(rt)
			}
			m.validConf(rt)
			m.startDaemon(rt, "managed", -1)
		}
		m.online(rt)
	}
	if m.d != nil {
		m.stopDaemon(rt)
	}
	if m.recordsMayRemain {
		m.validConf(rt)
		m.startDaemon(rt, "managed", -1)
		m.stopDaemon(rt)
	}
	m.checkRestored(rt, "after the final stop")
}

// flagVisit and flagSet reach the test binary's flags (rapid's).
func flagVisit(fn func(string))  { flag.Visit(func(f *flag.Flag) { fn(f.Name) }) }
func flagSet(name, value string) { flag.Set(name, value) }
