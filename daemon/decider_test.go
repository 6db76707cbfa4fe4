package daemon

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// The decision's tables: the decider (decider.go) driven by the events
// the loop hands it — tree writes, power-source and charge readings, a
// restart from state.json, holds, followed profiles — each step checked
// against the policy it publishes, with exact values and on an injected
// clock. No daemon runs.

// t0 is the tables' clock: step i happens at t0 + i seconds.
var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// Power readings of the tables, with the reason acpi gives them.
var (
	onAC      = acpi.Decision{Source: acpi.AC, Reason: "AC online"}
	onBattery = acpi.Decision{Source: acpi.Battery, Reason: "BAT0 discharging, AC offline"}
)

// decisionStep is one event of a table (do) and the decision published
// after it: the power source, the knob and the policy, and, where given,
// the policy's reason ("" not checked).
type decisionStep struct {
	what   string
	do     func(t *testing.T, c *decider)
	src    acpi.Source
	knob   policy.Knob
	pol    policy.Policy
	reason string
}

// runSteps runs steps on c in order, deciding after each (settle, at t0
// plus the step's index in seconds), and checks what a snapshot would
// publish.
func runSteps(t *testing.T, c *decider, steps []decisionStep) {
	t.Helper()
	for i, s := range steps {
		if s.do != nil {
			s.do(t, c)
		}
		c.settle(t0.Add(time.Duration(i) * time.Second))
		var got snapshot.Snapshot
		c.inForce(&got)
		if got.PowerSource != s.src || got.Knob != s.knob || got.Policy != s.pol || (s.reason != "" && got.PolicyReason != s.reason) {
			t.Errorf("step %d, %s: %s %+v %s (%q); want %s %+v %s (%q)", i, s.what, got.PowerSource, got.Knob, got.Policy, got.PolicyReason, s.src, s.knob, s.pol, s.reason)
		}
	}
}

// write is a write of v to the tree file named file: knobWrite's change
// of the knob in force, chosen explicitly (what Daemon.writeFile hands
// setKnob).
func write(file, v string) func(*testing.T, *decider) {
	return func(t *testing.T, c *decider) {
		t.Helper()
		apply, err := knobWrite(file, []byte(v))
		if err != nil {
			t.Fatal(err)
		}
		k := apply(c.knob)
		if err := k.Validate(); err != nil {
			t.Fatal(err)
		}
		c.choose(k, true, tChosen)
	}
}

// power is a reading of the power monitor, p with the charge pct (-1
// unknown), as Daemon.onPowerState hands it over: the reading, then, on a
// change of source, the knob of the new source.
func power(p acpi.Decision, pct int) func(*testing.T, *decider) {
	return func(t *testing.T, c *decider) {
		from := c.power.Source
		c.setPower(p, pct)
		if from != p.Source {
			c.knobForSource(from, p.Source, tChosen)
		}
	}
}

// restart replaces c by the decider a daemon starting on p makes from the
// state.json c's daemon saved (through a real state directory): loadState,
// the first reading, startKnobForSource.
func restart(p acpi.Decision) func(*testing.T, *decider) {
	return func(t *testing.T, c *decider) {
		t.Helper()
		dir := t.TempDir()
		s := statefile.NewStore(dir, statefile.State{}, testutil.Logger(t))
		c.putState(s)
		if err := s.Save(); err != nil {
			t.Fatal(err)
		}
		loaded, err := statefile.LoadState(dir)
		if err != nil {
			t.Fatal(err)
		}
		n := newDecider(c.set)
		n.loadState(loaded)
		n.power = p
		n.startKnobForSource(tChosen)
		*c = *n
	}
}

// startOn is a new decider with the settings set, started on p from the
// state st (as restart).
func startOn(set decisionSettings, st statefile.State, p acpi.Decision) *decider {
	c := newDecider(set)
	c.loadState(st)
	c.power = p
	c.startKnobForSource(tChosen)
	return c
}

