package units

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
	"github.com/schedpolicyd/schedpolicyd/systemd"
)

// A user's manager is untrusted. The daemon reaches it through a socket in
// a directory the user owns (/run/user/UID/systemd/private), so whatever
// the user runs there answers; and its units' drop-ins are files below
// that directory, which the user may have made anything (a FUSE mount,
// with user_allow_other). So the loop never calls a user's manager and
// never touches a file of the user's: each followed user has a link, one
// goroutine that owns the connection, makes every call with a deadline and
// hands the results to the loop as events (linkMsg, through EventsC). The
// loop asks for work (a listing, a batch of writes, a restore) without
// waiting; a manager that does not answer in time, or sends what systemd
// cannot, is dropped, and the link connects again after a back-off that
// doubles up to linkBackoffMax.
const (
	// linkConnectTimeout bounds connecting to a user's manager: dialling,
	// authenticating, subscribing, its Version and the first listing.
	linkConnectTimeout = 5 * time.Second
	// linkCallTimeout bounds each call on a connected manager; a listing
	// gets unitScanTimeout.
	linkCallTimeout = 5 * time.Second
	// linkBackoffMin and linkBackoffMax bound the wait before connecting
	// again to a manager that failed or misbehaved.
	linkBackoffMin = 2 * time.Second
	linkBackoffMax = 5 * time.Minute
	// maxLinkNames bounds the units a link keeps to read from its
	// manager's signals; past it, one listing replaces them.
	maxLinkNames = 1024
	// maxUserWorkloads bounds the units of one user's manager the daemon
	// places (and keeps records of): past it, units are not adopted, said
	// once per user.
	maxUserWorkloads = 1024
	// linkRestoreTimeout bounds how long a restore (at stop) waits for
	// the users' links: what is not back by then stays in state.json for
	// the next start.
	linkRestoreTimeout = 8 * time.Second
)

// linkTiming is how long a link waits for what (the constants above;
// shorter in tests).
type linkTiming struct {
	connect, call, list, backoffMin, backoffMax, restore time.Duration
}

var defaultLinkTiming = linkTiming{connect: linkConnectTimeout, call: linkCallTimeout, list: unitScanTimeout,
	backoffMin: linkBackoffMin, backoffMax: linkBackoffMax, restore: linkRestoreTimeout}

// userLink is the loop's handle on one user's link goroutine (run).
type userLink struct {
	uid    int
	opts   systemd.UserOptions
	timing linkTiming
	// dial connects (systemd.ConnectUser, or a test's).
	dial func(ctx context.Context, uid int, opts systemd.UserOptions) (unitManager, error)
	// unified: cgroup v2, where resetting AllowedCPUs= goes through every
	// possible CPU (setAllowed); possible is that set.
	unified  bool
	possible sysfs.CPUSet
	// dropInRoot is the user's runtime directory, "RUNROOT/user/UID/":
	// only drop-ins below it are identified (userDropIns).
	dropInRoot string
	out        chan<- placement.Event
	done       <-chan struct{} // the placement's: ends every link
	stop       chan struct{}   // this link's
	stopOnce   sync.Once
	exited     chan struct{}
	kick       chan struct{} // cap 1: work was asked for

	mu   sync.Mutex
	work linkWork
}

// linkWork is what the loop asked a link for, taken in one piece by the
// goroutine.
type linkWork struct {
	list bool
	// check: AllowedCPUs= drop-in identities of the user's records
	// (statefile.UnitRecord.DropIns) whose lingering the next listing
	// reports.
	check   []string
	writes  []userWrite
	restore *linkRestore
}

// userWrite is one AllowedCPUs= to set on a user's unit (Write): key is
// the unit's record key, want the value, expect the value the loop last
// saw (the write is skipped when the unit holds another, or its drop-ins
// are not expectIDs when that is known).
type userWrite struct {
	key, name string
	want      sysfs.CPUSet
	expect    string
	expectIDs string
}

// writeResult is what became of one userWrite: done (dropIDs is the
// unit's drop-ins after it), refused (err), not made because the unit
// changed (changed: its view now) or is gone, unknown: the connection
// failed during the call, so the value may or may not be there, or
// widened: the widening step made (the unit holds held, dropIDs its
// drop-ins after it), the value itself refused (err).
type writeResult struct {
	key, name string
	want      sysfs.CPUSet
	outcome   writeOutcome
	view      *unitView
	dropIDs   string
	held      sysfs.CPUSet
	err       error
}

