package bus

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/cgroup"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// The contract of Interface's methods and writable properties, against a
// fake daemon: what each call asks the daemon (exactly, in order), what
// it answers, and which calls never reach it.

// TestMethodsForwarded: every method and setter called by root with good
// arguments makes exactly one request of the daemon, with the caller's
// arguments as they came, and answers with what the daemon answered.
func TestMethodsForwarded(t *testing.T) {
	st := startService(t, "", Config{})
	st.f.change(func() {
		st.f.estimate = snapshot.PowerEstimates{Model: "snb-laptop-4c8t", Note: "", Policies: []snapshot.PowerEstimate{
			{Policy: policy.Performance, Watts: 20.5, PackageWatts: 12.5},
			{Policy: policy.Powersaving, Watts: 14, PackageWatts: 6},
		}, Models: []snapshot.ModelEstimates{
			{Model: "snb-laptop-4c8t", Policies: []snapshot.PowerEstimate{
				{Policy: policy.Performance, Watts: 20.5, PackageWatts: 12.5},
				{Policy: policy.Powersaving, Watts: 14, PackageWatts: 6},
			}},
			{Model: "m1-measured", Policies: []snapshot.PowerEstimate{
				{Policy: policy.Performance, Watts: 18, PackageWatts: 6},
				{Policy: policy.Powersaving, Watts: 17.25, PackageWatts: 5.25},
			}},
		}, Spread: []snapshot.PolicySpread{
			{Policy: policy.Performance, LowWatts: 18, HighWatts: 20.5, LowPackageWatts: 6, HighPackageWatts: 12.5},
			{Policy: policy.Powersaving, LowWatts: 14, HighWatts: 17.25, LowPackageWatts: 5.25, HighPackageWatts: 6,
				VsPerformance: policy.Effect{Watts: -0.75, Spread: 5.75}},
		}}
	})
	me := st.client.Names()[0]
	obj := st.obj()
	call := func(method string, args ...any) *dbus.Call {
		t.Helper()
		c := obj.Call(Interface+"."+method, 0, args...)
		if c.Err != nil {
			t.Fatalf("%s%v: %v", method, args, c.Err)
		}
		return c
	}
	var want []string
	expect := func(lines ...string) {
		t.Helper()
		want = append(want, lines...)
		if got := st.f.log(); !reflect.DeepEqual(got, want) {
			t.Fatalf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}

	call("SetPolicy", "powersaving")
	expect(`WriteKnob current_sched_policy "powersaving" dbus`)
	call("SetPowerAware", uint32(0))
	expect(`WriteKnob power_aware "0" dbus`)
	if err := obj.SetProperty(Interface+".PowerAware", dbus.MakeVariant(uint32(2))); err != nil {
		t.Fatal(err)
	}
	expect(`WriteKnob power_aware "2" dbus`)
	if err := obj.SetProperty(Interface+".PowerAwarePolicy", dbus.MakeVariant("balance")); err != nil {
		t.Fatal(err)
	}
	expect(`WriteKnob power_aware_policy "balance" dbus`)

	var cookie uint32
	if err := call("HoldPolicy", "performance", "benchmark").Store(&cookie); err != nil || cookie != 1 {
		t.Fatalf("HoldPolicy cookie %d, %v; want 1", cookie, err)
	}
	expect(fmt.Sprintf(`AddHold performance "benchmark" %s ""`, me))
	call("ReleasePolicy", cookie)
	expect(fmt.Sprintf("ReleaseHold 1 %s true", me)) // root may release any

	pid := uint32(os.Getpid())
	var path string
	if err := call("CreateWorkload", "job", pid).Store(&path); err != nil || path != "/cgroup/job" {
		t.Fatalf("CreateWorkload = %q, %v; want the daemon's /cgroup/job", path, err)
	}
	expect(fmt.Sprintf("CreateWorkload job %d", pid))
	call("SetWorkloadPolicy", "job", "performance")
	call("SetWorkloadPolicy", "job", "")
	expect(`SetWorkloadPolicy job "performance"`, `SetWorkloadPolicy job ""`)
	call("Rebalance")
	call("RefreshEnergy")
	call("ResetKnob")
	expect("Rebalance", "RefreshEnergy", "ResetKnob")

	var model, note string
	var est []estimateEntry
	if err := call("EstimatePower").Store(&model, &note, &est); err != nil {
		t.Fatal(err)
	}
	wantEst := []estimateEntry{{"performance", 20.5, 12.5}, {"powersaving", 14, 6}}
	if model != "snb-laptop-4c8t" || note != "" || !reflect.DeepEqual(est, wantEst) {
		t.Errorf("EstimatePower = %q %q %+v, want the daemon's snb-laptop-4c8t \"\" %+v", model, note, est, wantEst)
	}
	expect("EstimatePower")

	// Every model's estimate, model by model, and each policy's spread,
	// as the daemon answered them.
	var est2 []modelEstimateEntry
	var spread []policySpreadEntry
	if err := call("EstimatePowerModels").Store(&model, &note, &est2, &spread); err != nil {
		t.Fatal(err)
	}
	wantEst2 := []modelEstimateEntry{
		{"snb-laptop-4c8t", "performance", 20.5, 12.5}, {"snb-laptop-4c8t", "powersaving", 14, 6},
		{"m1-measured", "performance", 18, 6}, {"m1-measured", "powersaving", 17.25, 5.25},
	}
	wantSpread := []policySpreadEntry{
		{"performance", 18, 20.5, 6, 12.5, 0, 0, false},
		{"powersaving", 14, 17.25, 5.25, 6, -0.75, 5.75, false},
	}
	if model != "snb-laptop-4c8t" || note != "" || !reflect.DeepEqual(est2, wantEst2) || !reflect.DeepEqual(spread, wantSpread) {
		t.Errorf("EstimatePowerModels = %q %q %+v %+v, want %+v %+v", model, note, est2, spread, wantEst2, wantSpread)
	}
	expect("EstimatePower")
}

// TestMethodsRefuseBadArguments: a call whose signature or value the
// service can judge itself is answered with its error and never reaches
// the daemon; a value only the daemon can judge gets the daemon's error
// as InvalidArgs.
func TestMethodsRefuseBadArguments(t *testing.T) {
	st := startService(t, "", Config{})
	obj := st.obj()
	pid := uint32(os.Getpid())
	for _, tc := range []struct {
		method string
		args   []any
		name   string // the error's name
		msg    string // its message
	}{
		// Arguments godbus converts (a uint32 1 into the string "\x01", an
		// int32 into a uint32) reach the method, which checks its
		// signature first.
		{"SetPolicy", []any{uint32(1)}, errInvalidArgs, `SetPolicy takes signature "s", got "u"`},
		{"SetPowerAware", []any{int32(2)}, errInvalidArgs, `SetPowerAware takes signature "u", got "i"`},
		{"HoldPolicy", []any{"balance", uint32(1)}, errInvalidArgs, `HoldPolicy takes signature "ss", got "su"`},
		{"ReleasePolicy", []any{int32(1)}, errInvalidArgs, `ReleasePolicy takes signature "u", got "i"`},
		{"CreateWorkload", []any{"job", int32(1)}, errInvalidArgs, `CreateWorkload takes signature "su", got "si"`},
		{"SetWorkloadPolicy", []any{"job", uint32(1)}, errInvalidArgs, `SetWorkloadPolicy takes signature "ss", got "su"`},
		// Others godbus refuses itself.
		{"Rebalance", []any{"now"}, errInvalidArgs, "Invalid type / number of args"},
		{"HoldPolicy", []any{"balance"}, errInvalidArgs, "Invalid type / number of args"},
		{"RefreshEnergy", []any{"x"}, errInvalidArgs, "Invalid type / number of args"},
		{"EstimatePower", []any{uint32(0)}, errInvalidArgs, "Invalid type / number of args"},
		{"EstimatePowerModels", []any{"x"}, errInvalidArgs, "Invalid type / number of args"},
		// Values the service judges.
		{"HoldPolicy", []any{"turbo", "r"}, errInvalidArgs, `invalid value: policy "turbo" is not one of performance, balance, powersaving`},
		{"HoldPolicy", []any{"balance", strings.Repeat("r", 257)}, errInvalidArgs, "reason longer than 256 bytes"},
		{"CreateWorkload", []any{"../escape", pid}, errInvalidArgs, ""}, // names.Workload's words
		{"CreateWorkload", []any{"a/b", pid}, errInvalidArgs, ""},
		{"CreateWorkload", []any{"..", pid}, errInvalidArgs, ""},
		{"CreateWorkload", []any{"tab\there", pid}, errInvalidArgs, ""},
		{"CreateWorkload", []any{"cgroup.procs", pid}, errInvalidArgs, ""},
		{"CreateWorkload", []any{strings.Repeat("x", 65), pid}, errInvalidArgs, ""},
		{"CreateWorkload", []any{"job", uint32(1)}, errAccessDenied, fmt.Sprintf("PID 1 is not the caller's process (%d)", pid)},
		{"SetWorkloadPolicy", []any{"job", "turbo"}, errInvalidArgs, `invalid value: policy "turbo" is not one of performance, balance, powersaving`},
	} {
		err := obj.Call(Interface+"."+tc.method, 0, tc.args...).Err
		var de dbus.Error
		if !errors.As(err, &de) || de.Name != tc.name || (tc.msg != "" && de.Error() != tc.msg) {
			t.Errorf("%s%q = %v, want %s %q", tc.method, tc.args, err, tc.name, tc.msg)
		}
	}
	if got := st.f.log(); len(got) != 0 {
		t.Fatalf("refused calls reached the daemon: %q", got)
	}

	// The daemon's own refusal: its error, as InvalidArgs.
	err := obj.Call(Interface+".SetPolicy", 0, "Performance").Err
	if dbusErrName(err) != errInvalidArgs || !strings.HasPrefix(err.Error(), "current_sched_policy: invalid argument: ") {
		t.Errorf("SetPolicy(Performance) = %v, want the daemon's InvalidArgs", err)
	}
	st.f.waitCalls(t, `WriteKnob current_sched_policy "Performance" dbus`)
}

// TestPropertiesSetRefused: Properties.Set answers a read-only, unknown
// or mistyped property, or another interface, with the error clients
// expect, without asking the daemon.
func TestPropertiesSetRefused(t *testing.T) {
	st := startService(t, "", Config{})
	for _, tc := range []struct {
		iface, name string
		value       any
		want, msg   string
	}{
		{Interface, "ActivePolicy", "balance", errPropReadOnly, "ActivePolicy is read-only"},
		{Interface, "Holds", "x", errPropReadOnly, "Holds is read-only"},
		{Interface, "Boost", "1", errPropReadOnly, "Boost is read-only"},
		{Interface, "NoSuchProperty", "x", errUnknownProp, "no property NoSuchProperty"},
		{"org.example.Other", "PowerAware", uint32(1), errUnknownIface, "no interface org.example.Other"},
		{Interface, "PowerAware", "2", errInvalidArgs, "PowerAware is of type u, got s"},
		{Interface, "PowerAwarePolicy", uint32(1), errInvalidArgs, "PowerAwarePolicy is of type s, got u"},
	} {
		err := st.obj().Call(propsIface+".Set", 0, tc.iface, tc.name, dbus.MakeVariant(tc.value)).Err
		var de dbus.Error
		if !errors.As(err, &de) || de.Name != tc.want || de.Error() != tc.msg {
			t.Errorf("Set %s.%s = %v: %v, want %s %q", tc.iface, tc.name, tc.value, err, tc.want, tc.msg)
		}
	}
	if got := st.f.log(); len(got) != 0 {
		t.Fatalf("refused sets reached the daemon: %q", got)
	}
}

// TestControllerErrorsAnswered: each kind of error the daemon returns is
// answered with its D-Bus error name and the error's own text.
func TestControllerErrorsAnswered(t *testing.T) {
	st := startService(t, "", Config{})
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("power_aware: %w: bad", syscall.EINVAL), errInvalidArgs},
		{fmt.Errorf("%w: no workload %q", policy.ErrInvalid, "job"), errInvalidArgs},
		{fmt.Errorf("%w %q", cgroup.ErrCgroupName, "a\x01"), errInvalidArgs},
		{fmt.Errorf(":1.7 already has 16 holds: %w", ErrLimitsExceeded), errLimitsExceeded},
		{fmt.Errorf("workload %q already exists: %w", "job", fs.ErrExist), errFileExists},
		{errFakeStopped, "org.freedesktop.DBus.Error.Failed"},
	} {
		st.f.change(func() { st.f.fail = tc.err })
		err := st.obj().Call(Interface+".SetWorkloadPolicy", 0, "job", "performance").Err
		var de dbus.Error
		if !errors.As(err, &de) || de.Name != tc.want || de.Error() != tc.err.Error() {
			t.Errorf("daemon error %q: answered %v, want %s with the same text", tc.err, err, tc.want)
		}
	}
}