// TestDeciderChoicePerPowerSource: a choice made on AC stays on AC, one
// made on battery stays on battery; a source without a choice gets the
// default; both are what state.json's "choices" holds and are used after
// a restart.
func TestDeciderChoicePerPowerSource(t *testing.T) {
	def := policy.DefaultKnob()
	off := policy.Knob{PowerAware: policy.PowerAwareOff, PowerAwarePolicy: policy.Powersaving}
	bal := policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Balance}
	// balance is power_aware_policy once chosen on battery, on every
	// source (a setting); AC's power_aware stays its own.
	offBal := policy.Knob{PowerAware: policy.PowerAwareOff, PowerAwarePolicy: policy.Balance}
	c := startOn(decisionSettings{}, statefile.State{}, onAC)
	runSteps(t, c, []decisionStep{
		{"start on AC", nil, acpi.AC, def, policy.Performance, ""},
		{"AC choice 0", write(filePowerAware, "0"), acpi.AC, off, policy.Performance, ""},
		{"battery without a choice: the default", power(onBattery, -1), acpi.Battery, def, policy.Powersaving, ""},
		{"battery choice balance", write(fileCurrent, "balance"), acpi.Battery, bal, policy.Balance, ""},
		{"back on AC: the AC choice", power(onAC, -1), acpi.AC, offBal, policy.Performance, ""},
		{"on battery again: its choice", power(onBattery, -1), acpi.Battery, bal, policy.Balance, ""},
	})
	if want := map[string]policy.Knob{"ac": offBal, "battery": bal}; !reflect.DeepEqual(c.choices, want) {
		t.Errorf("choices = %v, want %v", c.choices, want)
	}
	runSteps(t, c, []decisionStep{{"restart on AC: the AC choice", restart(onAC), acpi.AC, offBal, policy.Performance, ""}})
}

// TestDeciderPowerAwarePolicyEverySource: power_aware_policy is a
// setting, not a per-source choice: set on AC, it is what battery uses
// (with battery's own power_aware, remembered or the default); set on
// battery, AC has it too; it survives a restart on either source.
func TestDeciderPowerAwarePolicyEverySource(t *testing.T) {
	autoBal := policy.Knob{PowerAware: policy.PowerAwareAuto, PowerAwarePolicy: policy.Balance}
	autoSave := policy.Knob{PowerAware: policy.PowerAwareAuto, PowerAwarePolicy: policy.Powersaving}
	onSave := policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Powersaving}
	onBal := policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Balance}
	c := startOn(decisionSettings{}, statefile.State{}, onAC)
	runSteps(t, c, []decisionStep{
		// On AC, "what to use on battery": balance.
		{"AC: the setting written", write(filePowerAwarePolicy, "balance"), acpi.AC, autoBal, policy.Performance, ""},
		{"battery without a choice uses it", power(onBattery, -1), acpi.Battery, autoBal, policy.Balance, ""},
		// On battery: a choice of power_aware 2, then the setting back to
		// powersaving; AC gets the setting, keeping its own power_aware.
		{"battery choice 2", write(filePowerAware, "2"), acpi.Battery, onBal, policy.Balance, ""},
		{"battery: the setting written", write(filePowerAwarePolicy, "powersaving"), acpi.Battery, onSave, policy.Powersaving, ""},
		{"AC: its choice, with the setting", power(onAC, -1), acpi.AC, autoSave, policy.Performance, ""},
		// Back on AC, balance again; battery's remembered choice has it.
		{"AC: balance again", write(filePowerAwarePolicy, "balance"), acpi.AC, autoBal, policy.Performance, ""},
	})
	if want := map[string]policy.Knob{"ac": autoBal, "battery": onBal}; !reflect.DeepEqual(c.choices, want) {
		t.Errorf("choices = %v, want %v", c.choices, want)
	}
	runSteps(t, c, []decisionStep{{"restart on battery: its choice with the setting", restart(onBattery), acpi.Battery, onBal, policy.Balance, ""}})
}

// TestDeciderStateWithoutChoicesCarriesOver: a state.json without
// "choices" (from before) loads as before: the chosen knob carries over
// to battery.
func TestDeciderStateWithoutChoicesCarriesOver(t *testing.T) {
	bal := policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Balance}
	c := startOn(decisionSettings{}, statefile.State{Knob: bal, Chosen: true}, onAC)
	runSteps(t, c, []decisionStep{
		{"the saved knob", nil, acpi.AC, bal, policy.Balance, ""},
		{"carried over to battery", power(onBattery, -1), acpi.Battery, bal, policy.Balance, ""},
	})
}

