package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// TestResetKnob: the configuration's knob is in force until a choice;
// one choice wins for good, across a restart, with the time it took
// effect; ResetKnob forgets it (and the other source's) and the
// configuration's knob applies again, also after a restart.
func TestResetKnob(t *testing.T) {
	m := newMockLaptop(t)
	conf := policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Balance}
	withConf := func(c *Config) { c.DefaultKnob = &conf }
	d, cancel, done := m.startCfg(t, withConf)
	from := func(d *Daemon, what string, k policy.Knob, src string) snapshot.Snapshot {
		t.Helper()
		s := d.Snapshot()
		if s.Knob != k || s.KnobFrom != src {
			t.Fatalf("%s: knob %+v from %q, want %+v from %q", what, s.Knob, s.KnobFrom, k, src)
		}
		return s
	}
	if s := from(d, "at start", conf, snapshot.KnobFromConfig); !s.KnobChosenAt.IsZero() {
		t.Errorf("at start: chosen at %v, want none", s.KnobChosenAt)
	}

	before := time.Now()
	if err := (controller{d}).WriteKnob(context.Background(), "power_aware", "0", "test"); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	chosen := policy.Knob{PowerAware: policy.PowerAwareOff, PowerAwarePolicy: policy.Balance}
	s := from(d, "after a choice", chosen, snapshot.KnobFromChoice)
	if at := s.KnobChosenAt; at.Before(before) || at.After(after) {
		t.Errorf("chosen at %v, want between %v and %v", at, before, after)
	}
	// The same choice again keeps the time it took effect.
	if err := (controller{d}).WriteKnob(context.Background(), "power_aware", "0", "test"); err != nil {
		t.Fatal(err)
	}
	if at := d.Snapshot().KnobChosenAt; !at.Equal(s.KnobChosenAt) {
		t.Errorf("the same choice again moved the time to %v", at)
	}

	cancel()
	<-done
	d, cancel, done = m.startCfg(t, withConf)
	if at := from(d, "after a restart", chosen, snapshot.KnobFromChoice).KnobChosenAt; !at.Equal(s.KnobChosenAt) {
		t.Errorf("after a restart: chosen at %v, want %v", at, s.KnobChosenAt)
	}

	if err := (controller{d}).ResetKnob(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := from(d, "after reset", conf, snapshot.KnobFromConfig); !s.KnobChosenAt.IsZero() {
		t.Errorf("after reset: chosen at %v", s.KnobChosenAt)
	}
	st, err := statefile.LoadState(m.state)
	if err != nil {
		t.Fatal(err)
	}
	if st.Chosen || len(st.Choices) != 0 || !st.ChosenAt.IsZero() {
		t.Errorf("state after reset: chosen %v choices %v at %v, want none", st.Chosen, st.Choices, st.ChosenAt)
	}
	b, _ := os.ReadFile(filepath.Join(m.state, statefile.StateFile))
	if strings.Contains(string(b), "chosen") {
		t.Errorf("state.json after reset:\n%s", b)
	}
	cancel()
	<-done
	d, _, _ = m.startCfg(t, withConf)
	from(d, "restarted after reset", conf, snapshot.KnobFromConfig)
}
