package daemon

import (
	"context"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/tree"
)

// TreePrefix is the kernel-shaped directory of the knob files below the
// tree directory (the 2013 patch set's /sys/devices/system/cpu/sched_policy).
const TreePrefix = "devices/system/cpu/sched_policy"

// The six files of the tree (docs/USAGE.md, "The tree"), and workloads.
const (
	fileAvailable        = "available_sched_policy"
	fileCurrent          = "current_sched_policy"
	filePowerAware       = "power_aware"
	filePowerAwarePolicy = "power_aware_policy"
	filePowerSource      = "power_source"
	fileBoost            = "boost"
	// fileWorkloads lists the managed workloads and their CPUs, one
	// "NAME CPULIST" line each (workloadLines), for reading without D-Bus.
	fileWorkloads = "workloads"
)

var treeFiles = []tree.TreeFile{
	{Path: TreePrefix + "/" + fileAvailable, Mode: 0o444},
	{Path: TreePrefix + "/" + fileCurrent, Mode: 0o644},
	{Path: TreePrefix + "/" + filePowerAware, Mode: 0o644},
	{Path: TreePrefix + "/" + filePowerAwarePolicy, Mode: 0o644},
	{Path: TreePrefix + "/" + filePowerSource, Mode: 0o444},
	{Path: TreePrefix + "/" + fileBoost, Mode: 0o444},
	{Path: TreePrefix + "/" + fileWorkloads, Mode: 0o444},
}

// treeHandler serves the tree from the published snapshot and forwards
// writes to the event loop.
type treeHandler struct {
	d   *Daemon
	ctx context.Context
}

// Read generates a file's content at read time, newline-terminated, like a
// kernel show().
func (h treeHandler) Read(p string) []byte {
	s := h.d.Snapshot()
	var v string
	switch path.Base(p) {
	case fileAvailable:
		parts := make([]string, len(policy.AvailablePolicies))
		for i, x := range policy.AvailablePolicies {
			parts[i] = string(x)
		}
		v = strings.Join(parts, " ")
	case fileCurrent:
		v = string(s.Policy)
	case filePowerAware:
		v = fmt.Sprint(int(s.Knob.PowerAware))
	case filePowerAwarePolicy:
		v = string(s.Knob.PowerAwarePolicy)
	case filePowerSource:
		v = string(s.PowerSource)
	case fileBoost:
		v = s.Boost
	case fileWorkloads:
		return workloadLines(s.Workloads)
	}
	return []byte(v + "\n")
}

