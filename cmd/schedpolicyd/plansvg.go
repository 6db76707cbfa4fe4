package main

// `schedpolicyd plan --svg FILE`: a picture of a plan for docs and bug
// reports. The machine is drawn as nested boxes — packages, their
// last-level caches, cores, hardware threads — with every part that some
// workload's cpuset allows (the plan's active CPUs) shaded and the idle
// parts left white, and each workload's CPUs marked in its colour: a strip
// at the foot of every thread box with one slot per workload, in the order
// of --load. The elements carry what they show (class "cpu active|idle"
// and data-cpu on threads, class "mark" with data-workload and data-cpu on
// marks), so a test or a script can read the plan back from the picture.

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// svgColors are the workloads' colours in --load order, repeating: the
// Okabe–Ito palette, distinguishable with the common colour-vision
// deficiencies, without its yellow and black (too close to the shading).
var svgColors = []string{"#0072b2", "#e69f00", "#009e73", "#d55e00", "#cc79a7", "#56b4e9"}

// svgClassColors colour the efficiency classes on a hybrid machine (the
// cores' borders and a legend row each), most efficient first; a middle
// class takes the middle colour. Paul Tol's "bright" green, yellow and
// purple, apart from the workloads' colours.
var svgClassColors = []string{"#228833", "#ccbb44", "#aa3377"}

func svgClassColor(i, n int) string {
	switch {
	case i == 0:
		return svgClassColors[0]
	case i == n-1:
		return svgClassColors[2]
	}
	return svgClassColors[1]
}

// The shading of active and idle parts, by level.
var (
	svgActiveFill = map[string]string{"package": "#ececec", "llc": "#dedede", "core": "#cdcdcd", "cpu": "#a9a9a9"}
	svgIdleFill   = map[string]string{"package": "#fcfcfc", "llc": "#ffffff", "core": "#ffffff", "cpu": "#ffffff"}
)

// svgElem is one element of the picture; Attrs keep their order, so the
// same plan always gives the same bytes.
type svgElem struct {
	XMLName  xml.Name
	Attrs    []xml.Attr `xml:",any,attr"`
	Text     string     `xml:",chardata"`
	Children []*svgElem
}

func elem(name string, attrs ...string) *svgElem {
	e := &svgElem{XMLName: xml.Name{Local: name}}
	for i := 0; i+1 < len(attrs); i += 2 {
		e.Attrs = append(e.Attrs, xml.Attr{Name: xml.Name{Local: attrs[i]}, Value: attrs[i+1]})
	}
	return e
}

func (e *svgElem) add(c ...*svgElem) *svgElem { e.Children = append(e.Children, c...); return e }

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func rect(x, y, w, h float64, attrs ...string) *svgElem {
	return elem("rect", append([]string{"x", num(x), "y", num(y), "width", num(w), "height", num(h)}, attrs...)...)
}

func text(x, y float64, s string, attrs ...string) *svgElem {
	t := elem("text", append([]string{"x", num(x), "y", num(y)}, attrs...)...)
	t.Text = s
	return t
}

// Geometry, in px (SVG user units at 1:1).
const (
	svgMargin   = 16.0
	svgPad      = 6.0
	svgGap      = 4.0
	svgThreadH  = 34.0
	svgMarkH    = 8.0
	svgLabelH   = 14.0
	svgCharW    = 6.6 // a generous average advance of 11 px sans-serif
	svgLineH    = 18.0
	svgCoreCols = 4 // cores per row inside an LLC
	svgPkgCols  = 2 // packages per row
)

type svgCore struct {
	id      int
	threads []int
}

type svgLLC struct {
	id    int
	cores []svgCore
	cpus  []int
}

type svgPkg struct {
	id   int
	llcs []svgLLC
	cpus []int
}

