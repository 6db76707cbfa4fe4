package bus

// Exempt and Unexempt: the escape hatch. A caller names a unit or a
// workload (or a glob of them); the service makes it an entry of the
// exempt list (resolveExempt), authorises the caller for that entry
// (exempt) and hands it to the daemon (Controller.SetExempt).

import (
	"context"
	"fmt"
	"strings"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/internal/names"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// ExemptAction is the polkit action asked about when a caller other than
// root exempts (or unexempts) what is not their own: a system unit,
// another user's, a cgroup of the managed parent, or an entry naming
// every manager (packaging/polkit/org.schedpolicyd.policy: an
// administrator, auth_admin_keep). A caller's own units need no polkit.
const ExemptAction = "org.schedpolicyd.exempt"

// Exempt takes what name names out of placement: it gets its original
// CPUs back at once and is not placed until Unexempt; the entry made is
// kept in state.json and returned. Errors, in this order: InvalidArgs for
// another signature or a name that is not an entry (names.ParseExempt) or
// names no workload and is neither a unit's name nor a glob; Failed when
// the caller's uid cannot be had; AccessDenied when the entry is not the
// caller's own and polkit refuses ExemptAction; then the daemon's
// (Controller.SetExempt). Exempting twice changes nothing.
func (o busObject) Exempt(msg dbus.Message, sender dbus.Sender, name string) (string, *dbus.Error) {
	return o.s.exempt(msg, sender, name, true)
}

// Unexempt puts back in placement what Exempt took out: name is the
// entry Exempt returned, or the name given to it (resolved the same way:
// a non-root caller's own entry first). Errors as Exempt's; InvalidArgs
// for an entry that is not exempt or that the configuration file holds.
func (o busObject) Unexempt(msg dbus.Message, sender dbus.Sender, name string) (string, *dbus.Error) {
	return o.s.exempt(msg, sender, name, false)
}

// exempt is Exempt (on) and Unexempt.
func (s *session) exempt(msg dbus.Message, sender dbus.Sender, name string, on bool) (string, *dbus.Error) {
	method := "Exempt"
	if !on {
		method = "Unexempt"
	}
	if e := checkSig(msg, method, "s"); e != nil {
		return "", e
	}
	entry, err := names.ParseExempt(name)
	if err != nil {
		return "", invalidArgs("%v: %v", policy.ErrInvalid, err)
	}
	uid, err := s.callerUID(sender)
	if err != nil {
		return "", dbus.MakeFailedError(fmt.Errorf("cannot identify the caller: %w", err))
	}
	var snap snapshot.Snapshot
	if p := s.ctl.Published(); p != nil {
		snap = *p
	}
	entry, err = resolveExempt(entry, uid, snap, on)
	if err != nil {
		return "", invalidArgs("%v", err)
	}
	if own, ok := entry.UID(); !ok || own != uid {
		if e := s.authorizeAction(msg, sender, ExemptAction); e != nil {
			return "", e
		}
	}
	if _, err := s.ctl.SetExempt(context.Background(), entry.String(), on); err != nil {
		return "", toDBusError(err)
	}
	return entry.String(), nil
}

// resolveExempt makes the entry a caller of uid means by name (snap: what
// the daemon published last, for what name names now). Who may make the
// entry depends on it alone (exempt): one of the caller's own
// manager, user:UID/..., is theirs; any other needs an administrator
// (polkit: ExemptAction).
//
// An entry naming a manager is taken as it is. Without one, root's names
// every manager (and the managed parent's cgroups); another caller's is
// their own units' (user:UID/NAME) when it names one of their own
// workloads now or names none at all (a unit to come: "pre-exempting"),
// and stays every manager's when it names only others' workloads (a
// system service: an administrator's to exempt). To Unexempt, a
// non-root caller's own entry is taken first when the list holds it.
//
// An entry that names no workload now must be a glob or a unit's name
// (NAME.service, NAME.scope) for Exempt: anything else is most likely a
// typo, refused with policy.ErrInvalid.
func resolveExempt(entry names.Exempt, uid uint32, snap snapshot.Snapshot, on bool) (names.Exempt, error) {
	if entry.Manager == "" && uid != 0 {
		own := names.UserExempt(uid, entry.Pattern)
		if !on {
			for _, x := range snap.Exempt {
				if x.Entry == own.String() {
					return own, nil
				}
			}
			return entry, nil
		}
		mine, others := 0, 0
		for _, w := range snap.Workloads {
			if entry.Match(w.Manager, w.Name) {
				if w.Manager == own.Manager {
					mine++
				} else {
					others++
				}
			}
		}
		if mine > 0 || others == 0 {
			entry = own
		}
	}
	if !on {
		return entry, nil
	}
	for _, w := range snap.Workloads {
		if entry.Match(w.Manager, w.Name) {
			return entry, nil
		}
	}
	if !entry.IsGlob() && !strings.HasSuffix(entry.Pattern, ".service") && !strings.HasSuffix(entry.Pattern, ".scope") {
		return entry, fmt.Errorf("%w: no workload %q (schedpolicyctl workloads lists them); a name not running yet must be a unit's (NAME.service, NAME.scope) or a glob", policy.ErrInvalid, entry.String())
	}
	return entry, nil
}