// TestHoldsBoundedByDaemon: the daemon's bound on holds reaches the
// caller as LimitsExceeded with the daemon's words, and no hold is kept.
func TestHoldsBoundedByDaemon(t *testing.T) {
	st := startService(t, "", Config{})
	st.f.change(func() { st.f.perOwner = 2 })
	me := st.client.Names()[0]
	for range 2 {
		if err := st.obj().Call(Interface+".HoldPolicy", 0, "balance", "r").Err; err != nil {
			t.Fatal(err)
		}
	}
	err := st.obj().Call(Interface+".HoldPolicy", 0, "balance", "r").Err
	if want := me + " already has 2 holds: limits exceeded"; dbusErrName(err) != errLimitsExceeded || err.Error() != want {
		t.Fatalf("third hold: %v, want %s %q", err, errLimitsExceeded, want)
	}
	if hs := st.f.Published().Holds; len(hs) != 2 {
		t.Errorf("%d holds after a refused one, want 2", len(hs))
	}
}

// TestHoldEndsWhenHolderLeaves: a holder that leaves the bus has its
// holds ended, as the bus daemon announces it; the holds of a holder that
// stays are left alone.
func TestHoldEndsWhenHolderLeaves(t *testing.T) {
	st := startService(t, "", Config{})
	holder, err := dbus.Connect(st.addr)
	if err != nil {
		t.Fatal(err)
	}
	h := holder.Names()[0]
	if err := holder.Object(Name, ObjectPath).Call(Interface+".HoldPolicy", 0, "powersaving", "leaving").Err; err != nil {
		t.Fatal(err)
	}
	me := st.client.Names()[0]
	if err := st.obj().Call(Interface+".HoldPolicy", 0, "balance", "staying").Err; err != nil {
		t.Fatal(err)
	}
	holder.Close()
	st.f.waitCalls(t,
		fmt.Sprintf(`AddHold powersaving "leaving" %s ""`, h),
		fmt.Sprintf(`AddHold balance "staying" %s ""`, me),
		fmt.Sprintf("EndHoldsOf %s holder left the bus", h),
	)
	var holds [][]any
	if err := st.obj().StoreProperty(Interface+".Holds", &holds); err != nil {
		t.Fatal(err)
	}
	if want := [][]any{{uint32(2), "balance", "staying", me}}; !reflect.DeepEqual(holds, want) {
		t.Errorf("Holds = %v, want %v", holds, want)
	}
}