// TestDeciderChooseUnchanged: choosing the knob already chosen changes
// nothing (the caller then only cancels the holds); a followed profile's
// knob is not remembered per source, but its power_aware_policy is the
// setting of every remembered choice; restore puts back what choose
// changed.
func TestDeciderChooseUnchanged(t *testing.T) {
	bal := policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Balance}
	c := startOn(decisionSettings{}, statefile.State{}, onBattery)
	if _, changed := c.choose(bal, true, tChosen); !changed {
		t.Fatal("a first choice changed nothing")
	}
	choices := c.choices
	if _, changed := c.choose(bal, true, tChosen); changed || !reflect.DeepEqual(c.choices, choices) {
		t.Errorf("the same choice again: changed %v, choices %v; want false, %v", changed, c.choices, choices)
	}
	auto := policy.Knob{PowerAware: policy.PowerAwareAuto, PowerAwarePolicy: policy.Powersaving}
	prev, changed := c.choose(auto, false, tChosen)
	if want := map[string]policy.Knob{"battery": {PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Powersaving}}; !changed || c.knob != auto || !c.knobChosen || !reflect.DeepEqual(c.choices, want) {
		t.Errorf("not explicit: changed %v, knob %+v chosen %v, choices %v; want true, %+v true, %v", changed, c.knob, c.knobChosen, c.choices, auto, want)
	}
	c.restore(prev)
	if c.knob != bal || !c.knobChosen || !reflect.DeepEqual(c.choices, choices) {
		t.Errorf("restored: knob %+v chosen %v, choices %v; want %+v true, %v", c.knob, c.knobChosen, c.choices, bal, choices)
	}
	if choices["battery"] != bal {
		t.Errorf("choose wrote into the saved map: %v", choices)
	}
}

// TestDeciderReloadDefault: a reload's default knob becomes the knob
// while no choice is in force, and is what a source without a remembered
// choice gets; it is not applied over a choice (overridden); no default,
// or the knob in force, changes nothing.
func TestDeciderReloadDefault(t *testing.T) {
	on := policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Balance}
	off := policy.Knob{PowerAware: policy.PowerAwareOff, PowerAwarePolicy: policy.Powersaving}
	reload := func(def *policy.Knob, applied, overridden bool) func(*testing.T, *decider) {
		return func(t *testing.T, c *decider) {
			t.Helper()
			if a, o := c.reloadDefault(def); a != applied || o != overridden {
				t.Errorf("reload %v: applied %v, overridden %v; want %v, %v", def, a, o, applied, overridden)
			}
		}
	}
	c := startOn(decisionSettings{}, statefile.State{}, onAC)
	runSteps(t, c, []decisionStep{
		{"no default", reload(nil, false, false), acpi.AC, policy.DefaultKnob(), policy.Performance, ""},
		{"default 2, balance", reload(&on, true, false), acpi.AC, on, policy.Balance, ""},
		{"the same again", reload(&on, false, false), acpi.AC, on, policy.Balance, ""},
		{"an explicit choice", write(filePowerAware, "0"), acpi.AC, policy.Knob{PowerAware: policy.PowerAwareOff, PowerAwarePolicy: policy.Balance}, policy.Performance, ""},
		{"default 0 over a choice", reload(&off, false, true), acpi.AC, policy.Knob{PowerAware: policy.PowerAwareOff, PowerAwarePolicy: policy.Balance}, policy.Performance, ""},
		{"battery without a choice: the default of the reload", power(onBattery, -1), acpi.Battery, policy.Knob{PowerAware: policy.PowerAwareOff, PowerAwarePolicy: policy.Balance}, policy.Performance, ""},
	})
	if c.knobChosen {
		t.Error("battery's knob is chosen; want the configured default")
	}
}

