package daemon

import (
	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement/cgroupfs"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement/units"
	"github.com/schedpolicyd/schedpolicyd/internal/names"
)

// newBackend makes the placement engine with the driver
// Config.Placement names; it saves state.json through the store it is
// given at the start (keepState).
func (d *Daemon) newBackend() *placement.Engine {
	d.syncPlacementConfig()
	e := placement.NewEngine(&d.pcfg, d.log, &d.stats, d.done)
	if d.cfg.Placement == PlacementSystemd {
		units.New(e)
	} else {
		cgroupfs.New(e)
	}
	return e
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
	for _, s := range d.cfg.Exempt {
		if x, err := names.ParseExempt(s); err == nil { // resolveConfig checked it
			d.pcfg.Exempt = append(d.pcfg.Exempt, x)
		}
	}
}
