package daemon

// Cases a hostile trial of the restore and lock rules brought up (N1–N7)
// that need the whole daemon; those of the cgroupfs driver are beside it
// (daemon/placement/cgroupfs: restart_test.go, hotplug_test.go).

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestTrialCorruptStateKept (N7): a state.json that cannot be used is kept
// beside (state.json.corrupt-TIME), never overwritten and lost.
func TestTrialCorruptStateKept(t *testing.T) {
	m := newMockLaptop(t)
	os.MkdirAll(m.state, 0o755)
	bad := `{"version": 2,, "cgroups": [{"path": "/x", "original_cpus": "1"}]}`
	if err := os.WriteFile(filepath.Join(m.state, statefile.StateFile), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	_, cancel, done := m.start(t)
	cancel()
	<-done
	kept, _ := filepath.Glob(filepath.Join(m.state, statefile.StateFile+".corrupt-*"))
	if len(kept) != 1 {
		t.Fatalf("kept files %v, want one state.json.corrupt-*", kept)
	}
	if got := testutil.Read(t, kept[0]); got != bad {
		t.Errorf("kept file holds %q, want the bad file as it was", got)
	}
}
