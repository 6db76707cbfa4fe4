package daemon

import (
	"reflect"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// TestLoopHandsPowerStatesToDecider: the loop's side of the decision
// (knob.go), its handlers called directly on a daemon holding an in-memory
// back end (no daemon runs): a choice on AC (setKnob) is saved with its
// source; a power state on battery at 15 % (onPowerState, low_battery 20)
// applies battery's knob, saves it and publishes powersaving with the
// low-battery reason; a choice on battery is saved beside AC's; and a
// daemon starting from that state.json on AC (loadState and the knob of
// the source first read, as start does) has AC's choice with the latest
// power_aware_policy.
func TestLoopHandsPowerStatesToDecider(t *testing.T) {
	d := loopDaemon(t, &fakeDriver{base: time.Second})
	d.cfg.LowBattery = 20
	d.dec.set = decisionSettingsOf(d.cfg)
	d.dec.power = onAC
	d.dec.settle(time.Now())
	check := func(what string, src acpi.Source, k policy.Knob, p policy.Policy, reason string, choices map[string]policy.Knob) {
		t.Helper()
		s := d.Snapshot()
		if s.PowerSource != src || s.Knob != k || s.Policy != p || (reason != "" && s.PolicyReason != reason) {
			t.Errorf("%s: published %s %+v %s (%q); want %s %+v %s (%q)", what, s.PowerSource, s.Knob, s.Policy, s.PolicyReason, src, k, p, reason)
		}
		st, err := statefile.LoadState(d.cfg.StateDir)
		if err != nil {
			t.Fatal(err)
		}
		if st.Knob != k || !reflect.DeepEqual(st.Choices, choices) {
			t.Errorf("%s: state.json knob %+v choices %v; want %+v %v", what, st.Knob, st.Choices, k, choices)
		}
	}
	def := policy.DefaultKnob()
	off := policy.Knob{PowerAware: policy.PowerAwareOff, PowerAwarePolicy: policy.Powersaving}
	if err := d.setKnob(off, "test"); err != nil {
		t.Fatal(err)
	}
	check("AC choice 0", acpi.AC, off, policy.Performance, "power_aware=0: always performance", map[string]policy.Knob{"ac": off})

	d.onPowerState(acpi.State{Power: onBattery, BatteryPercent: 15})
	check("battery at 15%: the default, low battery", acpi.Battery, def, policy.Powersaving,
		"power_aware=1 (automatic), the machine runs on battery and the system batteries are at 15%, below low_battery 20% (powersaving until 25%): "+onBattery.Reason,
		map[string]policy.Knob{"ac": off})

	bal := policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Balance}
	if err := d.setKnob(bal, "test"); err != nil {
		t.Fatal(err)
	}
	offBal := policy.Knob{PowerAware: policy.PowerAwareOff, PowerAwarePolicy: policy.Balance}
	check("battery choice balance", acpi.Battery, bal, policy.Balance, "power_aware=2: always balance", map[string]policy.Knob{"ac": offBal, "battery": bal})

	d2 := loopDaemon(t, &fakeDriver{base: time.Second})
	d2.cfg.StateDir = d.cfg.StateDir
	d2.loadState()
	d2.dec.power = onAC
	d2.dec.startKnobForSource(time.Now())
	if d2.dec.knob != offBal || !d2.dec.knobChosen {
		t.Errorf("start on AC: knob %+v chosen %v; want %+v true", d2.dec.knob, d2.dec.knobChosen, offBal)
	}
}