// svgMachine groups the CPUs into packages, LLCs and cores, each in
// ascending order of its id (the lowest CPU of the group).
func svgMachine(descs []policy.CPUDesc) []svgPkg {
	sorted := slices.Clone(descs)
	slices.SortFunc(sorted, func(a, b policy.CPUDesc) int {
		for _, d := range [][2]int{{a.Package, b.Package}, {a.LLC, b.LLC}, {a.Core, b.Core}, {a.ID, b.ID}} {
			if d[0] != d[1] {
				return d[0] - d[1]
			}
		}
		return 0
	})
	var pkgs []svgPkg
	for _, d := range sorted {
		if len(pkgs) == 0 || pkgs[len(pkgs)-1].id != d.Package {
			pkgs = append(pkgs, svgPkg{id: d.Package})
		}
		p := &pkgs[len(pkgs)-1]
		if len(p.llcs) == 0 || p.llcs[len(p.llcs)-1].id != d.LLC {
			p.llcs = append(p.llcs, svgLLC{id: d.LLC})
		}
		l := &p.llcs[len(p.llcs)-1]
		if len(l.cores) == 0 || l.cores[len(l.cores)-1].id != d.Core {
			l.cores = append(l.cores, svgCore{id: d.Core})
		}
		c := &l.cores[len(l.cores)-1]
		c.threads = append(c.threads, d.ID)
		l.cpus = append(l.cpus, d.ID)
		p.cpus = append(p.cpus, d.ID)
	}
	for i := range pkgs {
		slices.Sort(pkgs[i].cpus)
		for j := range pkgs[i].llcs {
			slices.Sort(pkgs[i].llcs[j].cpus)
		}
	}
	return pkgs
}

// writePlanSVG draws the plan r (made for loads on the machine descs, with
// plan's cpusets) as an SVG document: a title, a line of the loads and
// the estimate, the machine's boxes and a legend. The same plan always
// gives the same bytes. Errors are w's.
func writePlanSVG(w io.Writer, descs []policy.CPUDesc, r planReport, loads []policy.Load, plan policy.Plan) error {
	pkgs := svgMachine(descs)
	d := newSVGDrawing(descs, pkgs, r, loads, plan)
	title, sub := svgHeadings(r, loads)
	body, bodyW, bodyBottom := d.machine(pkgs)
	legend, legendW, y := d.legend(bodyBottom + 2*svgGap)
	width := math.Ceil(2*svgMargin + math.Max(bodyW, math.Max(legendW, svgCharW*1.1*float64(max(len(title), len(sub))))))
	height := math.Ceil(y + svgMargin)
	return encodeSVG(w, svgDocument(width, height, title, sub, body, legend))
}

// svgHeadH is the height of the title and the line below it, in px.
const svgHeadH = 2*svgLineH + 8

// svgGeometry are the sizes of the boxes, in px: every box of a level
// has the same size, so the machine's parts line up.
type svgGeometry struct {
	threadW, coreW, coreH float64
	cellW, cellH          float64 // the room of each package: the biggest package's box
}

// newSVGGeometry sizes the boxes for the machine descs grouped as pkgs: a
// thread fits its label "cpuN", a core its threads side by side and its
// label (coreLabel; on a machine of one-thread cores, "core 4 · big" is
// wider than the thread below it).
func newSVGGeometry(descs []policy.CPUDesc, pkgs []svgPkg, coreLabel func(svgCore) string) svgGeometry {
	maxID := 0
	maxThreads := 1
	for _, d := range descs {
		maxID = max(maxID, d.ID)
	}
	for _, p := range pkgs {
		for _, l := range p.llcs {
			for _, c := range l.cores {
				maxThreads = max(maxThreads, len(c.threads))
			}
		}
	}
	g := svgGeometry{threadW: math.Max(40, svgCharW*float64(len("cpu"+strconv.Itoa(maxID)))+10)}
	g.coreW = 2*svgPad + float64(maxThreads)*g.threadW + float64(maxThreads-1)*svgGap
	for _, p := range pkgs {
		for _, l := range p.llcs {
			for _, c := range l.cores {
				g.coreW = math.Max(g.coreW, 2*svgPad+svgCharW*float64(utf8.RuneCountInString(coreLabel(c))))
			}
		}
	}
	g.coreH = svgPad + svgLabelH + svgThreadH + svgPad
	for _, p := range pkgs {
		pw, ph := g.pkgSize(p)
		g.cellW, g.cellH = math.Max(g.cellW, pw), math.Max(g.cellH, ph)
	}
	return g
}

// llcSize is the width and height of an LLC's box: its cores, up to
// svgCoreCols to a row, under its label.
func (g svgGeometry) llcSize(l svgLLC) (float64, float64) {
	cols := min(len(l.cores), svgCoreCols)
	rows := (len(l.cores) + svgCoreCols - 1) / svgCoreCols
	return 2*svgPad + float64(cols)*g.coreW + float64(cols-1)*svgGap,
		svgPad + svgLabelH + float64(rows)*g.coreH + float64(rows-1)*svgGap + svgPad
}

// pkgSize is the width and height of a package's box: its LLCs one
// below the other, under its label.
func (g svgGeometry) pkgSize(p svgPkg) (float64, float64) {
	w, h := 0.0, svgPad+svgLabelH
	for i, l := range p.llcs {
		lw, lh := g.llcSize(l)
		w = math.Max(w, lw)
		h += lh
		if i > 0 {
			h += svgGap
		}
	}
	return w + 2*svgPad, h + svgPad
}

