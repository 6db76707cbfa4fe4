package units

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
	"github.com/schedpolicyd/schedpolicyd/systemd"
)

// What a user's link does on its connection (userlink.go): the units read
// after the manager's signals, the writes and the reset at stop, each
// call with its deadline.

// readUnits reads each unit of names (LoadedUnitInfo: it never loads
// one) and hands the views, and the units gone, to the loop.
func (l *userLink) readUnits(m unitManager, names map[string]bool) error {
	var views []unitView
	var gone []string
	start := time.Now()
	for name := range names {
		if l.stopped() {
			return nil
		}
		if time.Since(start) > l.timing.list {
			// A manager that answers each read just in time: the rest
			// are read by a listing, which one deadline bounds.
			l.ask(func(w *linkWork) { w.list = true })
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.timing.call)
		info, err := m.LoadedUnitInfo(ctx, name)
		cancel()
		switch {
		case err == nil:
			views = append(views, userViewOf(info, l.dropInRoot))
		case isNoSuchUnit(err) || errors.Is(err, systemd.ErrInvalid):
			gone = append(gone, name)
		default:
			return misbehaved(err)
		}
	}
	clear(names)
	refused, more := m.TakeRefused()
	l.send(linkMsg{units: true, views: views, gone: gone, refused: refused, refusedMore: more})
	return nil
}

// write makes a batch of writes in order (see userWrite); a call that
// fails on the connection (not systemd's refusal) ends the batch: that
// write's outcome is unknown, the rest are not made.
func (l *userLink) write(m unitManager, ws []userWrite) ([]writeResult, error) {
	out := make([]writeResult, 0, len(ws))
	for i, w := range ws {
		if l.stopped() {
			for _, rest := range ws[i:] {
				out = append(out, writeResult{key: rest.key, name: rest.name, want: rest.want, outcome: writeRefused, err: errors.New("not made: the daemon no longer follows the user")})
			}
			return out, nil
		}
		r := writeResult{key: w.key, name: w.name, want: w.want}
		ctx, cancel := context.WithTimeout(context.Background(), l.timing.call)
		err := l.writeOne(ctx, m, w, &r)
		cancel()
		r.err = cleanErr(r.err)
		out = append(out, r)
		if err != nil {
			for _, rest := range ws[i+1:] {
				out = append(out, writeResult{key: rest.key, name: rest.name, want: rest.want, outcome: writeRefused, err: errors.New("not made: the user's manager did not answer")})
			}
			return out, misbehaved(err)
		}
	}
	return out, nil
}

// writeOne is one write: the unit read first (skipped when it changed),
// then set, then its drop-ins read. It returns an error only for a
// failure of the connection (r.outcome is then unknown).
func (l *userLink) writeOne(ctx context.Context, m unitManager, w userWrite, r *writeResult) error {
	info, err := m.UnitInfo(ctx, w.name)
	switch {
	case isNoSuchUnit(err) || err == nil && info.LoadState == "not-found":
		r.outcome = writeGone
		return nil
	case errors.Is(err, systemd.ErrInvalid):
		r.outcome, r.err = writeRefused, err
		return nil
	case err != nil:
		r.outcome, r.err = writeRefused, err
		return err
	}
	v := userViewOf(info, l.dropInRoot)
	if cur := sysfs.NewCPUSet(info.AllowedCPUs...).String(); cur != w.expect || w.expectIDs != "" && v.dropIDs != w.expectIDs {
		r.outcome, r.view = writeChanged, &v
		return nil
	}
	var possible sysfs.CPUSet
	if l.unified {
		possible = l.possible // as setAllowed: through every possible CPU first
	}
	if widened, err := setAllowedVia(ctx, m, w.name, w.want, possible); err != nil {
		err = l.writeFailed(r, err)
		if widened && r.outcome == writeRefused {
			// The unit holds the widening value (setAllowed's
			// widenedError): recorded as ours, with the drop-ins that
			// write left.
			r.outcome, r.held, r.err = writeWidened, l.possible, &widenedError{held: l.possible, err: r.err}
			if paths, err := m.DropInPaths(ctx, w.name); err == nil {
				r.dropIDs = userDropIns(paths, l.dropInRoot)
			}
		}
		return err
	}
	r.outcome = writeDone
	if paths, err := m.DropInPaths(ctx, w.name); err == nil {
		r.dropIDs = userDropIns(paths, l.dropInRoot)
	}
	return nil
}

