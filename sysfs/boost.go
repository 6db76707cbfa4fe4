package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// Boost states as served in the tree's boost file and on D-Bus.
const (
	BoostOn          = "1"           // boost (turbo) permitted on at least one CPU
	BoostOff         = "0"           // boost forbidden on every CPU
	BoostUnsupported = "unsupported" // no boost control on this machine
)

// The boost files, relative to the root (the kernel's
// Documentation/admin-guide/pm/cpufreq.rst and intel_pstate.rst).
const (
	// boostGlobal is the cpufreq core's switch (acpi-cpufreq, amd-pstate,
	// cppc, some ARM drivers): 1 = boost permitted.
	boostGlobal = "devices/system/cpu/cpufreq/boost"
	// boostNoTurbo is intel_pstate's switch, inverted: 1 = turbo forbidden.
	boostNoTurbo = "devices/system/cpu/intel_pstate/no_turbo"
	// boostPolicyGlob matches the per-policy switches (2023+, amd-pstate's
	// per-CPU boost): 1 = boost permitted for that policy's CPUs.
	boostPolicyGlob = "devices/system/cpu/cpufreq/policy*/boost"
)

// ErrNoBoost is returned by SetBoost and RestoreBoost when the machine has
// no boost file at all (VMs, containers, drivers without boost). Callers
// that manage boost treat it as "nothing to do".
var ErrNoBoost = errors.New("no cpufreq boost control on this machine")

// BoostFiles returns the paths that hold boost state, in the order Boost
// consults them: cpufreq/boost (1 = on), intel_pstate/no_turbo (inverted:
// 1 = off), then every existing cpufreq/policy*/boost (1 = on) in name
// order. The first two are always listed, whether they exist or not (a
// watcher may wait for them); per-policy files only when they exist.
func (fsys FS) BoostFiles() []string {
	files := []string{fsys.Path(boostGlobal), fsys.Path(boostNoTurbo)}
	return append(files, fsys.policyBoostFiles()...)
}

func (fsys FS) policyBoostFiles() []string {
	m, _ := filepath.Glob(filepath.Join(escapeGlob(fsys.root), boostPolicyGlob))
	sort.Strings(m)
	return m
}

// Boost reports the machine's boost state:
//
//   - BoostOff when a global switch forbids boost (cpufreq/boost = 0, or
//     intel_pstate/no_turbo ≠ 0): the kernel then refuses per-policy boost;
//   - otherwise, when per-policy files exist: BoostOn if at least one of
//     them is 1 (mixed counts as on: some CPUs may boost), BoostOff if all
//     are 0;
//   - otherwise BoostOn when a global switch permits boost;
//   - BoostUnsupported when no boost file exists.
//
// An existing file that cannot be read or parsed (for example EAGAIN from
// intel_pstate while its driver is off) is an error, returned with
// BoostUnsupported.
func (fsys FS) Boost() (string, error) {
	found, global, anyPolicy, policyOn := false, true, false, false
	for _, f := range fsys.boostFileList() {
		v, err := ReadIntAttr(f.path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return BoostUnsupported, fmt.Errorf("boost: %w", err)
		}
		found = true
		on := (v != 0) != f.inverted
		switch {
		case f.policy:
			anyPolicy = true
			policyOn = policyOn || on
		case !on:
			global = false
		}
	}
	switch {
	case !found:
		return BoostUnsupported, nil
	case !global:
		return BoostOff, nil
	case anyPolicy && !policyOn:
		return BoostOff, nil
	default:
		return BoostOn, nil
	}
}

type boostFile struct {
	path     string
	inverted bool // no_turbo: 1 = off
	policy   bool // per-policy file
}

func (fsys FS) boostFileList() []boostFile {
	out := []boostFile{{path: fsys.Path(boostGlobal)}, {path: fsys.Path(boostNoTurbo), inverted: true}}
	for _, p := range fsys.policyBoostFiles() {
		out = append(out, boostFile{path: p, policy: true})
	}
	return out
}

// BoostSetting is the raw value of one boost file, for saving the start-up
// state and restoring it later (RestoreBoost).
type BoostSetting struct {
	// File is the path relative to the root, e.g.
	// "devices/system/cpu/cpufreq/boost" or
	// "devices/system/cpu/cpufreq/policy0/boost".
	File string `json:"file"`
	// Value is the file's content without the newline: "0" or "1" (for
	// no_turbo, 1 means turbo forbidden).
	Value string `json:"value"`
}