// TestSettersRefusedToOthers: on a bus with the system bus's policy and
// the package's, uid 65534 (no polkit to ask) is refused every setter
// with AccessDenied, saying why, and none reaches the daemon; reading,
// RefreshEnergy, EstimatePower and EstimatePowerModels are open to it.
func TestSettersRefusedToOthers(t *testing.T) {
	pbus := testutil.StartSystemPolicyBus(t, "../../packaging/dbus/org.schedpolicyd.SchedPolicy1.conf")
	st := startService(t, pbus.Addr, Config{})
	nobody := testutil.DialAs(t, pbus.Addr, 65534)
	obj := nobody.Object(Name, ObjectPath)
	for _, c := range []struct {
		method string
		args   []any
	}{
		{"SetPolicy", []any{"powersaving"}},
		{"SetPowerAware", []any{uint32(2)}},
		{"Rebalance", nil},
		{"ResetKnob", nil},
		{"HoldPolicy", []any{"powersaving", "r"}},
		{"ReleasePolicy", []any{uint32(1)}},
		{"CreateWorkload", []any{"job", uint32(os.Getpid())}},
		{"SetWorkloadPolicy", []any{"job", "performance"}},
	} {
		err := obj.Call(Interface+"."+c.method, 0, c.args...).Err
		if dbusErrName(err) != errAccessDenied || !strings.HasPrefix(err.Error(), "not authorised: uid 65534 is not root and polkit could not be asked") {
			t.Errorf("%s as uid 65534: %v, want AccessDenied saying polkit could not be asked", c.method, err)
		}
	}
	if err := obj.SetProperty(Interface+".PowerAware", dbus.MakeVariant(uint32(0))); dbusErrName(err) != errAccessDenied {
		t.Errorf("Set PowerAware as uid 65534: %v, want AccessDenied", err)
	}
	if got := st.f.log(); len(got) != 0 {
		t.Fatalf("refused calls reached the daemon: %q", got)
	}
	var p string
	if err := obj.StoreProperty(Interface+".ActivePolicy", &p); err != nil || p != "performance" {
		t.Errorf("ActivePolicy read by uid 65534: %q, %v", p, err)
	}
	for _, m := range []string{"RefreshEnergy", "EstimatePower", "EstimatePowerModels"} {
		if err := obj.Call(Interface+"."+m, 0).Err; err != nil {
			t.Errorf("%s as uid 65534: %v, want it allowed", m, err)
		}
	}
	st.f.waitCalls(t, "RefreshEnergy", "EstimatePower", "EstimatePower")
}