type writeOutcome int

const (
	writeDone writeOutcome = iota
	writeRefused
	writeChanged
	writeGone
	writeUnknown
	writeWidened
)

// linkRestore is a restore's request to a link: the user's written
// records, as copies (the loop keeps the originals), and where the link
// answers, once.
type linkRestore struct {
	recs []statefile.UnitRecord
	// widen: the records (by key) whose widening step was recorded; the
	// others are reset without it.
	widen []string
	reply chan []restoreResult
}

// restoreResult is what became of one record's restore: its original
// is back (restored), the unit holds someone else's value (theirs: cur),
// the unit and the value are gone, the value lingers in the unit's
// runtime drop-in (lingers: path), or it failed (err; unknown: the
// connection failed during the write).
type restoreResult struct {
	key     string
	outcome restoreOutcome
	cur     string
	dropIDs string
	path    string
	err     error
}

type restoreOutcome int

const (
	restoreDone restoreOutcome = iota
	restoreTheirs
	restoreGone
	restoreLingers
	restoreFailed
	restoreUnknown
	restoreWidened
)

// result is what the journal makes of the outcome
// (placement.Journal.TakeRestore): the unit lingering or the reset
// refused, nothing was written.
func (o restoreOutcome) result() placement.RestoreResult {
	switch o {
	case restoreDone:
		return placement.RestoredBack
	case restoreGone:
		return placement.RestoredGone
	case restoreTheirs:
		return placement.RestoredTheirs
	case restoreUnknown, restoreWidened:
		return placement.RestoreUnknown
	}
	return placement.RestoreNotMade
}

// linkMsg is a link's message to the loop (EventsC). Exactly one kind:
//
//   - up: connected, subscribed and listed (version, units, lingers);
//   - list: a listing asked for (units; complete, lingers);
//   - units: units read after the manager's signals, and gone ones;
//   - reload: the manager's Reloading(true) (started) or (false);
//   - written: the results of a batch of writes;
//   - down: the connection failed or ended (err; gone: no socket, the
//     user's runtime directory is gone; misbehaved: the manager did not
//     answer in time or sent what systemd cannot, and the link waits
//     backoff before connecting again).
//
// refused carries the invalid values the manager sent since the last
// message (systemd.InvalidError).
type linkMsg struct {
	uid  int
	link *userLink

	up, list, units, reload, written, down bool
	version                                string
	views                                  []unitView
	complete                               bool
	lingers                                map[string]bool
	gone                                   []string
	started                                bool
	results                                []writeResult
	err                                    error
	socketGone, misbehaved                 bool
	backoff                                time.Duration
	refused                                []error
	refusedMore                            int
}

func (linkMsg) BackendEvent() {}

// cleanErr is err as the loop may log it: what a user's manager sends in
// an error answer is any bytes, up to a message's size, so the text is
// cut to 256 bytes and quoted where it is not plain text. The link has
// classified err (gone, misbehaved) before.
func cleanErr(err error) error {
	if err == nil {
		return nil
	}
	s := err.Error()
	cut := len(s) > 256
	if cut {
		s = s[:256]
	}
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		s = strconv.Quote(s)
	}
	if cut {
		s += "…"
	}
	return errors.New(s)
}

// errMisbehaved wraps what makes a link drop a connection it made.
var errMisbehaved = errors.New("the user's manager misbehaved")

// newLink makes the link for uid, whose manager is reached with opts, and
// starts its goroutine (run).
func (u *Placement) newLink(uid int, opts systemd.UserOptions) *userLink {
	l := &userLink{uid: uid, opts: opts, timing: u.linkTiming, dial: u.dialUser, dropInRoot: filepath.Join(u.runRoot, "user", strconv.Itoa(uid)) + "/", unified: u.unified, out: u.msgs, done: u.done,
		stop: make(chan struct{}), exited: make(chan struct{}), kick: make(chan struct{}, 1)}
	if u.unified {
		l.possible, _ = possibleCPUs(sysfsRoot(u.e.Cfg))
	}
	go l.run()
	return l
}