// TestDeciderLowBatteryTier: automatic mode with power_aware_policy
// balance and low_battery 20. On battery at 50 % balance; below 20 %
// powersaving with the reason; back at 22 % and 24 % still powersaving
// (hysteresis 5 points); at 25 % balance again; on AC at 10 % performance. Each change
// of the tier is reported once, and the policy's last change is the
// step's instant.
func TestDeciderLowBatteryTier(t *testing.T) {
	autoBal := policy.Knob{PowerAware: policy.PowerAwareAuto, PowerAwarePolicy: policy.Balance}
	set := decisionSettings{DefaultKnob: &autoBal, LowBattery: 20}
	c := startOn(set, statefile.State{}, onAC)
	c.setPower(onAC, 50)
	var tiers []bool
	reading := func(p acpi.Decision, pct int) func(*testing.T, *decider) {
		return func(t *testing.T, c *decider) {
			if c.setPower(p, pct) {
				tiers = append(tiers, c.lowBattery)
			}
		}
	}
	why := onBattery.Reason
	runSteps(t, c, []decisionStep{
		{"AC at 50%", nil, acpi.AC, autoBal, policy.Performance, ""},
		{"battery at 50%: balance", reading(onBattery, 50), acpi.Battery, autoBal, policy.Balance, "power_aware=1 (automatic) and the machine runs on battery: " + why},
		{"19%: powersaving", reading(onBattery, 19), acpi.Battery, autoBal, policy.Powersaving, "power_aware=1 (automatic), the machine runs on battery and the system batteries are at 19%, below low_battery 20% (powersaving until 25%): " + why},
		{"22%: still powersaving", reading(onBattery, 22), acpi.Battery, autoBal, policy.Powersaving, "power_aware=1 (automatic), the machine runs on battery and the system batteries are at 22%, not yet back 5 points above low_battery 20% (powersaving until 25%): " + why},
		{"24%: still powersaving", reading(onBattery, 24), acpi.Battery, autoBal, policy.Powersaving, "power_aware=1 (automatic), the machine runs on battery and the system batteries are at 24%, not yet back 5 points above low_battery 20% (powersaving until 25%): " + why},
		{"25%: balance again", reading(onBattery, 25), acpi.Battery, autoBal, policy.Balance, "power_aware=1 (automatic) and the machine runs on battery: " + why},
		{"10% on battery: powersaving", reading(onBattery, 10), acpi.Battery, autoBal, policy.Powersaving, ""},
		{"10% on AC: performance", reading(onAC, 10), acpi.AC, autoBal, policy.Performance, "power_aware=1 (automatic) and no positive evidence of battery operation (power source ac): AC online"},
		{"unknown charge on battery: the tier ends", reading(onBattery, -1), acpi.Battery, autoBal, policy.Balance, ""},
	})
	if want := []bool{true, false, true, false}; !reflect.DeepEqual(tiers, want) {
		t.Errorf("tier changes %v, want %v", tiers, want)
	}
	if want := t0.Add(8 * time.Second); !c.lastChange.Equal(want) {
		t.Errorf("last change %v, want %v (the last step's)", c.lastChange, want)
	}
}

// TestDeciderLowBatteryOff: low_battery 0 never overrides balance, not
// even at 5 % on battery; a reload that turns it on (new settings, the
// same charge) does at once.
func TestDeciderLowBatteryOff(t *testing.T) {
	autoBal := policy.Knob{PowerAware: policy.PowerAwareAuto, PowerAwarePolicy: policy.Balance}
	c := startOn(decisionSettings{DefaultKnob: &autoBal}, statefile.State{}, onBattery)
	runSteps(t, c, []decisionStep{
		{"low_battery 0 at 5%", power(onBattery, 5), acpi.Battery, autoBal, policy.Balance, ""},
		{"reload: low_battery 20", func(t *testing.T, c *decider) {
			c.set.LowBattery = 20
			if !c.setBatteryPercent(c.batteryPct) {
				t.Error("the tier did not begin")
			}
		}, acpi.Battery, autoBal, policy.Powersaving, ""},
	})
}

