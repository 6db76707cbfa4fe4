package units

import (
	"errors"
	"reflect"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// unitsWith is a units placement holding workloads (no manager: what is
// tested here never calls one).
func unitsWith(ws ...*unitWorkload) *Placement {
	u := &Placement{e: placement.NewEngine(&placement.Config{}, logrus.New(), &placement.Counters{}, nil), workloads: map[string]*unitWorkload{}}
	u.attach()
	for _, w := range ws {
		w.rec = &statefile.UnitRecord{Unit: w.name}
		u.workloads[workloadKey(w.uid, w.name)] = w
	}
	return u
}

// TestUnitsSetOverride: SetWorkloadPolicy reaches units (it answered "no
// workload" for every one): performance and "" set and clear a unit's
// override, shown in its status; an unknown name, a name that two users'
// managers hold, and another policy are InvalidArgs (policy.ErrInvalid)
// and change nothing.
func TestUnitsSetOverride(t *testing.T) {
	u := unitsWith(
		&unitWorkload{name: "build.service", slice: "system.slice", uid: -1},
		&unitWorkload{name: "app-x.scope", slice: "app.slice", uid: 1000},
		&unitWorkload{name: "app-x.scope", slice: "app.slice", uid: 1001},
	)
	override := func(name string) policy.Policy {
		for _, s := range u.Status() {
			if s.Name == name {
				return s.Override
			}
		}
		return "none"
	}
	if err := u.SetOverride("build.service", policy.Performance); err != nil || override("build.service") != policy.Performance {
		t.Fatalf("set: %v, override %q", err, override("build.service"))
	}
	for _, c := range []struct {
		name string
		pol  policy.Policy
	}{{"nope.service", policy.Performance}, {"app-x.scope", policy.Performance}, {"build.service", policy.Powersaving}} {
		if err := u.SetOverride(c.name, c.pol); !errors.Is(err, policy.ErrInvalid) {
			t.Errorf("setOverride(%q, %q) = %v, want ErrInvalid", c.name, c.pol, err)
		}
	}
	if override("build.service") != policy.Performance {
		t.Fatal("a refused call changed the override")
	}
	if err := u.SetOverride("build.service", ""); err != nil || override("build.service") != "" {
		t.Fatalf("clear: %v, override %q", err, override("build.service"))
	}
}

// TestEstimateCountsUnits: EstimatePower's input holds the units (it held
// only the cgroupfs workloads, none in placement "systemd"): a unit to
// place, and one with a performance override fixed on every allowed CPU.
func TestEstimateCountsUnits(t *testing.T) {
	u := unitsWith(
		&unitWorkload{name: "a.service", slice: "system.slice", uid: -1, avg: policy.UtilAverage{Util: 0.5}},
		&unitWorkload{name: "b.service", slice: "system.slice", uid: -1, avg: policy.UtilAverage{Util: 0.25}, override: policy.Performance},
	)
	online := sysfs.NewCPUSet(0, 1, 2, 3)
	in := placement.ModelInput{Online: online, Allowed: online.List(), CPUs: map[string][]int{}}
	u.ModelLoads(&in)
	if len(in.Placed) != 1 || in.Placed[0].Name != workloadKey(-1, "a.service") || in.Placed[0].Util != 0.5 {
		t.Errorf("placed %+v, want a.service at 0.5", in.Placed)
	}
	if len(in.Fixed) != 1 || in.Fixed[0].Util != 0.25 || !reflect.DeepEqual(in.CPUs[workloadKey(-1, "b.service")], []int{0, 1, 2, 3}) {
		t.Errorf("fixed %+v cpus %v, want b.service at 0.25 on 0-3", in.Fixed, in.CPUs)
	}
}