// svgDrawing is a plan being drawn: the boxes' sizes and what each CPU
// shows.
type svgDrawing struct {
	svgGeometry
	r      planReport
	loads  []policy.Load
	active map[int]bool   // the plan's active CPUs
	holds  []map[int]bool // by load, in --load order: the CPUs of its cpuset
	// classOf is each CPU's class (an index into r.CPUClasses) on a
	// machine of more than one class; nil otherwise, and nothing of it
	// is drawn.
	classOf map[int]int
}

// newSVGDrawing prepares the drawing of plan, whose report is r, for loads
// on the machine descs grouped as pkgs.
func newSVGDrawing(descs []policy.CPUDesc, pkgs []svgPkg, r planReport, loads []policy.Load, plan policy.Plan) *svgDrawing {
	d := &svgDrawing{r: r, loads: loads, active: map[int]bool{}}
	for _, c := range plan.Active {
		d.active[c] = true
	}
	d.holds = make([]map[int]bool, len(loads))
	for i, l := range loads {
		d.holds[i] = map[int]bool{}
		for _, c := range plan.CPUs[l.Name] {
			d.holds[i][c] = true
		}
	}
	if len(r.CPUClasses) > 1 {
		d.classOf = map[int]int{}
		for _, c := range descs {
			if c.Class < len(r.CPUClasses) {
				d.classOf[c.ID] = c.Class
			}
		}
	}
	d.svgGeometry = newSVGGeometry(descs, pkgs, d.coreLabel)
	return d
}

// coreLabel is core c's label: "core 4", or with its class on a machine
// of more than one, "core 4 · big".
func (d *svgDrawing) coreLabel(c svgCore) string {
	if d.classOf == nil {
		return fmt.Sprintf("core %d", c.id)
	}
	return fmt.Sprintf("core %d · %s", c.id, d.r.CPUClasses[d.classOf[c.threads[0]]].Name)
}

// anyActive reports whether any of cpus is active.
func (d *svgDrawing) anyActive(cpus []int) bool {
	return slices.ContainsFunc(cpus, func(c int) bool { return d.active[c] })
}

// svgState is the class word of an active or idle part.
func svgState(on bool) string {
	if on {
		return "active"
	}
	return "idle"
}

// svgFill is the shading of an active or idle part of level.
func svgFill(level string, on bool) string {
	if on {
		return svgActiveFill[level]
	}
	return svgIdleFill[level]
}

// svgHeadings are the picture's title (the machine and the policy) and
// the line below it (the loads, the active parts and the model's watts).
func svgHeadings(r planReport, loads []policy.Load) (title, sub string) {
	title = fmt.Sprintf("schedpolicyd plan: %s, policy %s", r.Topology, r.Policy)
	if r.Policy != r.Requested {
		title += fmt.Sprintf(" (requested %s; %s)", r.Requested, raceWhy(r))
	}
	var loadText []string
	for _, l := range loads {
		loadText = append(loadText, fmt.Sprintf("%s=%s:%d", l.Name, num(l.Util), l.Threads))
	}
	watts := fmt.Sprintf("model estimate %.1f W", r.Watts)
	if !r.ModelDescribes {
		watts = fmt.Sprintf("model %.1f W (ranks the policies only: not fitted on this machine's shape)", r.Watts)
	}
	sub = fmt.Sprintf("loads %s; active %s, %s, %s (%s); %s", strings.Join(loadText, " "),
		count(r.Active.Packages, "package"), count(r.Active.Cores, "core"), count(r.Active.Threads, "thread"), orNone(r.Active.CPUs), watts)
	return title, sub
}

// machine draws the packages, svgPkgCols to a row below the headings,
// and returns them with the width and the bottom of their rows.
func (d *svgDrawing) machine(pkgs []svgPkg) (body *svgElem, width, bottom float64) {
	body = elem("g", "id", "machine")
	for pi, p := range pkgs {
		px := svgMargin + float64(pi%svgPkgCols)*(d.cellW+2*svgGap)
		py := svgMargin + svgHeadH + float64(pi/svgPkgCols)*(d.cellH+2*svgGap)
		body.add(d.pkg(pi, p, px, py))
	}
	cols := min(len(pkgs), svgPkgCols)
	rows := (len(pkgs) + svgPkgCols - 1) / svgPkgCols
	width = float64(cols)*d.cellW + float64(cols-1)*2*svgGap
	bottom = svgMargin + svgHeadH + float64(rows)*d.cellH + float64(rows-1)*2*svgGap
	return body, width, bottom
}

