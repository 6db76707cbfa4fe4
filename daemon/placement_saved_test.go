package daemon

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestDaemonSavesWhatItWrote: after a write that no knob change follows
// (here a power change), state.json says what the file holds now, not the
// value written before as applied and the new one as pending: a user's
// write of that earlier value while no daemon ran would then be taken for
// the daemon's at the next start and overwritten by the original at its
// stop.
func TestDaemonSavesWhatItWrote(t *testing.T) {
	m := newMockLaptop(t)
	m.start(t)
	b := filepath.Join(m.managed, "b")
	ps := filepath.Join(m.sys, "class/power_supply")
	testutil.Put(t, ps+"/AC/online", "0")
	testutil.Put(t, ps+"/BAT0/status", "Discharging")
	var packed string
	testutil.Eventually(t, "b packed on battery", func() (bool, string) {
		packed = testutil.ReadTrim(t, b+"/cpuset.cpus")
		return packed != "2-3" && packed != "0-7", packed
	})
	testutil.Put(t, ps+"/AC/online", "1")
	testutil.Put(t, ps+"/BAT0/status", "Charging")
	testutil.Eventually(t, "state.json names only what b holds", func() (bool, string) {
		cur := testutil.ReadTrim(t, b+"/cpuset.cpus")
		st, err := statefile.LoadState(m.state)
		if err != nil {
			return false, err.Error()
		}
		for _, r := range st.Cgroups {
			if r.Path == b {
				return cur == "0-7" && r.Applied == cur && r.Pending == "" && r.Original == "2-3",
					fmt.Sprintf("b holds %s; record %+v (packed was %s)", cur, r, packed)
			}
		}
		return false, "no record for b"
	})
}