// close ends the link (its connection closes; calls under way end with
// their deadline); it does not wait.
func (l *userLink) close() { l.stopOnce.Do(func() { close(l.stop) }) }

// ask adds work for the goroutine and wakes it; never blocks.
func (l *userLink) ask(f func(w *linkWork)) {
	l.mu.Lock()
	f(&l.work)
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// send hands msg to the loop, unless the link or the placement ends
// first; it reports whether it was handed.
func (l *userLink) send(msg linkMsg) bool {
	msg.uid, msg.link = l.uid, l
	select {
	case l.out <- msg:
		return true
	case <-l.stop:
	case <-l.done:
	}
	return false
}

// stopped reports whether the link was closed.
func (l *userLink) stopped() bool {
	select {
	case <-l.stop:
		return true
	case <-l.done:
		return true
	default:
		return false
	}
}

// wait waits d, or until the link ends (false), or until a restore is
// asked for: the reset at stop tries the manager at once rather than
// after the back-off (run connects, then does it).
func (l *userLink) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return true
		case <-l.stop:
			return false
		case <-l.done:
			return false
		case <-l.kick:
			l.mu.Lock()
			restore := l.work.restore != nil
			l.mu.Unlock()
			if restore {
				return true
			}
		}
	}
}

// failRestore answers a pending restore with every record failed.
func (l *userLink) failRestore(err error) {
	l.mu.Lock()
	r := l.work.restore
	l.work.restore = nil
	l.mu.Unlock()
	if r == nil {
		return
	}
	var out []restoreResult
	for _, rec := range r.recs {
		out = append(out, restoreResult{key: rec.Key(), outcome: restoreFailed, err: err})
	}
	r.reply <- out
}

// run is the link's goroutine: connect, serve until the connection ends,
// connect again (at once after the manager closed a connection that
// worked, as it does when it re-executes; after the back-off otherwise).
func (l *userLink) run() {
	defer close(l.exited)
	backoff := time.Duration(0)
	brief := false // a connection closed within briefConnection came before
	for !l.stopped() {
		m, views, lingers, version, err := l.connect()
		l.dropWrites() // asked for before this connection: planned on what the loop saw then
		if err != nil {
			socketGone := errors.Is(err, fs.ErrNotExist)
			if socketGone {
				l.goneRestore()
			} else {
				l.failRestore(fmt.Errorf("the user's manager is not reachable: %w", cleanErr(err)))
			}
			backoff = l.nextBackoff(backoff)
			mis := !socketGone && !errors.Is(err, errClosed)
			if !l.send(linkMsg{down: true, err: cleanErr(err), socketGone: socketGone, misbehaved: mis, backoff: backoff}) || !l.wait(backoff) {
				return
			}
			continue
		}
		refused, more := m.TakeRefused()
		if !l.send(linkMsg{up: true, version: version, views: views, complete: true, lingers: lingers, refused: refused, refusedMore: more}) {
			m.Close()
			return
		}
		// Work asked for while not connected (a restore) is done now.
		select {
		case l.kick <- struct{}{}:
		default:
		}
		upAt := time.Now()
		err = l.serve(m)
		m.Close()
		if l.stopped() {
			return
		}
		l.dropWrites()
		misbehaved := errors.Is(err, errMisbehaved)
		lived := time.Since(upAt) >= briefConnection
		if lived {
			backoff, brief = 0, false
		}
		switch {
		case misbehaved:
			backoff = l.nextBackoff(backoff)
		case !lived && brief:
			backoff = l.nextBackoff(backoff)
		case !lived:
			brief = true // the first brief one is reached again at once
		}
		if !l.send(linkMsg{down: true, err: cleanErr(err), misbehaved: misbehaved, backoff: backoff}) {
			return
		}
		if backoff > 0 && !l.wait(backoff) {
			return
		}
	}
}

// nextBackoff doubles d within [linkBackoffMin, linkBackoffMax].
func (l *userLink) nextBackoff(d time.Duration) time.Duration {
	return min(max(2*d, l.timing.backoffMin), l.timing.backoffMax)
}

// goneRestore answers a pending restore: the user's manager and its
// runtime values are gone (no socket: the user logged out).
func (l *userLink) goneRestore() {
	l.mu.Lock()
	r := l.work.restore
	l.work.restore = nil
	l.mu.Unlock()
	if r == nil {
		return
	}
	var out []restoreResult
	for _, rec := range r.recs {
		out = append(out, restoreResult{key: rec.Key(), outcome: restoreGone})
	}
	r.reply <- out
}