// TestDeciderHoldsBoundedPerCaller: a caller may have MaxHoldsPerCaller
// holds; one more is refused with an error that is bus.ErrLimitsExceeded
// (D-Bus LimitsExceeded) in the daemon's words, and changes nothing.
// Other callers are not affected, a released hold makes room for one
// more, and the published list is in the order the holds were made.
func TestDeciderHoldsBoundedPerCaller(t *testing.T) {
	c := startOn(decisionSettings{}, statefile.State{}, onAC)
	const me, other = ":1.7", ":1.8"
	var cookies []uint32
	for i := range MaxHoldsPerCaller {
		p := policy.Balance
		if i%2 == 1 {
			p = policy.Performance // a HoldProfile("performance")
		}
		cookie, err := c.addHold(p, fmt.Sprint("hold ", i), me, "")
		if err != nil {
			t.Fatalf("hold %d of %d: %v", i+1, MaxHoldsPerCaller, err)
		}
		cookies = append(cookies, cookie)
	}
	runSteps(t, c, []decisionStep{{"16 holds: the power-saving one wins", nil, acpi.AC, policy.DefaultKnob(), policy.Balance, "held by :1.7 (hold 0)"}})
	before, last := c.holdList(), c.holdIdx.last
	_, err := c.addHold(policy.Powersaving, "one too many", me, "")
	if want := fmt.Sprintf("%s already has %d holds, the most one bus connection may have; release one (ReleasePolicy or ReleaseProfile) first", me, MaxHoldsPerCaller); !errors.Is(err, bus.ErrLimitsExceeded) || err.Error() != want {
		t.Fatalf("hold %d: %v, want bus.ErrLimitsExceeded %q", MaxHoldsPerCaller+1, err, want)
	}
	if after := c.holdList(); !reflect.DeepEqual(after, before) || c.holdIdx.last != last || len(c.holds) != MaxHoldsPerCaller {
		t.Errorf("a refused hold changed the holds:\nbefore %v\nafter  %v", before, after)
	}
	runSteps(t, c, []decisionStep{
		{"after a refused hold", nil, acpi.AC, policy.DefaultKnob(), policy.Balance, ""},
		{"another caller is not affected", func(t *testing.T, c *decider) {
			if _, err := c.addHold(policy.Powersaving, "other", other, ""); err != nil {
				t.Fatalf("another caller's hold: %v", err)
			}
		}, acpi.AC, policy.DefaultKnob(), policy.Powersaving, "held by :1.8 (other)"},
	})
	// A released hold makes room for one more, and only one.
	if _, err := c.releasable(cookies[0], other, false); !errors.Is(err, policy.ErrInvalid) {
		t.Errorf("another caller releasing my hold: %v, want policy.ErrInvalid", err)
	}
	gone, err := c.releasable(cookies[0], me, false)
	if err != nil {
		t.Fatal(err)
	}
	if ended := c.dropHolds(gone); !reflect.DeepEqual(ended, []uint32{cookies[0]}) {
		t.Errorf("ended %v, want %v", ended, cookies[:1])
	}
	if _, err := c.releasable(cookies[0], me, true); !errors.Is(err, policy.ErrInvalid) {
		t.Errorf("releasing an ended hold: %v, want policy.ErrInvalid", err)
	}
	if _, err := c.addHold(policy.Balance, "again", me, ""); err != nil {
		t.Fatalf("hold after a release: %v", err)
	}
	if _, err := c.addHold(policy.Balance, "again", me, ""); !errors.Is(err, bus.ErrLimitsExceeded) {
		t.Errorf("second hold after one release: %v, want bus.ErrLimitsExceeded", err)
	}
	hs := c.holdList()
	mine := 0
	for i, h := range hs {
		if h.Owner == me {
			mine++
		}
		if i > 0 && h.Cookie <= hs[i-1].Cookie {
			t.Errorf("holds[%d] = %+v after %+v: not in the order made", i, h, hs[i-1])
		}
	}
	if mine != MaxHoldsPerCaller || len(hs) != MaxHoldsPerCaller+1 || len(c.holdsOf(me)) != MaxHoldsPerCaller || len(c.holdsOf(other)) != 1 {
		t.Errorf("%d holds of mine, %d in all; want %d and %d", mine, len(hs), MaxHoldsPerCaller, MaxHoldsPerCaller+1)
	}
	// The caller leaves: its holds end, the other's stays.
	c.dropHolds(c.holdsOf(me))
	runSteps(t, c, []decisionStep{{"the caller left", nil, acpi.AC, policy.DefaultKnob(), policy.Powersaving, "held by :1.8 (other)"}})
	if n := len(c.holdList()); n != 1 || c.holdIdx.perOwner[me] != 0 || len(c.holdsOf(me)) != 0 {
		t.Errorf("after the caller left: %d holds, %d of its own", n, c.holdIdx.perOwner[me])
	}
}

