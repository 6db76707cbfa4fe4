package policy

import (
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestClassPolicy: issue 34's laptop classes. While the machine packs,
// background work, services and unfocused apps are packed as powersaving
// packs them (the apps were placed with the machine's policy before: an
// app the user is not looking at is work nobody waits for); the focused
// app, the session, a user's whole manager and the apps of a desktop that
// says nothing of the focus are never confined (before, the focused app
// got balance and the session and a whole manager the machine's policy);
// other classes keep the machine's policy; under performance nothing is
// restricted.
func TestClassPolicy(t *testing.T) {
	classes := []string{ClassBackground, ClassService, ClassApp, ClassFocused, ClassSession, ClassUser, ClassAppNoFocus, ClassWorkload, "", "batch"}
	P, B, S := Performance, Balance, Powersaving
	want := map[Policy][]Policy{
		Performance: {P, P, P, P, P, P, P, P, P, P},
		Balance:     {S, S, S, P, P, P, P, B, B, B},
		Powersaving: {S, S, S, P, P, P, P, S, S, S},
	}
	for machine, ws := range want {
		for i, c := range classes {
			if got := ClassPolicy(machine, c); got != ws[i] {
				t.Errorf("ClassPolicy(%s, %q) = %s, want %s", machine, c, got, ws[i])
			}
		}
	}
	for _, c := range classes {
		if want := c == ClassFocused || c == ClassSession || c == ClassUser || c == ClassAppNoFocus; Foreground(c) != want {
			t.Errorf("Foreground(%q) = %v", c, !want)
		}
	}
}

func TestLoadPolicy(t *testing.T) {
	ps, bal := &SliceRule{Policy: Powersaving}, &SliceRule{Policy: Balance}
	psAlways := &SliceRule{Policy: Powersaving, Always: true}
	tests := []struct {
		machine Policy
		class   string
		rule    *SliceRule
		want    Policy
	}{
		{Performance, ClassApp, ps, Performance},           // unrestricted under performance
		{Performance, ClassApp, psAlways, Powersaving},     // unless the rule says always
		{Performance, ClassFocused, psAlways, Powersaving}, // the admin's rule wins over the class
		{Balance, ClassWorkload, ps, Powersaving},          // caps: packs harder
		{Balance, ClassWorkload, bal, Balance},
		{Balance, ClassApp, bal, Powersaving},     // never loosens the class rule
		{Powersaving, ClassApp, bal, Powersaving}, // never loosens
		{Powersaving, ClassFocused, nil, Performance},
		{Powersaving, ClassFocused, ps, Powersaving}, // a rule confines even the foreground
		{Balance, ClassSession, bal, Balance},
		{Balance, ClassSession, nil, Performance},
		{Powersaving, ClassBackground, bal, Powersaving},
		{Balance, ClassWorkload, &SliceRule{Policy: Performance, Always: true}, Balance},
	}
	for _, tt := range tests {
		if got := LoadPolicy(tt.machine, tt.class, tt.rule); got != tt.want {
			t.Errorf("LoadPolicy(%s, %q, %+v) = %s, want %s", tt.machine, tt.class, tt.rule, got, tt.want)
		}
	}
}

// desktop is a laptop's mix: the focused editor (two busy threads), a chat
// app, a background indexer and a system service.
func desktop(editorClass string) []Load {
	return []Load{
		{Name: "editor", Util: 1.5, Threads: 2, Class: editorClass},
		{Name: "chat", Util: 0.3, Threads: 1, Class: ClassApp},
		{Name: "indexer", Util: 0.9, Threads: 1, Class: ClassBackground},
		{Name: "cupsd", Util: 0.2, Threads: 1, Class: ClassService},
	}
}

func classless(ls []Load) []Load {
	for i := range ls {
		ls[i].Class = ""
	}
	return ls
}

func TestPlanPlacementClasses(t *testing.T) {
	tests := []struct {
		name    string
		topo    Topology
		policy  Policy
		loads   []Load
		slices  map[string]SliceRule
		want    map[string][]int
		wantPol map[string]Policy
		active  []int
	}{
		// Without classes powersaving gives the editor one core's two
		// threads, balance two cores: {0,4} versus {0,1}.
		{name: "powersaving, no classes", topo: snbLaptop, policy: Powersaving, loads: classless(desktop(ClassApp)),
			want:    map[string][]int{"editor": {0, 4}, "chat": {1}, "indexer": {5}, "cupsd": {1}},
			wantPol: map[string]Policy{"editor": Powersaving, "chat": Powersaving, "indexer": Powersaving, "cupsd": Powersaving},
			active:  []int{0, 1, 4, 5}},
		// The focused editor may use every CPU; the rest, the unfocused
		// chat app included, is packed as powersaving packs it.
		{name: "powersaving: the focused app is not confined", topo: snbLaptop, policy: Powersaving, loads: desktop(ClassFocused),
			want:    map[string][]int{"editor": seq(0, 7), "chat": {1}, "indexer": {5}, "cupsd": {1}},
			wantPol: map[string]Policy{"editor": Performance, "chat": Powersaving, "indexer": Powersaving, "cupsd": Powersaving},
			active:  seq(0, 7)},
		// Under balance background work, services and the unfocused app
		// are packed like powersaving: the indexer gets one thread, not
		// balance's {3,6}; chat and cupsd join a busy CPU instead of an
		// idle one.
		{name: "balance: background, services and unfocused apps packed harder", topo: snbLaptop, policy: Balance, loads: desktop(ClassFocused),
			want:    map[string][]int{"editor": seq(0, 7), "chat": {1}, "indexer": {5}, "cupsd": {1}},
			wantPol: map[string]Policy{"editor": Performance, "chat": Powersaving, "indexer": Powersaving, "cupsd": Powersaving},
			active:  seq(0, 7)},
		// A session unit (the compositor) is not confined either.
		{name: "balance: the session is not confined", topo: snbLaptop, policy: Balance, loads: desktop(ClassSession),
			want:    map[string][]int{"editor": seq(0, 7), "chat": {1}, "indexer": {5}, "cupsd": {1}},
			wantPol: map[string]Policy{"editor": Performance, "chat": Powersaving, "indexer": Powersaving, "cupsd": Powersaving},
			active:  seq(0, 7)},
		{name: "balance, no classes", topo: snbLaptop, policy: Balance, loads: classless(desktop("")),
			want:    map[string][]int{"editor": {0, 1}, "chat": {2}, "indexer": {3, 6}, "cupsd": {7}},
			wantPol: map[string]Policy{"editor": Balance, "chat": Balance, "indexer": Balance, "cupsd": Balance},
			active:  []int{0, 1, 2, 3, 6, 7}},
		{name: "performance: nothing restricted", topo: snbLaptop, policy: Performance, loads: desktop(ClassFocused),
			want:    map[string][]int{"editor": seq(0, 7), "chat": seq(0, 7), "indexer": seq(0, 7), "cupsd": seq(0, 7)},
			wantPol: map[string]Policy{"editor": Performance, "chat": Performance, "indexer": Performance, "cupsd": Performance},
			active:  seq(0, 7)},
		// A slice ruled "powersaving, always" is packed even under
		// performance; the other workload is unrestricted.
		{name: "performance: a slice rule with always packs its units", topo: twoCPU, policy: Performance,
			loads:   []Load{{Name: "bg1", Slice: "bg.slice"}, {Name: "bg2", Util: 0.1, Slice: "bg.slice"}, {Name: "w", Slice: "schedpolicyd.slice"}},
			slices:  map[string]SliceRule{"bg.slice": {Policy: Powersaving, Always: true}},
			want:    map[string][]int{"bg1": {0}, "bg2": {0}, "w": {0, 1}},
			wantPol: map[string]Policy{"bg1": Powersaving, "bg2": Powersaving, "w": Performance},
			active:  []int{0, 1}},
		{name: "performance: a slice rule without always does nothing", topo: twoCPU, policy: Performance,
			loads:   []Load{{Name: "bg1", Slice: "bg.slice"}, {Name: "w"}},
			slices:  map[string]SliceRule{"bg.slice": {Policy: Powersaving}},
			want:    map[string][]int{"bg1": {0, 1}, "w": {0, 1}},
			wantPol: map[string]Policy{"bg1": Performance, "w": Performance},
			active:  []int{0, 1}},
		// Under balance a powersaving slice's busy unit shares a core
		// with another busy one (SMT siblings 0 and 4); the same load
		// outside the slice gets CPUs of cores of its own.
		{name: "balance: a powersaving slice packs harder than another", topo: snbLaptop, policy: Balance,
			loads:   []Load{{Name: "fg", Util: 0.9, Threads: 1, Slice: "a.slice"}, {Name: "bg", Util: 0.9, Threads: 1, Slice: "bg.slice"}, {Name: "fg2", Util: 0.9, Threads: 1, Slice: "a.slice"}},
			slices:  map[string]SliceRule{"bg.slice": {Policy: Powersaving}},
			want:    map[string][]int{"fg": {0}, "bg": {4}, "fg2": {2, 5}},
			wantPol: map[string]Policy{"fg": Balance, "bg": Powersaving, "fg2": Balance},
			active:  []int{0, 2, 4, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Topology: tt.topo, Allowed: all(tt.topo), Policy: tt.policy, Loads: tt.loads, Slices: tt.slices, DisableLazy: true}
			plan := PlanPlacement(in)
			if !reflect.DeepEqual(plan.CPUs, tt.want) {
				t.Errorf("CPUs = %v, want %v", plan.CPUs, tt.want)
			}
			if !reflect.DeepEqual(plan.Policies, tt.wantPol) {
				t.Errorf("Policies = %v, want %v", plan.Policies, tt.wantPol)
			}
			if !reflect.DeepEqual(plan.Active, tt.active) {
				t.Errorf("Active = %v, want %v", plan.Active, tt.active)
			}
			// Each workload's set is exactly what its policy's plan over
			// every workload gives it.
			for _, l := range tt.loads {
				uni := in
				uni.Policy = plan.Policies[l.Name]
				uni.Slices = nil
				uni.Loads = nil
				for _, m := range tt.loads {
					m.Class, m.Slice = "", ""
					uni.Loads = append(uni.Loads, m)
				}
				if u := PlanPlacement(uni); !reflect.DeepEqual(u.CPUs[l.Name], plan.CPUs[l.Name]) {
					t.Errorf("%s: %v, but the %s plan gives it %v", l.Name, plan.CPUs[l.Name], uni.Policy, u.CPUs[l.Name])
				}
			}
			// Stable: the plan fed back as the current sets is kept.
			again := in
			again.Loads = nil
			for _, l := range tt.loads {
				l.Current = plan.CPUs[l.Name]
				again.Loads = append(again.Loads, l)
			}
			again.DisableLazy = false
			if p2 := PlanPlacement(again); !reflect.DeepEqual(p2.CPUs, plan.CPUs) {
				t.Errorf("re-planned from its own sets: %v, want %v", p2.CPUs, plan.CPUs)
			}
		})
	}
}