// connect connects within linkConnectTimeout, subscribes, reads the
// manager's version and lists its units, with the lingering of the
// records the loop asked about.
func (l *userLink) connect() (unitManager, []unitView, map[string]bool, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), l.timing.connect)
	defer cancel()
	go func() { // the link's end ends the connecting too
		select {
		case <-l.stop:
		case <-l.done:
		case <-ctx.Done():
		}
		cancel()
	}()
	m, err := l.dial(ctx, l.uid, l.opts)
	if err != nil {
		return nil, nil, nil, "", err
	}
	fail := func(err error) (unitManager, []unitView, map[string]bool, string, error) {
		m.Close()
		return nil, nil, nil, "", misbehaved(err)
	}
	if _, err := m.Events(ctx); err != nil {
		return fail(err)
	}
	version, err := m.Version(ctx)
	if err != nil {
		return fail(err)
	}
	check := l.takeCheck()
	views, err := l.listViews(ctx, m)
	if err != nil {
		return fail(err)
	}
	return m, views, lingerings(check), version, nil
}

// misbehaved marks err as a reason to drop the connection and back off,
// unless the call failed because the manager closed the connection
// (godbus's ErrClosed: it re-executes, or exits), which is errClosed.
func misbehaved(err error) error {
	if errors.Is(err, errMisbehaved) || errors.Is(err, errClosed) {
		return err
	}
	if connectionEnded(err) {
		return fmt.Errorf("%w: %w", errClosed, err)
	}
	return fmt.Errorf("%w: %w", errMisbehaved, err)
}

// connectionEnded reports whether a call failed because the connection
// ended under it: godbus hands a call under way the read's error (EOF, a
// reset) or ErrClosed.
func connectionEnded(err error) bool {
	for _, e := range []error{dbus.ErrClosed, io.EOF, io.ErrUnexpectedEOF, net.ErrClosed, syscall.ECONNRESET, syscall.EPIPE} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// errClosed is the end of a connection the manager closed.
var errClosed = errors.New("the user's manager closed the connection (it re-executed or exited)")

// briefConnection: a connection that the manager closes within this long
// of its making counts towards the back-off as a failure does, so that a
// manager that closes every connection at once is not reached again in a
// loop; one that lived longer (a re-execution) is reached again at once.
const briefConnection = 10 * time.Second

// takeCheck takes the drop-in identities the loop asked about.
func (l *userLink) takeCheck() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.work.check
	l.work.check = nil
	return c
}

// listViews lists the manager's services and scopes as views (their
// drop-ins identified here, off the loop). A listing cut short is an
// error.
func (l *userLink) listViews(ctx context.Context, m unitManager) ([]unitView, error) {
	lctx, cancel := context.WithTimeout(ctx, l.timing.list)
	defer cancel()
	list, err := m.Units(lctx, "*.service", "*.scope")
	if err != nil {
		return nil, err
	}
	views := make([]unitView, 0, len(list))
	for _, info := range list {
		views = append(views, userViewOf(info, l.dropInRoot))
	}
	return views, nil
}

// lingerings reports, for each AllowedCPUs= drop-in identity of check,
// whether that drop-in is still the very file (lingering).
func lingerings(check []string) map[string]bool {
	out := map[string]bool{}
	for _, ids := range check {
		_, _, lingers := lingering(&statefile.UnitRecord{DropIns: ids})
		out[ids] = lingers
	}
	return out
}

// serve follows a connected manager: its signals (units to read, reloads,
// units dropped) and the loop's work, until the connection closes
// (errors: the manager closed it, or misbehaved) or the link ends (nil).
func (l *userLink) serve(m unitManager) error {
	events, err := m.Events(context.Background()) // subscribed at connect: the channel
	if err != nil {
		return misbehaved(err)
	}
	names := map[string]bool{}
	for {
		select {
		case <-l.stop:
			l.failRestore(errors.New("the daemon no longer follows the user"))
			return nil
		case <-l.done:
			return nil
		case ev, ok := <-events:
			if !ok {
				return errClosed
			}
			if err := l.onEvent(m, ev, names); err != nil {
				return err
			}
		case <-l.kick:
		}
		// Take whatever else is queued, then do the work.
	drain:
		for i := 0; i < 256; i++ {
			select {
			case ev, ok := <-events:
				if !ok {
					return errClosed
				}
				if err := l.onEvent(m, ev, names); err != nil {
					return err
				}
			default:
				break drain
			}
		}
		if err := l.doWork(m, names); err != nil {
			return err
		}
	}
}