// TestDeciderHoldsBoundedInAll: the decider keeps MaxHolds holds of all
// callers together; one more, from a caller with none, is refused with
// LimitsExceeded and changes nothing, and a hold that ends makes room.
func TestDeciderHoldsBoundedInAll(t *testing.T) {
	c := startOn(decisionSettings{}, statefile.State{}, onAC)
	var first uint32
	for i := range MaxHolds {
		cookie, err := c.addHold(policy.Balance, fmt.Sprint("hold ", i), fmt.Sprintf(":1.%d", 100+i/MaxHoldsPerCaller), "")
		if err != nil {
			t.Fatalf("hold %d of %d: %v", i+1, MaxHolds, err)
		}
		if i == 0 {
			first = cookie
		}
	}
	before := c.holdList()
	_, err := c.addHold(policy.Powersaving, "one too many", ":1.999", "")
	want := fmt.Sprintf("the daemon already keeps %d holds, the most it keeps for all callers together; try again once one ended", MaxHolds)
	if !errors.Is(err, bus.ErrLimitsExceeded) || err.Error() != want {
		t.Fatalf("hold %d: %v, want bus.ErrLimitsExceeded %q", MaxHolds+1, err, want)
	}
	if !reflect.DeepEqual(c.holdList(), before) || c.holdIdx.perOwner[":1.999"] != 0 {
		t.Error("a refused hold changed the holds")
	}
	runSteps(t, c, []decisionStep{
		{"256 holds of balance", nil, acpi.AC, policy.DefaultKnob(), policy.Balance, ""},
		{"room again once one ended", func(t *testing.T, c *decider) {
			gone, err := c.releasable(first, ":1.100", false)
			if err != nil {
				t.Fatal(err)
			}
			c.dropHolds(gone)
			if _, err := c.addHold(policy.Powersaving, "room again", ":1.999", ""); err != nil {
				t.Fatalf("hold after one ended: %v", err)
			}
		}, acpi.AC, policy.DefaultKnob(), policy.Powersaving, "held by :1.999 (room again)"},
	})
	if n := len(c.holdList()); n != MaxHolds {
		t.Errorf("%d holds, want %d", n, MaxHolds)
	}
}

// TestDeciderHoldCookies: cookies are never 0 and never one in use, also
// when they wrap around; the winning hold is the most power-saving one,
// the oldest among equals; a published list is never written (an addition
// to it copies, a removal builds a new one).
func TestDeciderHoldCookies(t *testing.T) {
	c := startOn(decisionSettings{}, statefile.State{}, onAC)
	c.holdIdx.last = ^uint32(0) - 1
	a, _ := c.addHold(policy.Balance, "a", ":1.1", "")
	b, _ := c.addHold(policy.Balance, "b", ":1.1", "")
	if a != ^uint32(0) || b != 1 {
		t.Errorf("cookies around the wrap: %d, %d; want %d, 1", a, b, ^uint32(0))
	}
	c.holdIdx.last = 0
	n, _ := c.addHold(policy.Powersaving, "n", ":1.2", "org.example.App")
	if n != 2 {
		t.Errorf("cookie after one in use: %d, want 2", n)
	}
	published := c.holdList()
	if _, err := c.addHold(policy.Powersaving, "later", ":1.3", ""); err != nil {
		t.Fatal(err)
	}
	if h := c.winningHold(); h == nil || h.Cookie != n {
		t.Errorf("winning hold %+v, want cookie %d (the oldest power-saving one)", h, n)
	}
	runSteps(t, c, []decisionStep{{"the app's hold", nil, acpi.AC, policy.DefaultKnob(), policy.Powersaving, "held by org.example.App (n)"}})
	kept := append([]snapshot.Hold(nil), published...)
	c.dropHolds(c.allHolds())
	if !reflect.DeepEqual(published, kept) || len(c.holdList()) != 0 || c.holdList() == nil {
		t.Errorf("published list %v after every hold ended, want %v; list now %v", published, kept, c.holdList())
	}
}

