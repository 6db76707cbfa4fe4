package internal_test

// The import graph's layers (docs/ARCHITECTURE.md, "Packages"; the
// README's "Layout"), checked the way tailscale's tstest/deptest does: from
// `go list -json`, over each package's imports and everything they pull in.

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/schedpolicyd/schedpolicyd"

// listed is the part of `go list -json` output the rules read.
type listed struct {
	ImportPath   string
	Dir          string
	GoFiles      []string
	Imports      []string
	Deps         []string
	TestImports  []string
	XTestImports []string
}

// layers maps a package (relative to the module) to the packages of ours
// it may depend on, directly or through others; a package missing here
// may depend on anything of ours. Test files may also import
// internal/testutil.
var layers = map[string][]string{
	"policy": {},
	// Each pseudo-filesystem has its package, as procfs has its own: sysfs
	// reads /sys (and the kernel-file primitives and the CPU sets the
	// others share); cgroup reads, writes and watches cgroupfs, with
	// sysfs's primitives and CPU sets; tree serves the virtual sched_policy
	// tree, walking its directory as a trusted path.
	"sysfs":  {},
	"cgroup": {"sysfs"},
	"tree":   {"internal/trustedpath"},
	// Every consumer of D-Bus signals checks their sender with
	// internal/bussender, a leaf that imports nothing of ours.
	"systemd": {"internal/bussender"},
	// acpi and daemon both reconnect to unix sockets (acpid, the bus) with
	// internal/reconnect, a leaf that imports nothing of ours.
	// daemon counts packed workloads' CPU time with internal/taskclock
	// (perf events: not pseudo-filesystem I/O, so not sysfs), a leaf too.
	"acpi":   {"sysfs", "internal/reconnect", "internal/bussender"},
	"daemon": {"daemon/placement", "daemon/placement/cgroupfs", "daemon/placement/units", "daemon/bus", "daemon/energy", "daemon/energypref", "daemon/snapshot", "daemon/statefile", "acpi", "sysfs", "cgroup", "tree", "policy", "systemd", "internal/names", "internal/reconnect", "internal/taskclock", "internal/bussender", "internal/trustedpath"},
	// The D-Bus service talks to the daemon through its Controller
	// interface: it never imports the daemon nor anything of the
	// placement (never, below). policy for the policy names and cgroup for
	// one error it maps (cgroup.ErrCgroupName); the snapshot brings acpi
	// and sysfs.
	"daemon/bus": {"daemon/snapshot", "policy", "acpi", "sysfs", "cgroup", "internal/names", "internal/reconnect", "internal/bussender"},
	// The published state's types, shared by the daemon and its readers:
	// policy and acpi for the types of its values (acpi.Source), and what
	// acpi brings, nothing else.
	"daemon/snapshot": {"policy", "acpi", "sysfs", "internal/reconnect", "internal/bussender"},
	// state.json's format and its records, used by the daemon, by probe
	// and by the benchmark: policy for the knob, sysfs for cpulists and
	// boost settings, the snapshot (and acpi) for the energy totals,
	// internal/names for the exempt entries, internal/trustedpath for the
	// state and tree directories' locks, and what those bring, nothing
	// else.
	"daemon/statefile": {"daemon/snapshot", "policy", "acpi", "sysfs", "internal/names", "internal/reconnect", "internal/bussender", "internal/trustedpath"},
	// The energy meter and probe's energy report: sysfs for the RAPL
	// counters and battery readings, acpi for the system batteries, policy
	// and the snapshot for the totals' keys and shape, the state file for
	// their order and validation, and what those bring, nothing else.
	"daemon/energy": {"daemon/statefile", "daemon/snapshot", "policy", "acpi", "sysfs", "internal/names", "internal/reconnect", "internal/bussender", "internal/trustedpath"},
	// The energy preferences' actuator (EPP, the platform profile): sysfs
	// for the files, the state file for the records, policy and acpi for
	// the map's inputs, and what those bring, nothing else.
	"daemon/energypref": {"daemon/statefile", "daemon/snapshot", "policy", "acpi", "sysfs", "internal/names", "internal/reconnect", "internal/bussender", "internal/trustedpath"},
	// What both placement back ends share (the interface, the journal, the
	// wakes and the task-clock gate): the state file for the records, the
	// snapshot for the published workload, the task clock, and what those
	// bring.
	"daemon/placement": {"daemon/snapshot", "daemon/statefile", "policy", "sysfs", "acpi", "internal/names", "internal/taskclock", "internal/reconnect", "internal/bussender", "internal/trustedpath"},
	// The cgroupfs back end writes cpusets itself (cgroup): no systemd.
	"daemon/placement/cgroupfs": {"daemon/placement", "daemon/snapshot", "daemon/statefile", "policy", "sysfs", "cgroup", "acpi", "internal/names", "internal/taskclock", "internal/reconnect", "internal/bussender", "internal/trustedpath"},
	// The units back end places through systemd's managers; it reads its
	// units' cgroups (cgroup) for their load.
	"daemon/placement/units": {"daemon/placement", "daemon/snapshot", "daemon/statefile", "policy", "sysfs", "cgroup", "systemd", "acpi", "internal/names", "internal/taskclock", "internal/reconnect", "internal/bussender", "internal/trustedpath"},
	"internal/bussender":     {},
	"internal/names":         {},
	"internal/reconnect":     {},
	"internal/taskclock":     {},
	"internal/testutil":      {},
	// The trusted-path walk (the state and tree directories): a leaf.
	"internal/trustedpath": {},
	// schedpolicyctl talks to the daemon over D-Bus; of the daemon it may
	// use only exported types and constants (checkClientUsesAPIOnly).
	"cmd/schedpolicyctl": {"internal/names", "internal/bussender", "daemon", "daemon/bus", "daemon/snapshot", "acpi", "sysfs", "policy", "systemd"},
}

