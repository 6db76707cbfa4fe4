package main

// The screen of `schedpolicyctl top`, as pure functions of what the daemon
// published: the properties decode into a topState, and renderTop lays
// it out for a width and height. The terminal program (top.go) and the
// plain-text snapshot both print what renderTop returns, and the unit
// tests check it line by line.

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"
	"github.com/godbus/dbus/v5"
)

// topCPU is one entry of the Topology property, a(uuuu): a CPU and the
// groups it is in, each named by its lowest CPU.
type topCPU struct {
	CPU, Package, LLC, Core int
}

// topClass is one entry of the CPUClasses property, a(ssu): an
// efficiency class (LPE, E, P; little, mid, big; all), its CPUs and its
// capacity, most efficient first.
type topClass struct {
	Name     string
	CPUs     []int
	Capacity int
}

// energyEntry is one entry of the Energy property, a(ssdd): the energy
// measured while a policy was in force on a power source.
type energyEntry struct {
	Policy, Source  string
	Joules, Seconds float64
}

// topState is everything top shows. The properties are kept as received
// (GetAll, then each PropertiesChanged merged in) and decoded again after
// every change; what an older daemon lacks stays absent.
type topState struct {
	bus     string
	running bool // the daemon owns its name
	props   map[string]dbus.Variant
	updated time.Time // when the last change arrived

	st   status
	topo []topCPU // nil: no Topology property
	// classes are the efficiency classes (nil: no CPUClasses property,
	// an older daemon); classOf names each CPU's class when there is
	// more than one, else it is nil and nothing is marked.
	classes      []topClass
	classOf      map[int]string
	energySource string // "": no EnergySource property
	energy       []energyEntry
	hasEnergy    bool
	err          string // a property of an unexpected type
}

// setAll replaces every property (GetAll's answer).
func (s *topState) setAll(props map[string]dbus.Variant, now time.Time) {
	s.props = map[string]dbus.Variant{}
	s.merge(props, nil, now)
}

// merge applies one PropertiesChanged: changed values replace the old,
// invalidated names are dropped (the caller reads them again).
func (s *topState) merge(changed map[string]dbus.Variant, invalidated []string, now time.Time) {
	if s.props == nil {
		s.props = map[string]dbus.Variant{}
	}
	for k, v := range changed {
		s.props[k] = v
	}
	for _, k := range invalidated {
		delete(s.props, k)
	}
	s.running = true
	s.updated = now
	s.decode()
}

// decode derives the fields from props.
func (s *topState) decode() {
	s.err = ""
	st, err := statusFrom(s.props)
	if err != nil {
		s.err = err.Error()
	}
	s.st = st
	s.topo, s.energySource, s.energy, s.hasEnergy = nil, "", nil, false
	s.classes, s.classOf = nil, nil
	if v, ok := s.props["CPUClasses"]; ok {
		if s.classes, err = classesFrom(v); err != nil {
			s.err = fmt.Sprintf("property CPUClasses has type %s: %v", v.Signature(), err)
		}
		if len(s.classes) > 1 {
			s.classOf = map[int]string{}
			for _, c := range s.classes {
				for _, id := range c.CPUs {
					s.classOf[id] = c.Name
				}
			}
		}
	}
	if v, ok := s.props["Topology"]; ok {
		if s.topo, err = topologyFrom(v); err != nil {
			s.err = fmt.Sprintf("property Topology has type %s: %v", v.Signature(), err)
		}
	}
	if v, ok := s.props["EnergySource"]; ok {
		if err := v.Store(&s.energySource); err != nil {
			s.err = fmt.Sprintf("property EnergySource has type %s: %v", v.Signature(), err)
		}
	}
	if v, ok := s.props["Energy"]; ok {
		s.hasEnergy = true
		if s.energy, err = energyFrom(v); err != nil {
			s.err = fmt.Sprintf("property Energy has type %s: %v", v.Signature(), err)
		}
	}
}

func topologyFrom(v dbus.Variant) ([]topCPU, error) {
	var raw [][]any
	if err := storeList(v, &raw); err != nil {
		return nil, err
	}
	out := []topCPU{}
	for _, r := range raw {
		var c [4]uint32
		if err := dbus.Store(r, &c[0], &c[1], &c[2], &c[3]); err != nil {
			return nil, err
		}
		out = append(out, topCPU{int(c[0]), int(c[1]), int(c[2]), int(c[3])})
	}
	return out, nil
}