// BoostSnapshot reads every existing boost file, in BoostFiles order. It
// returns no settings and no error on a machine without boost; an
// existing file that cannot be read is an error.
func (fsys FS) BoostSnapshot() ([]BoostSetting, error) {
	var out []BoostSetting
	for _, f := range fsys.boostFileList() {
		v, err := ReadAttr(f.path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("boost snapshot: %w", err)
		}
		out = append(out, BoostSetting{File: fsys.rel(f.path), Value: v})
	}
	return out, nil
}

// SetBoost permits (on) or forbids boost on every CPU by writing every
// existing boost file: "1"/"0" to cpufreq/boost and policy*/boost, the
// inverse to intel_pstate/no_turbo. Files that already hold the wanted
// value are not written (no needless inotify events, and no EINVAL from a
// per-policy file whose driver boost is off). The order follows the
// kernel's rule that per-policy boost can change only while the driver's
// boost is enabled: when enabling, global switches first, then per-policy
// files; when disabling, per-policy files first, then the global switches.
//
// Errors: ErrNoBoost when no boost file exists. Otherwise every file is
// tried and the failures are joined; each one names the value and the
// path and wraps the errno. EAGAIN (intel_pstate driver off), EPERM (turbo
// disabled by the BIOS) and EINVAL (per-policy boost without driver
// support) mean boost is not controllable here and retrying will not help;
// see BoostNotControllable.
func (fsys FS) SetBoost(on bool) error {
	var want []BoostSetting
	for _, f := range fsys.boostFileList() {
		if _, err := ReadAttr(f.path); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		v := "0"
		if on != f.inverted {
			v = "1"
		}
		want = append(want, BoostSetting{File: fsys.rel(f.path), Value: v})
	}
	if len(want) == 0 {
		return ErrNoBoost
	}
	return fsys.RestoreBoost(want)
}

// RestoreBoost writes a snapshot taken by BoostSnapshot back (for example
// the start-up values, on exit or after a crash). Only files that are
// boost files of this root are written; any other File is refused with an
// error and nothing is written. Files that no longer exist are skipped,
// files already holding the value are not written, and the order is the
// one SetBoost uses (switches that enable boost first, per-policy files,
// switches that disable boost last). Errors are as for SetBoost; an empty
// snapshot is ErrNoBoost.
func (fsys FS) RestoreBoost(settings []BoostSetting) error {
	if len(settings) == 0 {
		return ErrNoBoost
	}
	kind := map[string]boostFile{}
	for _, f := range fsys.boostFileList() {
		kind[fsys.rel(f.path)] = f
	}
	type write struct {
		f     boostFile
		value string
		order int
	}
	var writes []write
	for _, s := range settings {
		f, ok := kind[filepath.Clean(s.File)]
		if !ok {
			if ok, _ := filepath.Match(boostPolicyGlob, filepath.Clean(s.File)); ok {
				continue // a policy that went away (its CPUs were removed)
			}
			return fmt.Errorf("restore boost: %q is not a boost file below %s", s.File, fsys.root)
		}
		if s.Value != "0" && s.Value != "1" {
			return fmt.Errorf("restore boost: value %q for %s is not 0 or 1", s.Value, s.File)
		}
		order := 1 // per-policy
		if !f.policy {
			if (s.Value == "1") != f.inverted { // this write enables boost
				order = 0
			} else {
				order = 2
			}
		}
		writes = append(writes, write{f, s.Value, order})
	}
	sort.SliceStable(writes, func(i, j int) bool { return writes[i].order < writes[j].order })
	var errs []error
	for _, w := range writes {
		cur, err := ReadAttr(w.f.path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil && cur == w.value {
			continue
		}
		if err := WriteAttr(w.f.path, w.value); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// BoostNotControllable reports whether err (from SetBoost or RestoreBoost)
// says boost cannot be controlled on this machine: ErrNoBoost, EAGAIN,
// EPERM, EACCES, EROFS or EINVAL. Such errors are not worth retrying.
func BoostNotControllable(err error) bool {
	for _, e := range []error{ErrNoBoost, syscall.EAGAIN, syscall.EPERM, syscall.EACCES, syscall.EROFS, syscall.EINVAL} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// rel returns p relative to the root ("devices/system/cpu/...").
func (fsys FS) rel(p string) string {
	r, err := filepath.Rel(fsys.root, p)
	if err != nil {
		return p
	}
	return r
}

// escapeGlob escapes the glob metacharacters of a literal path.
func escapeGlob(p string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`)
	return r.Replace(p)
}
