package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

func (m mockLaptop) plug(t *testing.T, ac bool) {
	t.Helper()
	ps := filepath.Join(m.sys, "class/power_supply")
	if ac {
		testutil.Put(t, ps+"/AC/online", "1")
		testutil.Put(t, ps+"/BAT0/status", "Charging")
	} else {
		testutil.Put(t, ps+"/AC/online", "0")
		testutil.Put(t, ps+"/BAT0/status", "Discharging")
	}
}

func waitKnob(t *testing.T, d *Daemon, what string, src acpi.Source, k policy.Knob, p policy.Policy) {
	t.Helper()
	testutil.Eventually(t, what, func() (bool, string) {
		s := d.Snapshot()
		return s.PowerSource == src && s.Knob == k && s.Policy == p, fmt.Sprintf("%s %+v %s", s.PowerSource, s.Knob, s.Policy)
	})
}

// TestChoicePerPowerSource: a choice made on AC stays on AC, one made on
// battery stays on battery; a source without a choice gets the default;
// both are saved in state.json's "choices" and used after a restart.
func TestChoicePerPowerSource(t *testing.T) {
	m := newMockLaptop(t)
	d, cancel, done := m.start(t)
	def := policy.DefaultKnob()
	off := policy.Knob{PowerAware: policy.PowerAwareOff, PowerAwarePolicy: policy.Powersaving}
	bal := policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Balance}
	write := func(file, v string) {
		t.Helper()
		if err := d.writeFile(context.Background(), file, []byte(v), "test"); err != nil {
			t.Fatal(err)
		}
	}
	write(filePowerAware, "0") // on AC
	waitKnob(t, d, "AC choice 0", acpi.AC, off, policy.Performance)
	m.plug(t, false)
	waitKnob(t, d, "battery without a choice: the default", acpi.Battery, def, policy.Powersaving)
	write(fileCurrent, "balance")
	waitKnob(t, d, "battery choice balance", acpi.Battery, bal, policy.Balance)
	// balance is power_aware_policy now, on every source (a setting); AC's
	// power_aware stays its own.
	offBal := policy.Knob{PowerAware: policy.PowerAwareOff, PowerAwarePolicy: policy.Balance}
	m.plug(t, true)
	waitKnob(t, d, "back on AC: the AC choice", acpi.AC, offBal, policy.Performance)
	m.plug(t, false)
	waitKnob(t, d, "on battery again: its choice", acpi.Battery, bal, policy.Balance)

	cancel()
	<-done
	st, err := statefile.LoadState(m.state)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]policy.Knob{"ac": offBal, "battery": bal}; !reflect.DeepEqual(st.Choices, want) {
		t.Errorf("state.json choices = %v, want %v", st.Choices, want)
	}
	m.plug(t, true)
	d2 := m.startWith(t, nil)
	waitKnob(t, d2, "restart on AC: the AC choice", acpi.AC, offBal, policy.Performance)
}

// TestPowerAwarePolicyEverySource: power_aware_policy is a setting, not a
// per-source choice: set on AC, it is what battery uses (with battery's
// own power_aware, remembered or the default); set on battery, AC has it
// too; it survives a restart on either source.
func TestPowerAwarePolicyEverySource(t *testing.T) {
	m := newMockLaptop(t)
	d, cancel, done := m.start(t)
	write := func(file, v string) {
		t.Helper()
		if err := d.writeFile(context.Background(), file, []byte(v), "test"); err != nil {
			t.Fatal(err)
		}
	}
	autoBal := policy.Knob{PowerAware: policy.PowerAwareAuto, PowerAwarePolicy: policy.Balance}
	autoSave := policy.Knob{PowerAware: policy.PowerAwareAuto, PowerAwarePolicy: policy.Powersaving}
	onSave := policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Powersaving}
	onBal := policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Balance}

	// On AC, "what to use on battery": balance.
	write(filePowerAwarePolicy, "balance")
	waitKnob(t, d, "AC: the setting written", acpi.AC, autoBal, policy.Performance)
	m.plug(t, false)
	waitKnob(t, d, "battery without a choice uses it", acpi.Battery, autoBal, policy.Balance)

	// On battery: a choice of power_aware 2, then the setting back to
	// powersaving; AC gets the setting, keeping its own power_aware.
	write(filePowerAware, "2")
	waitKnob(t, d, "battery choice 2", acpi.Battery, onBal, policy.Balance)
	write(filePowerAwarePolicy, "powersaving")
	waitKnob(t, d, "battery: the setting written", acpi.Battery, onSave, policy.Powersaving)
	m.plug(t, true)
	waitKnob(t, d, "AC: its choice, with the setting", acpi.AC, autoSave, policy.Performance)

	// Back on AC, balance again; battery's remembered choice has it.
	write(filePowerAwarePolicy, "balance")
	waitKnob(t, d, "AC: balance again", acpi.AC, autoBal, policy.Performance)
	cancel()
	<-done
	st, err := statefile.LoadState(m.state)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]policy.Knob{"ac": autoBal, "battery": onBal}; !reflect.DeepEqual(st.Choices, want) {
		t.Errorf("state.json choices = %v, want %v", st.Choices, want)
	}
	m.plug(t, false)
	d2 := m.startWith(t, nil)
	waitKnob(t, d2, "restart on battery: its choice with the setting", acpi.Battery, onBal, policy.Balance)
}

// TestStateWithoutChoicesCarriesOver: a state.json without "choices" (from
// before) loads as before: the chosen knob carries over to battery.
func TestStateWithoutChoicesCarriesOver(t *testing.T) {
	m := newMockLaptop(t)
	bal := policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Balance}
	if err := statefile.SaveState(m.state, statefile.State{Knob: bal, Chosen: true}); err != nil {
		t.Fatal(err)
	}
	d := m.startWith(t, nil)
	waitKnob(t, d, "the saved knob", acpi.AC, bal, policy.Balance)
	m.plug(t, false)
	waitKnob(t, d, "carried over to battery", acpi.Battery, bal, policy.Balance)
}