// pkg draws package number pi, p, at (px, py) with its LLCs.
func (d *svgDrawing) pkg(pi int, p svgPkg, px, py float64) *svgElem {
	pw, ph := d.pkgSize(p)
	on := d.anyActive(p.cpus)
	g := elem("g", "class", "package "+svgState(on), "data-package", strconv.Itoa(p.id))
	g.add(rect(px, py, pw, ph, "rx", "6", "fill", svgFill("package", on), "stroke", "#666"),
		text(px+svgPad, py+svgLabelH, fmt.Sprintf("package %d · cpus %s", pi, sysfs.NewCPUSet(p.cpus...)), "class", "label"))
	ly := py + svgPad + svgLabelH
	for li, l := range p.llcs {
		lg, lh := d.llc(li, l, px+svgPad, ly)
		g.add(lg)
		ly += lh + svgGap
	}
	return g
}

// llc draws the package's LLC number li, l, at (lx, ly) with its cores,
// and returns it with its height.
func (d *svgDrawing) llc(li int, l svgLLC, lx, ly float64) (*svgElem, float64) {
	lw, lh := d.llcSize(l)
	on := d.anyActive(l.cpus)
	lg := elem("g", "class", "llc "+svgState(on), "data-llc", strconv.Itoa(l.id))
	lg.add(rect(lx, ly, lw, lh, "rx", "4", "fill", svgFill("llc", on), "stroke", "#888"),
		text(lx+svgPad, ly+svgLabelH-2, fmt.Sprintf("LLC %d · cpus %s", li, sysfs.NewCPUSet(l.cpus...)), "class", "label"))
	for ci, c := range l.cores {
		cx := lx + svgPad + float64(ci%svgCoreCols)*(d.coreW+svgGap)
		cy := ly + svgPad + svgLabelH + float64(ci/svgCoreCols)*(d.coreH+svgGap)
		lg.add(d.core(c, cx, cy))
	}
	return lg, lh
}

// core draws core c at (cx, cy) with its threads side by side; on a
// machine of more than one class its border has its class's colour.
func (d *svgDrawing) core(c svgCore, cx, cy float64) *svgElem {
	on := d.anyActive(c.threads)
	cg := elem("g", "class", "core "+svgState(on), "data-core", strconv.Itoa(c.id))
	if d.classOf == nil {
		cg.add(rect(cx, cy, d.coreW, d.coreH, "rx", "3", "fill", svgFill("core", on), "stroke", "#999"),
			text(cx+svgPad, cy+svgLabelH-3, d.coreLabel(c), "class", "small"))
	} else {
		k := d.classOf[c.threads[0]]
		name := d.r.CPUClasses[k].Name
		cg.Attrs = append(cg.Attrs, xml.Attr{Name: xml.Name{Local: "data-class"}, Value: name})
		cg.add(rect(cx, cy, d.coreW, d.coreH, "rx", "3", "fill", svgFill("core", on), "stroke", svgClassColor(k, len(d.r.CPUClasses)), "stroke-width", "2.5"),
			text(cx+svgPad, cy+svgLabelH-3, d.coreLabel(c), "class", "small"))
	}
	for ti, id := range c.threads {
		tx := cx + svgPad + float64(ti)*(d.threadW+svgGap)
		ty := cy + svgPad + svgLabelH
		cg.add(d.thread(id, tx, ty))
	}
	return cg
}

// thread draws CPU id at (tx, ty), with a mark in the strip at its foot
// for each workload whose cpuset holds it (a slot per workload).
func (d *svgDrawing) thread(id int, tx, ty float64) *svgElem {
	on := d.active[id]
	tg := elem("g", "class", "cpu "+svgState(on), "data-cpu", strconv.Itoa(id))
	tg.add(rect(tx, ty, d.threadW, svgThreadH, "fill", svgFill("cpu", on), "stroke", "#555"),
		text(tx+d.threadW/2, ty+15, "cpu"+strconv.Itoa(id), "class", "cpu-label"))
	slot := (d.threadW - 6) / float64(max(len(d.loads), 1))
	for wi, l := range d.loads {
		if !d.holds[wi][id] {
			continue
		}
		tg.add(rect(tx+3+float64(wi)*slot, ty+svgThreadH-svgMarkH-3, slot, svgMarkH,
			"class", "mark", "data-workload", l.Name, "data-cpu", strconv.Itoa(id), "fill", svgColors[wi%len(svgColors)]))
	}
	return tg
}