// workloadLines is the content of the workloads file: one line per
// managed workload, sorted by name, "NAME CPULIST\n" — the cgroup
// directory's name and the cpulist (kernel format, e.g. "0-3,8") its
// cpuset.cpus holds as last written or read, the CPUs it got. Like the
// paths in /proc/self/mountinfo, a name's space, tab, newline, backslash
// and other control bytes are written as octal escapes (\040, \011, \012,
// \134), so a line always splits into two fields. No workloads: empty.
func workloadLines(ws []WorkloadStatus) []byte {
	var b strings.Builder
	for _, w := range ws {
		for i := 0; i < len(w.Name); i++ {
			if c := w.Name[i]; c <= ' ' || c == '\\' || c == 0x7f {
				fmt.Fprintf(&b, "\\%03o", c)
			} else {
				b.WriteByte(c)
			}
		}
		b.WriteByte(' ')
		b.WriteString(w.CPUs)
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

// Write parses one write(2) like the patch's store(): sscanf("%15s"),
// case-sensitive names. Bad values fail with EINVAL and change nothing;
// read-only files fail with EACCES.
func (h treeHandler) Write(p string, data []byte) error {
	return h.d.writeFile(h.ctx, path.Base(p), data, "tree")
}

// writeFile is the one implementation of a knob-file write, shared by the
// tree and D-Bus: knobWrite's change, made on the loop as the user's
// explicit choice (setKnob). Errors: knobWrite's, or EIO when the choice
// cannot be saved.
func (d *Daemon) writeFile(ctx context.Context, file string, data []byte, via string) error {
	apply, err := knobWrite(file, data)
	if err != nil {
		return err
	}
	return d.do(ctx, func() error { return d.applyKnobWrite(file, apply, via) })
}

// applyKnobWrite sets the knob apply makes of the current one, as via; on
// the loop. Errors: the choice could not be saved (EIO).
func (d *Daemon) applyKnobWrite(file string, apply func(policy.Knob) policy.Knob, via string) error {
	if err := d.setKnob(apply(d.dec.knob), via); err != nil {
		return fmt.Errorf("%s: %w: %w", file, syscall.EIO, err)
	}
	return nil
}

// knobWrite parses one write(2) of data to the tree file named file and
// returns the change it makes to a knob. Errors: EINVAL for a bad value,
// EACCES for a read-only (or unknown) file, each naming the file.
func knobWrite(file string, data []byte) (func(policy.Knob) policy.Knob, error) {
	tok, err := policy.ScanToken(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", file, syscall.EINVAL, err)
	}
	switch file {
	case fileCurrent:
		p, err := policy.ParsePolicy(tok)
		if err != nil {
			return nil, fmt.Errorf("%s: %w: %w", file, syscall.EINVAL, err)
		}
		return func(k policy.Knob) policy.Knob { return k.WithCurrentPolicy(p) }, nil
	case filePowerAware:
		v, err := policy.ParsePowerAware(tok)
		if err != nil {
			return nil, fmt.Errorf("%s: %w: %w", file, syscall.EINVAL, err)
		}
		return func(k policy.Knob) policy.Knob { k.PowerAware = v; return k }, nil
	case filePowerAwarePolicy:
		v, err := policy.ParsePowerAwarePolicy(tok)
		if err != nil {
			return nil, fmt.Errorf("%s: %w: %w", file, syscall.EINVAL, err)
		}
		return func(k policy.Knob) policy.Knob { k.PowerAwarePolicy = v; return k }, nil
	}
	return nil, fmt.Errorf("%s is read-only: %w", file, syscall.EACCES)
}

// treeOptions are the options the tree is served with, on the given
// backend.
func (d *Daemon) treeOptions(ctx context.Context, backend tree.Backend) tree.TreeOptions {
	return tree.TreeOptions{
		Dir: d.cfg.TreeDir, Files: treeFiles, Handler: treeHandler{d: d, ctx: ctx}, Backend: backend,
		NoPollHack: d.cfg.TreeNoPollHack,
		OnPlainRejected: func(path string, data []byte, err error) {
			d.log.WithFields(logrus.Fields{"file": filepath.Base(path), "value": fmt.Sprintf("%.40q", data)}).WithError(err).Warn("rejected write reverted")
		},
		OnStaleMount: func(what string) {
			d.log.WithFields(logrus.Fields{"dir": d.cfg.TreeDir, "found": what}).Warn("an earlier run did not unmount its tree; detached it")
		},
	}
}

// treeGone is the channel closed when t is lost from outside (a FUSE tree
// unmounted, also with umount -l while processes still hold files or a cwd
// in it), or nil (never ready) for trees that cannot be.
func treeGone(t tree.Tree) <-chan struct{} {
	if g, ok := t.(tree.GoneNotifier); ok {
		return g.Gone()
	}
	return nil
}

// remountTree serves the tree again after it was unmounted from outside:
// on the configured backend if possible, else on plain files, saying which.
// The lost tree is handed over as the new one's Previous: after umount -l it
// goes on serving the processes that still hold its files or have their cwd
// in it until they let go, while the new tree serves everybody else at once;
// the new tree's Close also ends it. It returns the new tree's loss channel
// (nil if the tree could not be served again; the daemon then runs without
// it and says so, and the lost tree is closed).
func (d *Daemon) remountTree(ctx context.Context) <-chan struct{} {
	old := d.tree
	d.tree = nil
	log := d.log.WithField("dir", d.cfg.TreeDir)
	serve := func(backend tree.Backend) (tree.Tree, error) {
		opts := d.treeOptions(ctx, backend)
		opts.Previous = old
		return tree.ServeTree(opts)
	}
	t, err := serve(d.cfg.TreeBackend)
	if err != nil && d.cfg.TreeBackend == tree.BackendFUSE {
		log.WithError(err).Warn("cannot mount the tree with FUSE again; trying plain files")
		t, err = serve(tree.BackendPlain)
	}
	if err != nil {
		d.stats.Errors.Add(1)
		if old != nil {
			if cerr := old.Close(); cerr != nil {
				log.WithError(cerr).Debug("closing the lost tree")
			}
		}
		log.WithError(err).Error("the tree was unmounted from outside and cannot be served again; running without it (D-Bus still works)")
		return nil
	}
	d.tree = t
	d.stats.Remounts.Add(1)
	if old != nil && t.Backend() != old.Backend() {
		log.WithFields(logrus.Fields{"from": old.Backend(), "backend": t.Backend()}).Warn("the tree was unmounted from outside; serving it as plain files instead")
	} else {
		log.WithField("backend", t.Backend()).Warn("the tree was unmounted from outside; mounted it again")
	}
	if err := t.Changed(); err != nil {
		log.WithError(err).Warn("refreshing tree")
	}
	return treeGone(t)
}