// TestDeciderFollowProfile: a followed daemon's profile selects the knob
// of the profile map (power_aware_policy unchanged) as a choice that is
// not remembered per source; the same profile again changes nothing, so
// an explicit choice made since stays until the profile changes; an
// unknown profile changes nothing; the reason says which is in force; a
// source without a remembered choice gets the followed knob; unfollowing
// keeps the knob.
func TestDeciderFollowProfile(t *testing.T) {
	set := decisionSettings{ProfileMap: DefaultProfileMap}
	c := startOn(set, statefile.State{}, onBattery)
	const name, owner = "net.hadess.PowerProfiles", ":1.42"
	auto := policy.DefaultKnob()
	on := policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Powersaving}
	off := policy.Knob{PowerAware: policy.PowerAwareOff, PowerAwarePolicy: policy.Powersaving}
	follow := func(profile string, want followChange) func(*testing.T, *decider) {
		return func(t *testing.T, c *decider) {
			t.Helper()
			k, change := c.followProfile(name, owner, profile)
			if change != want {
				t.Errorf("profile %s: change %d, want %d", profile, change, want)
			}
			if change == followNew || change == followStarted {
				c.choose(k, false, tChosen)
			}
		}
	}
	note := "; power_aware follows net.hadess.PowerProfiles (:1.42) ActiveProfile "
	runSteps(t, c, []decisionStep{
		{"power-saver", follow(bus.ProfilePowerSaver, followStarted), acpi.Battery, on, policy.Powersaving, "power_aware=2: always powersaving" + note + "power-saver"},
		{"the same again", follow(bus.ProfilePowerSaver, followSame), acpi.Battery, on, policy.Powersaving, ""},
		{"unknown", follow("turbo", followUnknown), acpi.Battery, on, policy.Powersaving, ""},
		{"an explicit choice", write(filePowerAware, "1"), acpi.Battery, auto, policy.Powersaving,
			"power_aware=1 (automatic) and the machine runs on battery: " + onBattery.Reason + "; an explicit choice overrides net.hadess.PowerProfiles (:1.42) ActiveProfile power-saver until that profile changes"},
		{"the same profile keeps the choice", follow(bus.ProfilePowerSaver, followSame), acpi.Battery, auto, policy.Powersaving, ""},
		{"performance", follow(bus.ProfilePerformance, followNew), acpi.Battery, off, policy.Performance, "power_aware=0: always performance" + note + "performance"},
		{"AC without a choice: the followed knob", power(onAC, -1), acpi.AC, off, policy.Performance, ""},
	})
	if c.knobChosen {
		t.Error("AC's knob is chosen; want the base knob (the followed profile's)")
	}
	was, ok := c.unfollow()
	if !ok || was.name != name || was.profile != bus.ProfilePerformance {
		t.Errorf("unfollow: %+v %v", was, ok)
	}
	if _, ok := c.unfollow(); ok {
		t.Error("a second unfollow ended something")
	}
	runSteps(t, c, []decisionStep{{"unfollowed: the knob stays", nil, acpi.AC, off, policy.Performance, "power_aware=0: always performance"}})
}

// TestKnobWrite: the tree's writes as knobWrite parses them: the change
// of each file, and EINVAL or EACCES naming the file for what is refused.
func TestKnobWrite(t *testing.T) {
	from := policy.Knob{PowerAware: policy.PowerAwareAuto, PowerAwarePolicy: policy.Powersaving}
	for _, tc := range []struct {
		file, v string
		want    policy.Knob
		err     string
	}{
		{fileCurrent, "performance\n", policy.Knob{PowerAware: policy.PowerAwareOff, PowerAwarePolicy: policy.Powersaving}, ""},
		{fileCurrent, " balance extra", policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Balance}, ""},
		{filePowerAware, "2", policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Powersaving}, ""},
		{filePowerAwarePolicy, "balance", policy.Knob{PowerAware: policy.PowerAwareAuto, PowerAwarePolicy: policy.Balance}, ""},
		{fileCurrent, "Balance", policy.Knob{}, "current_sched_policy: invalid argument"},
		{filePowerAware, "3", policy.Knob{}, "power_aware: invalid argument"},
		{filePowerAwarePolicy, "performance", policy.Knob{}, "power_aware_policy: invalid argument"},
		{fileBoost, "1", policy.Knob{}, "boost is read-only: permission denied"},
	} {
		apply, err := knobWrite(tc.file, []byte(tc.v))
		if tc.err != "" {
			if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
				t.Errorf("%s %q: %v, want %q…", tc.file, tc.v, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s %q: %v", tc.file, tc.v, err)
			continue
		}
		if got := apply(from); got != tc.want {
			t.Errorf("%s %q: %+v, want %+v", tc.file, tc.v, got, tc.want)
		}
	}
}