// never lists what a package must not depend on, whatever layers allows
// it, and whatever is added under these paths: the D-Bus service stays
// out of the daemon and of the placement (daemon/placement and its back
// ends, with the task clock and systemd's manager serving them), the
// snapshot, the state file and the energy meter out of all three, and
// the placement out of the daemon, the bus and the tree server, each
// back end out of the other; the three pseudo-filesystem packages stay
// out of the daemon (and so of the placement), the tree server and
// cgroupfs out of each other, sysfs out of both.
var never = map[string][]string{
	"sysfs":                     {"cgroup", "tree", "daemon/..."},
	"cgroup":                    {"tree", "daemon/..."},
	"tree":                      {"cgroup", "daemon/..."},
	"daemon/placement":          {"daemon", "daemon/bus", "daemon/energy", "daemon/placement/cgroupfs", "daemon/placement/units", "systemd", "tree"},
	"daemon/placement/cgroupfs": {"daemon", "daemon/bus", "daemon/energy", "daemon/placement/units", "systemd", "tree"},
	"daemon/placement/units":    {"daemon", "daemon/bus", "daemon/energy", "daemon/placement/cgroupfs", "tree"},
	"daemon/bus":                {"daemon", "daemon/placement/...", "internal/taskclock", "systemd"},
	"daemon/snapshot":           {"daemon", "daemon/bus", "daemon/placement/..."},
	// The state file is a leaf under the daemon: it reads and writes
	// state.json for whoever needs it (the daemon, probe, the benchmark)
	// and knows nothing of the loop, the placement or the bus.
	"daemon/statefile": {"daemon", "daemon/bus", "daemon/placement/..."},
	// The energy meter is a leaf under the daemon too: the loop drives it
	// (Start, Advance, CloseSegment) and probe asks it, and it knows
	// nothing of either, nor of the bus or the placement.
	"daemon/energy": {"daemon", "daemon/bus", "daemon/placement/..."},
	// The actuator is a leaf under the daemon: the loop tells it the
	// policy and who owns the knobs; it knows nothing of the bus.
	"daemon/energypref": {"daemon", "daemon/bus", "daemon/placement/..."},
}

// neverMatches reports whether package dep is rule: that path, or any
// package below it for a rule ending in "/...".
func neverMatches(rule, dep string) bool {
	if base, ok := strings.CutSuffix(rule, "/..."); ok {
		return dep == base || strings.HasPrefix(dep, base+"/")
	}
	return dep == rule
}

// external lists the only non-standard-library modules a package may
// depend on (nil: no rule).
var external = map[string][]string{
	"policy": {}, // pure decisions: the standard library only
	"sysfs":  {"golang.org/x/sys"},
	// The cgroup watch (fsnotify), the close-write watch (inotify through
	// x/sys, which fsnotify does not offer).
	"cgroup": {"github.com/fsnotify/fsnotify", "golang.org/x/sys"},
	// FUSE (go-fuse), the plain backend's watch (fsnotify), the mount and
	// the trusted-path walk (x/sys).
	"tree":                 {"github.com/fsnotify/fsnotify", "github.com/hanwen/go-fuse/v2", "golang.org/x/sys"},
	"internal/trustedpath": {"golang.org/x/sys"},
	"internal/bussender":   {"github.com/godbus/dbus/v5"},
	// perf_event_open through x/sys/unix only.
	"internal/taskclock": {"golang.org/x/sys"},
}

func goList(t *testing.T) []listed {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH, so the import graph cannot be listed")
	}
	root, err := exec.Command(goBin, "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-json", "./...")
	cmd.Dir = strings.TrimSpace(string(root))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -json ./...: %v\n%s", err, stderr.String())
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list -json ./... listed no packages")
	}
	return pkgs
}

// ours returns the packages of this module in paths, relative to it.
func ours(paths []string) []string {
	var out []string
	for _, p := range paths {
		if rel, ok := strings.CutPrefix(p, module+"/"); ok {
			out = append(out, rel)
		}
	}
	return out
}

