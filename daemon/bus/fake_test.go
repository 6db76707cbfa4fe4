package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// fakeDaemon is an in-memory Controller: as much of the daemon as the
// service's contract needs — the knob and its three files, holds with
// their cookies, a bound on them and their order, a followed profile and
// intel-lpmd's owner — and no I/O. A mutex stands in for the event loop:
// every request takes it, and every change publishes a new snapshot to
// the service as the loop does. calls records each request, in order, as
// a line a test compares exactly (but EndHoldsOf an owner without
// holds).
type fakeDaemon struct {
	snap atomic.Pointer[snapshot.Snapshot]

	mu       sync.Mutex // the loop: guards everything below
	svc      *Service   // published to after each change; nil: nobody
	calls    []string
	knob     policy.Knob
	holds    []snapshot.Hold
	cookie   uint32
	perOwner int   // the most holds of one owner (0: no bound)
	fail     error // the error every request returns instead, nil none
	estimate snapshot.PowerEstimates
	lpmd     string
	// workloads are published as they are; exempt is the exempt list
	// made (SetExempt), published too.
	workloads []snapshot.WorkloadStatus
	exempt    []snapshot.ExemptEntry

	// gate, while set (stall), holds every request back until it is
	// closed or the request's ctx ends, as a busy loop does; waiting
	// counts the requests held.
	gate    atomic.Pointer[chan struct{}]
	waiting atomic.Int32
}

var _ Controller = (*fakeDaemon)(nil)

// errFakeStopped is the fake's "the daemon is stopping".
var errFakeStopped = errors.New("daemon is stopping")

func newFake() *fakeDaemon {
	f := &fakeDaemon{knob: policy.Knob{PowerAware: policy.PowerAwareAuto, PowerAwarePolicy: policy.Powersaving}}
	f.publishLocked()
	return f
}

// serve makes f publish to s.
func (f *fakeDaemon) serve(s *Service) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.svc = s
}

// change runs fn on the fake's loop: a test's change of its behaviour.
func (f *fakeDaemon) change(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

// record notes a request; on the loop.
func (f *fakeDaemon) record(format string, a ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, a...))
}

// log returns the requests made so far.
func (f *fakeDaemon) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// waitCalls waits until the requests made are exactly want.
func (f *fakeDaemon) waitCalls(t *testing.T, want ...string) {
	t.Helper()
	testutil.Eventually(t, "requests "+strings.Join(want, "; "), func() (bool, string) {
		got := f.log()
		return strings.Join(got, "\n") == strings.Join(want, "\n"), strings.Join(got, "; ")
	})
}

// stall holds every request back (do) until release, which the test's
// cleanup calls too: the loop is busy.
func (f *fakeDaemon) stall(t *testing.T) (release func()) {
	g := make(chan struct{})
	f.gate.Store(&g)
	release = sync.OnceFunc(func() {
		f.gate.Store(nil)
		close(g)
	})
	t.Cleanup(release)
	return release
}

// waitHeld waits until n requests are held back (stall).
func (f *fakeDaemon) waitHeld(t *testing.T, n int) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("%d requests waiting for the loop", n), func() (bool, string) {
		got := f.waiting.Load()
		return int(got) == n, fmt.Sprint(got)
	})
}