// legend draws the legend from y down: the shading, then a row per
// efficiency class on a machine of more than one, then a row per
// workload. It returns it with its width and the y below it.
func (d *svgDrawing) legend(y float64) (legend *svgElem, width, bottom float64) {
	legend = elem("g", "id", "legend")
	legend.add(rect(svgMargin, y, 12, 12, "fill", svgActiveFill["cpu"], "stroke", "#555"),
		text(svgMargin+18, y+10, "active: in some workload's cpuset", "class", "small"),
		rect(svgMargin+230, y, 12, 12, "fill", svgIdleFill["cpu"], "stroke", "#555"),
		text(svgMargin+248, y+10, "idle: in none (may sleep)", "class", "small"))
	width = 248 + svgCharW*float64(len("idle: in none (may sleep)"))
	y += svgLineH
	for k, c := range d.r.CPUClasses {
		if d.classOf == nil {
			break
		}
		line := fmt.Sprintf("class %s: cpus %s, capacity %d, energy per unit of work %.2f (estimate)", c.Name, c.CPUs, c.Capacity, c.Cost)
		legend.add(elem("g", "class", "cpu-class", "data-class", c.Name).add(
			rect(svgMargin, y, 12, 12, "fill", "#ffffff", "stroke", svgClassColor(k, len(d.r.CPUClasses)), "stroke-width", "2.5"),
			text(svgMargin+18, y+10, line, "class", "small")))
		width = math.Max(width, 18+svgCharW*float64(len(line)))
		y += svgLineH
	}
	for i, l := range d.loads {
		unit := "CPUs"
		if l.Util == 1 {
			unit = "CPU"
		}
		line := fmt.Sprintf("%s: cpus %s (util %s %s, %s)", l.Name, orNone(d.r.Workloads[l.Name]), num(l.Util), unit, count(l.Threads, "thread"))
		legend.add(elem("g", "class", "workload", "data-workload", l.Name).add(
			rect(svgMargin, y, 12, 12, "fill", svgColors[i%len(svgColors)]),
			text(svgMargin+18, y+10, line, "class", "small")))
		width = math.Max(width, 18+svgCharW*float64(len(line)))
		y += svgLineH
	}
	return legend, width, y
}

// svgDocument is the <svg> root of a picture width × height px: its
// <title>, the style, a white background, the headings, body and legend.
func svgDocument(width, height float64, title, sub string, body, legend *svgElem) *svgElem {
	root := elem("svg", "xmlns", "http://www.w3.org/2000/svg", "version", "1.1",
		"width", num(width), "height", num(height), "viewBox", fmt.Sprintf("0 0 %s %s", num(width), num(height)))
	style := elem("style")
	style.Text = "text{font-family:DejaVu Sans,Verdana,sans-serif;fill:#111}" +
		".title{font-size:14px;font-weight:bold}.sub{font-size:12px}.label{font-size:11px}" +
		".small{font-size:11px}.cpu-label{font-size:11px;text-anchor:middle}" +
		".idle .cpu-label{fill:#777}"
	titleEl := elem("title")
	titleEl.Text = title
	return root.add(titleEl, style,
		rect(0, 0, width, height, "fill", "#ffffff"),
		text(svgMargin, svgMargin+12, title, "class", "title"),
		text(svgMargin, svgMargin+12+svgLineH, sub, "class", "sub"),
		body, legend)
}

// encodeSVG writes root as an XML document, indented, ending in a
// newline.
func encodeSVG(w io.Writer, root *svgElem) error {
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", " ")
	if err := enc.Encode(root); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// count says "1 core", "2 cores".
// count says "1 noun" or "n nouns".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// planSVG writes the picture of the plan to file ("-": standard output,
// which then carries nothing else: done). A file is written whole or not
// at all (a temporary file renamed over it).
func planSVG(file string, descs []policy.CPUDesc, r planReport, loads []policy.Load, plan policy.Plan, stdout, stderr io.Writer) (code int, done bool) {
	if file == "-" {
		if err := writePlanSVG(stdout, descs, r, loads, plan); err != nil {
			fmt.Fprintf(stderr, "schedpolicyd plan: --svg: %v\n", err)
			return 1, true
		}
		return 0, true
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err == nil {
		err = writePlanSVG(tmp, descs, r, loads, plan)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chmod(tmp.Name(), 0o644)
		}
		if err == nil {
			err = os.Rename(tmp.Name(), file)
		}
		if err != nil {
			os.Remove(tmp.Name())
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "schedpolicyd plan: --svg %s: %v\n", file, err)
		return 1, true
	}
	return 0, false
}
