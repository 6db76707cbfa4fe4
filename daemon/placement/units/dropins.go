package units

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/systemd"
)

// allowedDropIn is the name of the drop-in file systemd writes for a
// SetUnitProperties call that sets AllowedCPUs= (`systemctl set-property`
// does the same): "50-" + the property + ".conf", below
// /run/systemd/system.control (runtime), /etc/systemd/system.control
// (persistent) or /run/systemd/transient (a transient unit), each in
// UNIT.d/; a user's manager uses /run/user/UID/systemd/... and
// ~/.config/systemd/user.control. The unit's DropInPaths lists the ones
// in force. Each call replaces the file (a new inode).
const allowedDropIn = "50-AllowedCPUs.conf"

// runtimeRoot is where the runtime drop-ins live, those that a
// SetUnitProperties call with runtime=true writes (a variable for tests).
var runtimeRoot = "/run/"

// dropIns identifies the AllowedCPUs= drop-ins among paths (a unit's
// DropInPaths, of the system manager): "PATH@INODE.MTIME" for each (MTIME
// in nanoseconds), "PATH@-" for one that cannot be read, sorted and
// space-separated; "" when there is none. statefile.UnitRecord.DropIns
// holds it. At most maxDropInIDs are kept (systemd has three places for
// one: transient, runtime and persistent), each path of at most
// maxDropInPath bytes.
func dropIns(paths []string) string { return dropInIDs(paths, "", true) }

// userDropIns is dropIns for a user's unit: only drop-ins below the
// user's runtime directory (under, "RUNROOT/user/UID/": where the user's
// manager writes the runtime values the daemon sets) are looked at, and
// without following a symbolic link at the end (lstat): the paths are the
// user's to choose, and what the daemon records of them (their inode and
// time, in state.json) must not tell of files elsewhere. Called on the
// user's link, never on the loop.
func userDropIns(paths []string, under string) string { return dropInIDs(paths, under, false) }

// Bounds of a recorded identity (dropInIDs).
const (
	maxDropInIDs  = 4
	maxDropInPath = 512
)

func dropInIDs(paths []string, under string, follow bool) string {
	var out []string
	for _, p := range paths {
		if filepath.Base(p) != allowedDropIn || len(p) > maxDropInPath || !strings.HasPrefix(p, under) {
			continue
		}
		out = append(out, p+"@"+fileID(p, follow))
	}
	sort.Strings(out)
	if len(out) > maxDropInIDs {
		out = out[:maxDropInIDs]
	}
	return strings.Join(out, " ")
}

// fileID is "INODE.MTIME" of path (of a symbolic link itself unless
// follow), "-" when it cannot be read.
func fileID(path string, follow bool) string {
	var st syscall.Stat_t
	stat := syscall.Stat
	if !follow {
		stat = syscall.Lstat
	}
	if err := stat(path, &st); err != nil {
		return "-"
	}
	return strconv.FormatUint(st.Ino, 10) + "." + strconv.FormatInt(st.Mtim.Nano(), 10)
}

// rewritten reports whether someone set AllowedCPUs= on r's unit since
// the daemon's last write: its AllowedCPUs= drop-ins now (ids, dropIns of
// the unit's DropInPaths) are not the files r.DropIns recorded right
// after that write (one was replaced, added or removed). It tells an
// administrator's `systemctl set-property` of the very value the daemon
// had set from the daemon's own. False when r.DropIns is unknown ("").
func rewritten(r *statefile.UnitRecord, ids string) bool {
	return r.DropIns != "" && ids != r.DropIns
}

// unitView is a unit as read from its manager: its properties and the
// identity of its AllowedCPUs= drop-ins (dropIns of its DropInPaths),
// taken where the unit was read. A user's drop-ins are files below a
// directory the user owns, so a user's units are viewed on their link's
// goroutine (userlink.go), never on the loop; the system manager's, whose
// drop-ins are root's, on the loop.
type unitView struct {
	systemd.UnitInfo
	dropIDs string
}

// viewOf is the view of a system manager's unit.
func viewOf(info systemd.UnitInfo) unitView {
	return unitView{UnitInfo: info, dropIDs: dropIns(info.DropInPaths)}
}

// userViewOf is the view of a user's unit (userDropIns below under).
func userViewOf(info systemd.UnitInfo, under string) unitView {
	return unitView{UnitInfo: info, dropIDs: userDropIns(info.DropInPaths, under)}
}

// lingering reports, for the record of a unit its manager no longer
// knows, whether the daemon's value outlives the unit: r.DropIns names a
// drop-in below /run (the one the daemon's write made) that is still that
// very file. systemd removes a transient unit's drop-ins with the unit,
// but not the runtime drop-in of a unit loaded from a unit file: a unit
// loaded again under the same name (a unit file created anew) starts with
// the daemon's value, and SetUnitProperties cannot reset it meanwhile
// (the manager refuses a unit that is not found). known is false when
// r.DropIns names no such file (unknown: a record of an older version, or
// a write under way).
func lingering(r *statefile.UnitRecord) (path string, known, lingers bool) {
	for _, f := range strings.Fields(r.DropIns) {
		i := strings.LastIndexByte(f, '@')
		if i < 0 || !strings.HasPrefix(f, runtimeRoot) {
			continue
		}
		p, id := f[:i], f[i+1:]
		if _, err := os.Lstat(p); err != nil {
			return p, true, false
		}
		// A user's drop-in is identified without following (userDropIns).
		return p, true, fileID(p, !strings.HasPrefix(p, runtimeRoot+"user/")) == id
	}
	return "", false, false
}
