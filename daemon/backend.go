package daemon

import (
	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement/cgroupfs"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement/units"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
)

// newBackend makes the placement engine with the driver
// Config.Placement names, saving state.json through saveBackground.
func (d *Daemon) newBackend() *placement.Engine {
	d.syncPlacementConfig()
	e := placement.NewEngine(&d.pcfg, d.log, &d.stats, d.done)
	e.Save = d.saveBackground
	if d.cfg.Placement == PlacementSystemd {
		units.New(e)
	} else {
		cgroupfs.New(e)
	}
	return e
}

// loadRecords takes state.json's records: the back end's own, and the
// other placement mode's to save back as they are (kept).
func (d *Daemon) loadRecords(st statefile.State) {
	d.kept = statefile.State{Cgroups: st.Cgroups, Units: st.Units}
	d.place.LoadRecords(st)
}

// syncPlacementConfig copies what the back ends read of the running
// configuration into d.pcfg, the placement.Config they hold: at the start
// and after a reload.
func (d *Daemon) syncPlacementConfig() {
	d.pcfg = placement.Config{
		CgroupRoot: d.cfg.CgroupRoot, ProcRoot: d.cfg.ProcRoot, SysfsRoot: d.cfg.SysfsRoot, RunRoot: d.cfg.RunRoot, Manage: d.cfg.Manage, Slices: d.cfg.Slices,
		Bus: d.cfg.Bus, SampleInterval: d.cfg.SampleInterval, UtilHalfLife: d.cfg.UtilHalfLife,
		NoTaskClock: d.cfg.NoTaskClock, Log: d.cfg.Log, PressureFile: d.cfg.pressureFile,
	}
}