// onEvent takes one signal of the manager: a reload is told to the loop
// at once (it holds the user's units meanwhile); a unit to read is noted
// (names, bounded: past maxLinkNames a listing replaces them).
func (l *userLink) onEvent(m unitManager, ev systemd.UnitEvent, names map[string]bool) error {
	switch ev.Kind {
	case systemd.ReloadStarted, systemd.ReloadFinished:
		started := ev.Kind == systemd.ReloadStarted
		if !started {
			l.ask(func(w *linkWork) { w.list = true })
		}
		if !l.send(linkMsg{reload: true, started: started}) {
			return nil
		}
		return nil
	}
	if t := systemd.UnitType(ev.Name); t != "Service" && t != "Scope" {
		return nil
	}
	if len(names) >= maxLinkNames {
		clear(names)
		l.ask(func(w *linkWork) { w.list = true })
		return nil
	}
	names[ev.Name] = true
	return nil
}

// doWork does what the loop asked and what the signals call for: a
// restore first (the daemon is stopping, and waits for it), then a
// listing (which covers the units to read), else the units to read, then
// the writes.
func (l *userLink) doWork(m unitManager, names map[string]bool) error {
	l.mu.Lock()
	w := l.work
	l.work = linkWork{}
	l.mu.Unlock()
	if w.restore != nil {
		results, err := l.restore(m, w.restore)
		w.restore.reply <- results
		w.restore = nil
		// The daemon is stopping: a write asked for before the reset
		// must not land after it (the unit would keep a value of ours that
		// no record holds any more).
		l.mu.Lock()
		l.work.writes = append(w.writes, l.work.writes...)
		l.mu.Unlock()
		w.writes = nil
		l.dropWrites()
		if err != nil {
			l.requeue(w)
			return err
		}
	}
	if m.Overflowed() {
		w.list = true
	}
	if w.list {
		clear(names)
		views, err := l.listViews(context.Background(), m)
		if err != nil {
			l.requeue(w)
			return misbehaved(err)
		}
		refused, more := m.TakeRefused()
		if !l.send(linkMsg{list: true, views: views, complete: true, lingers: lingerings(w.check), refused: refused, refusedMore: more}) {
			return nil
		}
	} else if len(names) > 0 {
		if err := l.readUnits(m, names); err != nil {
			l.requeue(w)
			return err
		}
	}
	if len(w.writes) > 0 {
		results, err := l.write(m, w.writes)
		l.send(linkMsg{written: true, results: results})
		if err != nil {
			return err
		}
	}
	return nil
}

// dropWrites answers the writes asked for and not made: not made (the
// loop clears their pending values and plans again once the manager is
// back).
func (l *userLink) dropWrites() {
	l.mu.Lock()
	ws := l.work.writes
	l.work.writes = nil
	l.mu.Unlock()
	if len(ws) == 0 {
		return
	}
	results := make([]writeResult, 0, len(ws))
	for _, wr := range ws {
		results = append(results, writeResult{key: wr.key, name: wr.name, want: wr.want, outcome: writeRefused, err: errors.New("not made: the user's manager was not connected")})
	}
	l.send(linkMsg{written: true, results: results})
}

// requeue puts back the writes and the restore of w for the next
// connection (the listing is done at connect anyway).
func (l *userLink) requeue(w linkWork) {
	if len(w.writes) > 0 {
		results := make([]writeResult, 0, len(w.writes))
		for _, wr := range w.writes {
			results = append(results, writeResult{key: wr.key, name: wr.name, want: wr.want, outcome: writeRefused, err: errors.New("not made: the user's manager did not answer")})
		}
		l.send(linkMsg{written: true, results: results})
	}
	if w.restore != nil {
		l.mu.Lock()
		l.work.restore = w.restore
		l.mu.Unlock()
	}
}