func TestLayering(t *testing.T) {
	pkgs := goList(t)
	seen := map[string]bool{}
	for _, p := range pkgs {
		rel, ok := strings.CutPrefix(p.ImportPath, module+"/")
		if !ok {
			continue
		}
		seen[rel] = true
		if strings.HasPrefix(rel, "cmd/") {
			// A command is a main package: nothing can import it. Only the
			// client has a rule of its own.
			if rel != "cmd/schedpolicyctl" {
				continue
			}
		}
		var bad []string
		for _, dep := range ours(append(append(slices.Clone(p.Imports), p.Deps...), append(slices.Clone(p.TestImports), p.XTestImports...)...)) {
			for _, rule := range never[rel] {
				if neverMatches(rule, dep) && !slices.Contains(bad, dep) {
					bad = append(bad, dep)
				}
			}
		}
		if len(bad) > 0 {
			t.Errorf("%s or its tests depend on %v, which it must never depend on (%v)", rel, bad, never[rel])
		}
		allowed, ruled := layers[rel]
		if !ruled {
			continue
		}
		bad = nil
		for _, dep := range ours(append(slices.Clone(p.Imports), p.Deps...)) {
			if !slices.Contains(allowed, dep) && !slices.Contains(bad, dep) {
				bad = append(bad, dep)
			}
		}
		if len(bad) > 0 {
			t.Errorf("%s depends on %v; it may depend only on %v (docs/ARCHITECTURE.md)", rel, bad, allowed)
		}
		bad = nil
		for _, imp := range ours(append(slices.Clone(p.TestImports), p.XTestImports...)) {
			if imp != "internal/testutil" && imp != rel && !slices.Contains(allowed, imp) {
				bad = append(bad, imp)
			}
		}
		if len(bad) > 0 {
			t.Errorf("tests of %s import %v; they may import only %v and internal/testutil", rel, bad, allowed)
		}
		if mods, ok := external[rel]; ok {
			bad = nil
			for _, dep := range p.Deps {
				first, _, _ := strings.Cut(dep, "/")
				if !strings.Contains(first, ".") || strings.HasPrefix(dep, module+"/") {
					continue // the standard library, or ours (checked above)
				}
				if !slices.ContainsFunc(mods, func(m string) bool { return dep == m || strings.HasPrefix(dep, m+"/") }) {
					bad = append(bad, dep)
				}
			}
			if len(bad) > 0 {
				t.Errorf("%s depends on %v; outside the standard library it may use only %v", rel, bad, mods)
			}
		}
		if rel == "cmd/schedpolicyctl" {
			for _, api := range apiPackages {
				if slices.Contains(p.Imports, module+"/"+api) {
					checkClientUsesAPIOnly(t, p, pkgs, api)
				}
			}
		}
	}
	for rel := range layers {
		if !seen[rel] {
			t.Errorf("go list did not list %s, which the layer rules name", rel)
		}
	}
	for rel, rules := range never {
		for _, rule := range rules {
			for _, a := range layers[rel] {
				if neverMatches(rule, a) {
					t.Errorf("layers allows %s to depend on %s, which never forbids", rel, a)
				}
			}
		}
	}
}

// apiPackages are the packages whose exported types and constants are the
// daemon's API, which schedpolicyctl may share (and nothing else of them).
var apiPackages = []string{"daemon", "daemon/bus", "daemon/snapshot"}

// checkClientUsesAPIOnly fails for every X of package apiPath (one of
// apiPackages, e.g. daemon.X, bus.X) in schedpolicyctl's non-test files
// that is not an exported type or constant of that package: the client
// may share the API's names and shapes, not call into the daemon.
func checkClientUsesAPIOnly(t *testing.T, client listed, pkgs []listed, apiPath string) {
	t.Helper()
	var daemonPkg listed
	for _, p := range pkgs {
		if p.ImportPath == module+"/"+apiPath {
			daemonPkg = p
		}
	}
	api := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range daemonPkg.GoFiles {
		af, err := parser.ParseFile(fset, filepath.Join(daemonPkg.Dir, f), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || (g.Tok != token.TYPE && g.Tok != token.CONST) {
				continue
			}
			for _, s := range g.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					api[s.Name.Name] = s.Name.IsExported()
				case *ast.ValueSpec:
					for _, n := range s.Names {
						api[n.Name] = n.IsExported()
					}
				}
			}
		}
	}
	for _, f := range client.GoFiles {
		path := filepath.Join(client.Dir, f)
		af, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		name := ""
		for _, im := range af.Imports {
			if im.Path.Value == `"`+module+"/"+apiPath+`"` {
				name = filepath.Base(apiPath)
				if im.Name != nil {
					name = im.Name.Name
				}
			}
		}
		if name == "" {
			continue
		}
		ast.Inspect(af, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == name && !api[sel.Sel.Name] {
				t.Errorf("%s: schedpolicyctl uses %s.%s, which is not an exported type or constant of the daemon's API", fset.Position(sel.Pos()), name, sel.Sel.Name)
			}
			return true
		})
	}
}
