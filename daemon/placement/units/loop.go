package units

import (
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// The units placement as the loop sees it (backend).

func (u *Placement) Mode() string { return placement.Systemd }

func (u *Placement) Count() int { return len(u.workloads) }

// Placed says what the last apply did.
func (u *Placement) Placed() (moved, managed int, applied []string) {
	for _, w := range u.workloads {
		applied = append(applied, w.rec.Applied)
	}
	return u.e.Written, len(u.workloads), applied
}

// Refresh: the units' set changes through their managers' signals, and
// at a periodic sample only when the last scan was cut short: the sample
// then scans again and reports whether the set changed (not counted as
// activity for the back-off). A sample also looks whether a user's
// manager applies what it was told (checkApplied); one found inert
// changes what is placed too.
func (u *Placement) Refresh() (changed, busy bool) {
	if u.rescan {
		changed = u.Scan()
	}
	if u.checkApplied() {
		changed = true
	}
	return changed, false
}

// EventsC is the channel of the managers' and logind's signals and the
// focus watch's events, unitMsg (nil before open).
func (u *Placement) EventsC() <-chan placement.Event { return u.msgs }

// OnMsg follows one message: of the system manager, logind or the focus
// watch (onEvent), or of a user's link (onLink); one that took over 2 s
// is warned about (through the daemon's logger, Config.Log).
func (u *Placement) OnMsg(msg placement.Event) (asks placement.Asks) {
	t0 := time.Now()
	log := u.e.Cfg.Log
	switch m := msg.(type) {
	case unitMsg:
		if u.onEvent(m) {
			asks = append(asks, placement.Ask{Why: "units changed", Force: true})
		}
		log = log.WithFields(logrus.Fields{"unit": m.ev.Name, "focus": m.focus})
	case linkMsg:
		if u.mgr != nil && u.onLink(m) {
			asks = append(asks, placement.Ask{Why: "a user's units changed", Force: true})
		}
		log = log.WithField("uid", m.uid)
	default:
		return nil
	}
	if el := time.Since(t0); el > 2*time.Second {
		log.WithField("took", el.String()).Warn("slow unit event")
	}
	return asks
}

// ModelLoads adds the units as their apply plans them: an override of
// performance, or an exempt unit, has every allowed CPU, an administrator's AllowedCPUs=
// bounds the others (kept as they are here).
func (u *Placement) ModelLoads(in *placement.ModelInput) {
	for _, n := range u.Names() {
		w := u.workloads[n]
		l := policy.Load{Name: n, Util: w.avg.Util, Class: u.class(w), Slice: w.slice}
		if w.override == policy.Performance || w.exempt || u.inertUser(w.uid) {
			in.CPUs[n] = in.Allowed
			in.Fixed = append(in.Fixed, l)
			continue
		}
		in.Placed = append(in.Placed, l)
	}
}