// TestPropClasses: with random classes and slice rules every workload still
// gets a non-empty set of allowed CPUs, is placed with its LoadPolicy (or
// Performance where that plan raced to idle), and its set is what a plan of
// that policy alone over the same workloads gives it.
func TestPropClasses(t *testing.T) {
	classes := []string{"", ClassWorkload, ClassService, ClassBackground, ClassFocused, ClassApp, ClassSession, ClassUser, ClassAppNoFocus}
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t)
		in.Slices = map[string]SliceRule{
			"a.slice": {Policy: rapid.SampledFrom([]Policy{Balance, Powersaving}).Draw(t, "a policy"), Always: rapid.Bool().Draw(t, "a always")},
		}
		fresh := rapid.Bool().Draw(t, "fresh")
		in.DisableLazy = fresh
		for i := range in.Loads {
			if fresh {
				in.Loads[i].Current = nil
			}
			in.Loads[i].Class = rapid.SampledFrom(classes).Draw(t, "class")
			in.Loads[i].Slice = rapid.SampledFrom([]string{"", "a.slice", "b.slice"}).Draw(t, "slice")
		}
		p := PlanPlacement(in)
		allowed := normalize(in.Topology, in.Allowed)
		for _, l := range in.Loads {
			set := p.CPUs[l.Name]
			if len(set) == 0 {
				t.Fatalf("%s: empty set", l.Name)
			}
			for _, c := range set {
				if !slices.Contains(allowed, c) {
					t.Fatalf("%s: CPU %d not allowed (%v)", l.Name, c, allowed)
				}
			}
			var rule *SliceRule
			if r, ok := in.Slices[l.Slice]; ok {
				rule = &r
			}
			want := LoadPolicy(in.Policy, l.Class, rule)
			if got := p.Policies[l.Name]; got != want && got != Performance {
				t.Fatalf("%s: placed with %s, want %s", l.Name, got, want)
			}
			uni := in
			uni.Policy, uni.Slices, uni.Loads = want, nil, nil
			for _, m := range in.Loads {
				m.Class, m.Slice = "", ""
				uni.Loads = append(uni.Loads, m)
			}
			// Compared on fresh decisions: with current sets, stability is
			// judged per policy on that policy's members, so the plan of
			// one policy alone may keep sets the mixed plan does not.
			if fresh {
				if u := PlanPlacement(uni); !slices.Equal(u.CPUs[l.Name], set) {
					t.Fatalf("%s: %v, the %s plan gives %v", l.Name, set, want, u.CPUs[l.Name])
				}
			}
		}
	})
}