// writeFailed sets r for a failed SetAllowedCPUs: systemd's refusal (a
// D-Bus error answer) is refused; anything else (the deadline, the
// connection) unknown, and returned.
func (l *userLink) writeFailed(r *writeResult, err error) error {
	return setFailed(&r.err, err, func(gone, refused bool) {
		switch {
		case gone:
			r.outcome = writeGone
		case refused:
			r.outcome = writeRefused
		default:
			r.outcome = writeUnknown
		}
	})
}

// setFailed sorts the error of a SetAllowedCPUs into what set says:
// gone (systemd's NoSuchUnit), refused (another D-Bus error answer:
// systemd said no) or neither (the deadline, the connection: whether the
// value was set is unknown, and err is returned).
func setFailed(to *error, err error, set func(gone, refused bool)) error {
	*to = err
	var de dbus.Error
	switch {
	case isNoSuchUnit(err):
		set(true, false)
	case errors.As(err, &de):
		set(false, true)
	default:
		set(false, false)
		return err
	}
	return nil
}

// restore restores the user's records (copies, their Pending as before
// the loop recorded the widening step) as unitRestore does for the
// system manager's, and returns each outcome.
func (l *userLink) restore(m unitManager, req *linkRestore) ([]restoreResult, error) {
	var out []restoreResult
	var failed error
	for i := range req.recs {
		rec := req.recs[i]
		r := restoreResult{key: rec.Key()}
		if failed != nil {
			r.outcome, r.err = restoreFailed, failed
			out = append(out, r)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.timing.call)
		err := l.restoreOne(ctx, m, &rec, slices.Contains(req.widen, rec.Key()), &r)
		cancel()
		r.err = cleanErr(r.err)
		out = append(out, r)
		if err != nil {
			failed = err
		}
	}
	if failed != nil {
		return out, misbehaved(failed)
	}
	return out, nil
}

// restoreOne restores one record; an error is the connection's.
func (l *userLink) restoreOne(ctx context.Context, m unitManager, rec *statefile.UnitRecord, widen bool, r *restoreResult) error {
	info, err := m.UnitInfo(ctx, rec.Unit)
	if err == nil && info.LoadState == "not-found" || isNoSuchUnit(err) {
		if path, _, lingers := lingering(rec); lingers {
			r.outcome, r.path = restoreLingers, path
			return nil
		}
		r.outcome = restoreGone
		return nil
	}
	if errors.Is(err, systemd.ErrInvalid) {
		r.outcome, r.err = restoreFailed, err
		return nil
	}
	if err != nil {
		r.outcome, r.err = restoreFailed, err
		return err
	}
	v := userViewOf(info, l.dropInRoot)
	cur := sysfs.NewCPUSet(info.AllowedCPUs...).String()
	r.cur, r.dropIDs = cur, v.dropIDs
	// The journal's decision (placement.DecideRestore), taken here on
	// the copy: the read and the write are one piece of the link's work.
	if placement.DecideRestore(rec.Values, placement.Held{Value: cur, Kept: !rewritten(rec, v.dropIDs)}, nil).Action == placement.RestoreLeaveTheirs {
		r.outcome = restoreTheirs
		return nil
	}
	orig, _ := sysfs.ParseCPUList(rec.Original)
	var possible sysfs.CPUSet
	if widen && l.unified {
		possible = l.possible
	}
	if widened, err := setAllowedVia(ctx, m, rec.Unit, orig, possible); err != nil {
		err = l.restoreFailed(r, err)
		if widened && r.outcome == restoreFailed {
			// The unit holds the widening value, which only the record's
			// Pending says is ours: "not made" would take it back, and
			// the next reset would find "someone else's" value and keep
			// it for good, the user's original lost. The record stays
			// as it is (placement.RestoreUnknown).
			r.outcome, r.err = restoreWidened, &widenedError{held: l.possible, err: r.err}
		}
		return err
	}
	r.outcome = restoreDone
	return nil
}

func (l *userLink) restoreFailed(r *restoreResult, err error) error {
	return setFailed(&r.err, err, func(gone, refused bool) {
		switch {
		case gone:
			r.outcome = restoreGone
		case refused:
			r.outcome = restoreFailed
		default:
			r.outcome = restoreUnknown
		}
	})
}
