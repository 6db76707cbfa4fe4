package daemon

import (
	"testing"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// TestPolicyReplay: automatic mode with balance on battery goes to
// powersaving below low_battery 20 % and stays there until 25 %; on AC
// it is performance whatever the charge; power_aware 2 ignores the tier.
func TestPolicyReplay(t *testing.T) {
	r := NewPolicyReplay(policy.Knob{PowerAware: policy.PowerAwareAuto, PowerAwarePolicy: policy.Balance}, 20)
	for i, c := range []struct {
		src  acpi.Source
		pct  int
		want policy.Policy
	}{
		{acpi.Battery, 30, policy.Balance},
		{acpi.Battery, 20, policy.Balance},
		{acpi.Battery, 19, policy.Powersaving},
		{acpi.Battery, 24, policy.Powersaving}, // hysteresis
		{acpi.AC, 24, policy.Performance},
		{acpi.Battery, 25, policy.Balance},
		{acpi.Battery, -1, policy.Balance},
	} {
		if got := r.Decide(c.src, c.pct); got != c.want {
			t.Errorf("step %d (%s, %d %%): %s, want %s", i, c.src, c.pct, got, c.want)
		}
	}
	on := NewPolicyReplay(policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Balance}, 20)
	if got := on.Decide(acpi.Battery, 5); got != policy.Balance || !on.LowBattery() {
		t.Errorf("power_aware 2 at 5 %%: %s (tier %v), want balance with the tier noted", got, on.LowBattery())
	}
}