func classesFrom(v dbus.Variant) ([]topClass, error) {
	var raw [][]any
	if err := storeList(v, &raw); err != nil {
		return nil, err
	}
	out := []topClass{}
	for _, r := range raw {
		var c topClass
		var cpus string
		var capacity uint32
		if err := dbus.Store(r, &c.Name, &cpus, &capacity); err != nil {
			return nil, err
		}
		c.CPUs, c.Capacity = cpuList(cpus), int(capacity)
		out = append(out, c)
	}
	return out, nil
}

func energyFrom(v dbus.Variant) ([]energyEntry, error) {
	var raw [][]any
	if err := storeList(v, &raw); err != nil {
		return nil, err
	}
	out := []energyEntry{}
	for _, r := range raw {
		var e energyEntry
		if err := dbus.Store(r, &e.Policy, &e.Source, &e.Joules, &e.Seconds); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// wattsText is the measured power of the current policy on the current
// power source: the Energy totals of that pair as joules / seconds, or
// "–" with why when there is none.
func (s *topState) wattsText() string {
	const none = "–"
	switch {
	case s.energySource == "" && !s.hasEnergy:
		return none + " (this schedpolicyd does not measure energy)"
	case s.energySource == "none":
		return none + " (no energy counter on this machine)"
	}
	for _, e := range s.energy {
		if e.Policy == s.st.ActivePolicy && e.Source == s.st.PowerSource && e.Seconds > 0 {
			return fmt.Sprintf("%.1f W avg, %s on %s (%s: %.0f J in %.0f s)",
				e.Joules/e.Seconds, e.Policy, e.Source, s.energySource, e.Joules, e.Seconds)
		}
	}
	return fmt.Sprintf("%s (nothing measured yet for %s on %s)", none, s.st.ActivePolicy, s.st.PowerSource)
}

// workloadTag is the letter that marks workload i (in name order) on the
// CPUs it holds: a-z, then A-Z, then "+" for the rest.
func workloadTag(i int) byte {
	switch {
	case i < 26:
		return byte('a' + i)
	case i < 52:
		return byte('A' + i - 26)
	}
	return '+'
}

// cpuView is one CPU as top draws it.
type cpuView struct {
	id   int
	util float64 // estimated busy fraction, 0..1
	tags string  // letters of the workloads that hold it
}

// coreView, llcView and pkgView group the CPUs as the Topology says.
// coreView is one core, named (id) by its lowest CPU as the Topology
// property names it, as plan, probe and the SVG do.
type coreView struct {
	id      int
	threads []cpuView
}

type llcView struct {
	id    int
	cpus  []int
	cores []coreView
}

type pkgView struct {
	id   int
	cpus []int
	llcs []llcView
}

// machineView groups the CPUs of the Topology property into packages, LLCs
// and cores, each in ascending order of its lowest CPU, and estimates each
// CPU's utilisation. The daemon measures utilisation per workload, not per
// CPU, so a CPU's figure is the sum over the workloads that hold it of the
// workload's utilisation divided by its number of CPUs (the CFS spread),
// at most 1. Without a Topology property (an older daemon) every CPU some
// workload names is its own core in one package.
func machineView(s *topState) []pkgView {
	topo := s.topo
	if topo == nil {
		seen := map[int]bool{}
		for _, w := range s.st.Workloads {
			for _, c := range cpuList(w.CPUs) {
				if !seen[c] {
					seen[c] = true
					topo = append(topo, topCPU{CPU: c, Core: c})
				}
			}
		}
	}
	util := map[int]float64{}
	tags := map[int][]byte{}
	for i, w := range s.st.Workloads {
		cpus := cpuList(w.CPUs)
		for _, c := range cpus {
			util[c] += w.Util / float64(len(cpus))
			tags[c] = append(tags[c], workloadTag(i))
		}
	}
	type key struct{ pkg, llc, core int }
	byCore := map[key][]cpuView{}
	for _, c := range topo {
		k := key{c.Package, c.LLC, c.Core}
		byCore[k] = append(byCore[k], cpuView{id: c.CPU, util: math.Min(util[c.CPU], 1), tags: string(tags[c.CPU])})
	}
	keys := make([]key, 0, len(byCore))
	for k := range byCore {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.pkg != b.pkg {
			return a.pkg < b.pkg
		}
		if a.llc != b.llc {
			return a.llc < b.llc
		}
		return a.core < b.core
	})
	var pkgs []pkgView
	for _, k := range keys {
		threads := byCore[k]
		sort.Slice(threads, func(i, j int) bool { return threads[i].id < threads[j].id })
		if len(pkgs) == 0 || pkgs[len(pkgs)-1].id != k.pkg {
			pkgs = append(pkgs, pkgView{id: k.pkg})
		}
		p := &pkgs[len(pkgs)-1]
		if len(p.llcs) == 0 || p.llcs[len(p.llcs)-1].id != k.llc {
			p.llcs = append(p.llcs, llcView{id: k.llc})
		}
		l := &p.llcs[len(p.llcs)-1]
		l.cores = append(l.cores, coreView{id: k.core, threads: threads})
		for _, t := range threads {
			l.cpus = append(l.cpus, t.id)
			p.cpus = append(p.cpus, t.id)
		}
	}
	for i := range pkgs {
		slices.Sort(pkgs[i].cpus)
		for j := range pkgs[i].llcs {
			slices.Sort(pkgs[i].llcs[j].cpus)
		}
	}
	return pkgs
}

// cpuList parses a kernel cpulist ("0-3,8"); what does not parse is left
// out (the daemon writes only valid lists).
func cpuList(s string) []int {
	var out []int
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			continue
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b-a > 1<<16 {
				continue
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// formatCPUList renders ascending CPUs as a kernel cpulist.
func formatCPUList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}

// topBarWidth is the number of cells in a CPU's utilisation bar.
const topBarWidth = 10

// bar draws a busy fraction as [####......].
func bar(f float64) string {
	n := int(math.Round(f * topBarWidth))
	n = max(0, min(n, topBarWidth))
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", topBarWidth-n) + "]"
}

// fit cuts s to width display cells, marking a cut with "…".
func fit(s string, width int) string {
	if width <= 0 {
		return ""
	}
	if ansi.StringWidth(s) <= width {
		return s
	}
	return ansi.Truncate(s, width, "…")
}

// topHeader is the lines above the machine: policy, power source, boost,
// why (in at most whyLines lines, 0: all), the knob and holds, and the
// measured watts.
func topHeader(s *topState, width, whyLines int) []string {
	if !s.running {
		return []string{
			fit("schedpolicyd top  schedpolicyd is not running on "+busLabel(s.bus), width),
			fit("waiting for it to join the bus", width),
		}
	}
	st := s.st
	lines := []string{fit(fmt.Sprintf("schedpolicyd top  policy: %s  power: %s  boost: %s", st.ActivePolicy, st.PowerSource, st.Boost), width)}
	// The reason, wrapped and indented under its first word; on a
	// screen two lines at most (the whole reason is in `status`).
	wrapped := strings.Split(ansi.Wrap("why: "+printable(st.Reason), width-5, " "), "\n")
	for i, l := range wrapped {
		switch {
		case i == 0:
			lines = append(lines, fit(l, width))
		case whyLines > 0 && i == whyLines-1:
			lines = append(lines, fit("     "+strings.Join(wrapped[i:], " "), width))
		case whyLines > 0 && i >= whyLines:
		default:
			lines = append(lines, fit("     "+l, width))
		}
	}
	holds := "none"
	if n := len(st.Holds); n > 0 {
		holds = fmt.Sprintf("%d", n)
	}
	lines = append(lines,
		fit(fmt.Sprintf("power_aware=%d (%s)  power_aware_policy=%s  holds: %s", st.PowerAware, knobMeaning(st.PowerAware), st.PowerAwarePolicy, holds), width),
		fit("watts: "+s.wattsText(), width))
	if s.err != "" {
		lines = append(lines, fit("error: "+s.err, width))
	}
	return lines
}

// topMachine is the packages, LLCs and cores, one line per core (more
// when its threads do not fit), each thread with its utilisation bar and
// the letters of the workloads that hold it; then the workloads.
func topMachine(s *topState, width int) []string {
	if !s.running {
		return nil
	}
	pkgs := machineView(s)
	maxCPU := 0
	for _, p := range pkgs {
		maxCPU = max(maxCPU, slices.Max(append(p.cpus, 0)))
	}
	var lines []string
	if s.topo == nil {
		lines = append(lines, fit("CPUs the workloads hold (this schedpolicyd publishes no Topology)", width))
	}
	tagW := min(4, max(1, len(s.st.Workloads)))
	cpuW := len("cpu") + len(strconv.Itoa(maxCPU))
	// Packages and LLCs are numbered in order, cores named by their
	// lowest CPU, as plan --svg draws them.
	coreW := len(" core ") + len(strconv.Itoa(maxCPU))
	classW := 0 // on a hybrid machine each core's label ends in its class
	for _, c := range s.classes {
		if s.classOf != nil {
			classW = max(classW, 1+len(c.Name))
		}
	}
	coreW += classW
	// One thread: "cpu12 [####......]  40% ab  ".
	cellW := cpuW + 1 + topBarWidth + 2 + 5 + tagW
	perLine := max(1, (width-coreW-1)/(cellW+2))
	for pi, p := range pkgs {
		head := fmt.Sprintf("package %d  cpus %s", pi, formatCPUList(p.cpus))
		if len(p.llcs) == 1 {
			head += "  (one LLC)"
		} else {
			head += fmt.Sprintf("  (%d LLCs)", len(p.llcs))
		}
		lines = append(lines, fit(head, width))
		if s.classOf != nil && pi == 0 {
			var cs []string
			for _, c := range s.classes {
				cs = append(cs, fmt.Sprintf("%s %s (capacity %d)", c.Name, formatCPUList(c.CPUs), c.Capacity))
			}
			lines = append(lines, fit(" classes, most efficient first: "+strings.Join(cs, ", "), width))
		}
		for li, l := range p.llcs {
			if len(p.llcs) > 1 {
				lines = append(lines, fit(fmt.Sprintf(" llc %d  cpus %s", li, formatCPUList(l.cpus)), width))
			}
			for _, c := range l.cores {
				for i := 0; i < len(c.threads); i += perLine {
					label := strings.Repeat(" ", coreW)
					if i == 0 {
						name := fmt.Sprintf(" core %d", c.id)
						if s.classOf != nil {
							name += " " + s.classOf[c.threads[0].id]
						}
						label = fmt.Sprintf("%-*s", coreW, name)
					}
					var cells []string
					for _, t := range c.threads[i:min(i+perLine, len(c.threads))] {
						tags := t.tags
						if tags == "" {
							tags = "-"
						} else if len(tags) > tagW {
							tags = tags[:tagW-1] + "+"
						}
						cells = append(cells, fmt.Sprintf("%-*s %s %3.0f%% %-*s", cpuW, "cpu"+strconv.Itoa(t.id), bar(t.util), 100*t.util, tagW, tags))
					}
					lines = append(lines, fit(strings.TrimRight(label+" "+strings.Join(cells, "  "), " "), width))
				}
			}
		}
	}
	lines = append(lines, "")
	ws := s.st.Workloads
	if len(ws) == 0 {
		return append(lines, "workloads: none")
	}
	nameW := 8
	for _, w := range ws {
		nameW = max(nameW, ansi.StringWidth(printable(w.Name)))
	}
	nameW = min(nameW, 28)
	lines = append(lines, fit(fmt.Sprintf("workloads: %d", len(ws)), width),
		fit(fmt.Sprintf("   %-*s  %-12s %5s  %s", nameW, "NAME", "CPUS", "UTIL", "POLICY"), width))
	for i, w := range ws {
		pol := w.Policy
		if pol == "" {
			pol = "-"
		}
		name := fit(printable(w.Name), nameW)
		pad := nameW - ansi.StringWidth(name)
		lines = append(lines, fit(fmt.Sprintf(" %c %s%s  %-12s %5.2f  %s", workloadTag(i), name, strings.Repeat(" ", pad), w.CPUs, w.Util, pol), width))
	}
	return lines
}

// topNote says where the per-CPU figures come from.
const topNote = "cpu% = workloads' use spread over their CPUs"

// renderTop lays out the whole screen for width × height, the machine
// scrolled by scroll lines (clamped; the value used is returned). height
// 0 means no limit: everything, for the plain-text snapshot. The footer
// names the keys and the time of the last change, or the lines shown when
// the machine does not fit.
func renderTop(s *topState, width, height, scroll int) ([]string, int) {
	whyLines := 2
	if height <= 0 {
		whyLines = 0
	}
	head := append(topHeader(s, width, whyLines), "")
	body := topMachine(s, width)
	if height <= 0 {
		return append(append(head, body...), "", fit(topNote, width)), 0
	}
	room := max(0, height-len(head)-1)
	maxScroll := max(0, len(body)-room)
	scroll = max(0, min(scroll, maxScroll))
	shown := body[scroll:min(len(body), scroll+room)]
	lines := append(head, shown...)
	if len(lines) > height-1 {
		lines = lines[:max(0, height-1)]
	}
	for len(lines) < height-1 {
		lines = append(lines, "")
	}
	where := ""
	switch {
	case maxScroll > 0:
		where = fmt.Sprintf("lines %d-%d/%d", scroll+1, scroll+len(shown), len(body))
	case !s.updated.IsZero():
		where = s.updated.Format("15:04:05")
	}
	footer := "q quit  ↑↓ scroll  " + where + "  " + topNote
	return append(lines, fit(footer, width)), scroll
}