// do runs fn on the fake's loop, unless f fails every request. Like the
// daemon's, it returns ctx's error if ctx ends before the loop takes the
// request (stall).
func (f *fakeDaemon) do(ctx context.Context, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if g := f.gate.Load(); g != nil {
		f.waiting.Add(1)
		select {
		case <-*g:
			f.waiting.Add(-1)
		case <-ctx.Done():
			f.waiting.Add(-1)
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	return fn()
}

// publishLocked publishes the state as a new snapshot: the effective
// policy is the winning hold's (the most power-saving, the oldest among
// equals), else the knob's on AC.
func (f *fakeDaemon) publishLocked() {
	s := &snapshot.Snapshot{Knob: f.knob, PowerSource: "ac", Policy: policy.Performance, Holds: append([]snapshot.Hold{}, f.holds...),
		Workloads: f.workloads, Exempt: slices.Clone(f.exempt)}
	if f.knob.PowerAware == policy.PowerAwareOn {
		s.Policy = f.knob.PowerAwarePolicy
	}
	rank := map[policy.Policy]int{policy.Performance: 0, policy.Balance: 1, policy.Powersaving: 2}
	for i, h := range f.holds {
		if i == 0 || rank[h.Policy] > rank[s.Policy] {
			s.Policy = h.Policy
		}
	}
	f.snap.Store(s)
	f.svc.Publish(s)
}

// set publishes s as the daemon's latest snapshot.
func (f *fakeDaemon) set(s *snapshot.Snapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snap.Store(s)
	f.svc.Publish(s)
}

func (f *fakeDaemon) Published() *snapshot.Snapshot { return f.snap.Load() }

func (f *fakeDaemon) WriteKnob(ctx context.Context, file, value, via string) error {
	return f.do(ctx, func() error {
		f.record("WriteKnob %s %q %s", file, value, via)
		return f.writeLocked(file, value)
	})
}

// WriteKnobUnlessHeld keeps everything as it is while the winning hold's
// policy (the one publishLocked makes effective) satisfies keep.
func (f *fakeDaemon) WriteKnobUnlessHeld(ctx context.Context, file, value, via string, keep func(policy.Policy) bool) (bool, error) {
	kept := false
	err := f.do(ctx, func() error {
		if len(f.holds) > 0 && keep(f.snap.Load().Policy) {
			f.record("WriteKnobUnlessHeld %s %q %s: kept", file, value, via)
			kept = true
			return nil
		}
		f.record("WriteKnobUnlessHeld %s %q %s", file, value, via)
		return f.writeLocked(file, value)
	})
	return kept, err
}

// writeLocked is a knob write, on the loop: an explicit choice, which
// cancels every hold.
func (f *fakeDaemon) writeLocked(file, value string) error {
	tok, err := policy.ScanToken([]byte(value))
	k := f.knob
	switch {
	case err != nil:
	case file == knobCurrent:
		var p policy.Policy
		if p, err = policy.ParsePolicy(tok); err == nil {
			k = k.WithCurrentPolicy(p)
		}
	case file == knobPowerAware:
		k.PowerAware, err = policy.ParsePowerAware(tok)
	case file == knobPowerAwarePolicy:
		k.PowerAwarePolicy, err = policy.ParsePowerAwarePolicy(tok)
	default:
		return fmt.Errorf("%s is read-only: %w", file, syscall.EACCES)
	}
	if err != nil {
		return fmt.Errorf("%s: %w: %w", file, syscall.EINVAL, err)
	}
	f.knob = k
	f.endLocked(func(snapshot.Hold) bool { return true }, true) // publishes
	return nil
}

func (f *fakeDaemon) AddHold(ctx context.Context, p policy.Policy, reason, owner, appID string) (uint32, error) {
	var cookie uint32
	err := f.do(ctx, func() error {
		f.record("AddHold %s %q %s %q", p, reason, owner, appID)
		n := 0
		for _, h := range f.holds {
			if h.Owner == owner {
				n++
			}
		}
		if f.perOwner > 0 && n >= f.perOwner {
			return fmt.Errorf("%s already has %d holds: %w", owner, n, ErrLimitsExceeded)
		}
		f.cookie++
		cookie = f.cookie
		f.holds = append(f.holds, snapshot.Hold{Cookie: cookie, Policy: p, Reason: reason, Owner: owner, AppID: appID})
		f.publishLocked()
		return nil
	})
	return cookie, err
}

// endLocked ends the holds end says to, announcing each (cancelled: by
// an explicit choice), and publishes.
func (f *fakeDaemon) endLocked(end func(snapshot.Hold) bool, cancelled bool) {
	var keep []snapshot.Hold
	for _, h := range f.holds {
		if end(h) {
			f.svc.HoldEnded(h.Cookie, cancelled)
		} else {
			keep = append(keep, h)
		}
	}
	f.holds = keep
	f.publishLocked()
}

func (f *fakeDaemon) ReleaseHold(ctx context.Context, cookie uint32, owner string, anyOwner bool) error {
	return f.do(ctx, func() error {
		f.record("ReleaseHold %d %s %v", cookie, owner, anyOwner)
		for _, h := range f.holds {
			if h.Cookie == cookie && (anyOwner || h.Owner == owner) {
				f.endLocked(func(h snapshot.Hold) bool { return h.Cookie == cookie }, false)
				return nil
			}
		}
		return fmt.Errorf("%w: no hold %d of yours", policy.ErrInvalid, cookie)
	})
}

func (f *fakeDaemon) EndHold(ctx context.Context, cookie uint32, why string) error {
	return f.do(ctx, func() error {
		f.record("EndHold %d %s", cookie, why)
		f.endLocked(func(h snapshot.Hold) bool { return h.Cookie == cookie }, false)
		return nil
	})
}

// EndHoldsOf an owner without holds is not recorded: every connection
// that leaves the bus is asked about.
func (f *fakeDaemon) EndHoldsOf(ctx context.Context, owner, why string) error {
	return f.do(ctx, func() error {
		if !slices.ContainsFunc(f.holds, func(h snapshot.Hold) bool { return h.Owner == owner }) {
			return nil
		}
		f.record("EndHoldsOf %s %s", owner, why)
		f.endLocked(func(h snapshot.Hold) bool { return h.Owner == owner }, false)
		return nil
	})
}

func (f *fakeDaemon) EndAllHolds(ctx context.Context, why string) error {
	return f.do(ctx, func() error {
		f.record("EndAllHolds %s", why)
		f.endLocked(func(snapshot.Hold) bool { return true }, false)
		return nil
	})
}

func (f *fakeDaemon) CreateWorkload(ctx context.Context, name string, pid int) (string, error) {
	path := "/cgroup/" + name
	err := f.do(ctx, func() error {
		f.record("CreateWorkload %s %d", name, pid)
		return nil
	})
	return path, err
}

func (f *fakeDaemon) SetWorkloadPolicy(ctx context.Context, name string, p policy.Policy) error {
	return f.do(ctx, func() error {
		f.record("SetWorkloadPolicy %s %q", name, p)
		return nil
	})
}

func (f *fakeDaemon) SetExempt(ctx context.Context, entry string, on bool) (bool, error) {
	var changed bool
	err := f.do(ctx, func() error {
		f.record("SetExempt %s %v", entry, on)
		i := slices.IndexFunc(f.exempt, func(x snapshot.ExemptEntry) bool { return x.Entry == entry })
		switch {
		case on && i < 0:
			f.exempt = append(f.exempt, snapshot.ExemptEntry{Entry: entry, From: "state"})
		case !on && i >= 0:
			f.exempt = slices.Delete(f.exempt, i, i+1)
		case !on:
			return fmt.Errorf("%w: %q is not exempt", policy.ErrInvalid, entry)
		default:
			return nil
		}
		changed = true
		f.publishLocked()
		return nil
	})
	return changed, err
}

func (f *fakeDaemon) ResetKnob(ctx context.Context) error {
	return f.do(ctx, func() error { f.record("ResetKnob"); return nil })
}

func (f *fakeDaemon) Rebalance(ctx context.Context) error {
	return f.do(ctx, func() error { f.record("Rebalance"); return nil })
}

func (f *fakeDaemon) RefreshEnergy(ctx context.Context) error {
	return f.do(ctx, func() error { f.record("RefreshEnergy"); return nil })
}

func (f *fakeDaemon) EstimatePower(ctx context.Context) (snapshot.PowerEstimates, error) {
	var e snapshot.PowerEstimates
	err := f.do(ctx, func() error {
		f.record("EstimatePower")
		e = f.estimate
		return nil
	})
	return e, err
}

func (f *fakeDaemon) FollowProfile(ctx context.Context, name, owner, profile string, current func() bool) error {
	return f.do(ctx, func() error {
		if current() {
			f.record("FollowProfile %s %s %s", name, owner, profile)
		}
		return nil
	})
}

func (f *fakeDaemon) Unfollow(ctx context.Context, why string) error {
	return f.do(ctx, func() error { f.record("Unfollow %s", why); return nil })
}

func (f *fakeDaemon) SetLpmdOwner(ctx context.Context, owner string, current func() bool) error {
	return f.do(ctx, func() error {
		if current() && owner != f.lpmd {
			f.lpmd = owner
			f.record("SetLpmdOwner %q", owner)
		}
		return nil
	})
}

// started is a Service of a fakeDaemon on a private bus, and a root
// client connection to that bus.
type started struct {
	f      *fakeDaemon
	svc    *Service
	addr   string
	client *dbus.Conn
	log    *logtest.Hook // the service's log entries
}

// testLogger is a logger for code that may still log after the test: it
// keeps every line and hands them to t.Log when the test fails, from a
// cleanup (t.Log itself must not be called once the test is over).
func testLogger(t *testing.T) *logrus.Logger {
	var mu sync.Mutex
	var b strings.Builder
	l := logrus.New()
	l.SetLevel(logrus.DebugLevel)
	l.SetOutput(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return b.Write(p)
	}))
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			defer mu.Unlock()
			t.Log("the service's log:\n" + b.String())
		}
	})
	return l
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// startService runs the service of a new fakeDaemon on addr (a private
// bus of its own when ""), with cfg's power-profiles settings (Bus and
// Log are set here), once it owns Name; the test's cleanup closes it.
func startService(t *testing.T, addr string, cfg Config) started {
	t.Helper()
	if addr == "" {
		addr = testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr
	}
	log := testLogger(t)
	hook := logtest.NewLocal(log)
	cfg.Bus, cfg.Log = addr, log
	if cfg.PowerProfilesAPI == "" {
		cfg.PowerProfilesAPI = PowerProfilesOff
	}
	f := newFake()
	svc := New(cfg, f)
	f.serve(svc)
	if err := svc.Connect(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	client := testutil.Connect(t, addr)
	return started{f: f, svc: svc, addr: addr, client: client, log: hook}
}

func (s started) obj() dbus.BusObject { return s.client.Object(Name, ObjectPath) }

func dbusErrName(err error) string {
	var e dbus.Error
	if errors.As(err, &e) {
		return e.Name
	}
	return fmt.Sprint(err)
}

// nextSignal returns the next signal on ch whose name is name ("": any).
func nextSignal(t *testing.T, ch chan *dbus.Signal, name string) *dbus.Signal {
	t.Helper()
	timeout := time.After(testutil.DefaultBound)
	for {
		select {
		case s := <-ch:
			if name == "" || s.Name == name {
				return s
			}
		case <-timeout:
			t.Fatalf("no %s signal", name)
		}
	}
}