// tChosen is when the decider's tests make their choices.
var tChosen = time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)

// TestDeciderChosenAtAndReset: where the knob in force comes from and
// since when a choice is in force: the configured knob until a choice
// (no time); an explicit choice at its time, kept by the same choice
// again and across a restart; a followed profile's knob is a choice
// without a time; a choice brought back by a change of power source
// takes effect then; reset forgets every choice (both sources) and the
// configured knob is in force again, restore puts everything back.
func TestDeciderChosenAtAndReset(t *testing.T) {
	conf := policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Balance}
	c := startOn(decisionSettings{DefaultKnob: &conf, ProfileMap: DefaultProfileMap}, statefile.State{}, onAC)
	check := func(what, from string, at time.Time) {
		t.Helper()
		if got := c.knobFrom(); got != from || !c.chosenAt.Equal(at) {
			t.Errorf("%s: from %q at %v, want %q at %v", what, got, c.chosenAt, from, at)
		}
	}
	check("at start", snapshot.KnobFromConfig, time.Time{})

	off := policy.Knob{PowerAware: policy.PowerAwareOff, PowerAwarePolicy: policy.Balance}
	t1, t2, t3 := t0.Add(time.Minute), t0.Add(2*time.Minute), t0.Add(3*time.Minute)
	c.choose(off, true, t1)
	check("a choice on AC", snapshot.KnobFromChoice, t1)
	c.choose(off, true, t2)
	check("the same choice again", snapshot.KnobFromChoice, t1)

	c.setPower(onBattery, -1)
	c.knobForSource(acpi.AC, acpi.Battery, t2)
	check("battery has no choice: the configured knob", snapshot.KnobFromConfig, time.Time{})
	c.setPower(onAC, -1)
	c.knobForSource(acpi.Battery, acpi.AC, t3)
	check("AC's choice brought back", snapshot.KnobFromChoice, t3)

	s := statefile.NewStore(t.TempDir(), statefile.State{}, testutil.Logger(t))
	c.putState(s)
	st := s.State()
	if !st.ChosenAt.Equal(t3) || !st.Chosen {
		t.Errorf("state: chosen %v at %v, want at %v", st.Chosen, st.ChosenAt, t3)
	}
	c = startOn(c.set, st, onAC)
	check("restarted on AC", snapshot.KnobFromChoice, t3)

	prev := c.reset()
	check("reset", snapshot.KnobFromConfig, time.Time{})
	if c.knob != conf || c.knobChosen || c.choices != nil {
		t.Errorf("reset: knob %+v chosen %v choices %v, want %+v, none", c.knob, c.knobChosen, c.choices, conf)
	}
	c.restore(prev)
	check("restored", snapshot.KnobFromChoice, t3)
	if c.knob != off || len(c.choices) != 1 {
		t.Errorf("restored: knob %+v choices %v", c.knob, c.choices)
	}

	// A followed profile's knob: chosen, but no time of a user's choice.
	c.reset()
	k, _ := c.followProfile("net.hadess.PowerProfiles", ":1.42", bus.ProfilePowerSaver)
	c.choose(k, false, t3)
	check("a followed profile", snapshot.KnobFromProfile, time.Time{})

	c = startOn(decisionSettings{}, statefile.State{}, onAC)
	check("no configuration", snapshot.KnobFromDefault, time.Time{})
}
