package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/godbus/dbus/v5"
)

// status is the daemon's state as read from its properties; it is also the
// JSON shape of `status --json`. Fields an older daemon does not export
// keep their zero value.
type status struct {
	ActivePolicy      string   `json:"active_policy"`      // performance | balance | powersaving
	AvailablePolicies []string `json:"available_policies"` // const
	PowerAware        uint32   `json:"power_aware"`        // 0, 1 or 2
	PowerAwarePolicy  string   `json:"power_aware_policy"` // balance | powersaving
	PowerSource       string   `json:"power_source"`       // ac | battery | unknown
	OnBattery         bool     `json:"on_battery"`
	Boost             string   `json:"boost"`  // 1 | 0 | unsupported
	Reason            string   `json:"reason"` // why the current policy
	LastChangeUsec    uint64   `json:"last_change_usec"`
	LastChange        string   `json:"last_change,omitempty"` // RFC 3339, from LastChangeUsec
	// KnobFrom: choice, profile, config or default ("" from an older
	// daemon); KnobChosenAtUsec: when the explicit choice in force took
	// effect (0 none or not known), KnobChosenAt the same in RFC 3339.
	KnobFrom         string     `json:"knob_from,omitempty"`
	KnobChosenAtUsec uint64     `json:"knob_chosen_at_usec,omitempty"`
	KnobChosenAt     string     `json:"knob_chosen_at,omitempty"`
	Holds            []hold     `json:"holds"`
	Workloads        []workload `json:"workloads"`
	// Confined: the workloads placed on fewer CPUs than they may use,
	// each with the command that exempts it; Exemptions: the exempt
	// list (empty from a daemon without them).
	Confined   []confined  `json:"confined"`
	Exemptions []exemption `json:"exemptions"`
	// exempts: the daemon sends them (an older one does not: status
	// then says nothing of them).
	exempts bool
}

// hold is one entry of the Holds property, a(usss), with the holder's
// process as the bus daemon and /proc name it (holderProcesses).
type hold struct {
	Cookie uint32 `json:"cookie"`
	Policy string `json:"policy"`
	Reason string `json:"reason"`
	Holder string `json:"holder"` // the holder's unique bus name
	// PID is the holder's process as the bus daemon knows it
	// (GetConnectionUnixProcessID; its PID namespace's number), 0 when it
	// could not say.
	PID uint32 `json:"pid,omitempty"`
	// Command is that process's /proc/PID/comm (at most 15 bytes, as the
	// kernel keeps it), "" when unreadable.
	Command string `json:"command,omitempty"`
}

// holderLookupBound bounds the bus daemon's answers about every holder
// together: the status is printed without the PIDs it did not give in
// time.
const holderLookupBound = 2 * time.Second

// procRoot is where /proc is (tests point it elsewhere).
var procRoot = "/proc"

// holderProcesses fills in each hold's PID, asking the bus daemon on
// conn once per holder within holderLookupBound in all, and its command
// (procComm). A holder the bus cannot name (it left, the bus is slow)
// keeps PID 0.
func holderProcesses(ctx context.Context, conn *dbus.Conn, hs []hold) {
	ctx, cancel := context.WithTimeout(ctx, holderLookupBound)
	defer cancel()
	pids := map[string]uint32{}
	for i := range hs {
		h := &hs[i]
		pid, seen := pids[h.Holder]
		if !seen && ctx.Err() == nil {
			if err := conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionUnixProcessID", 0, h.Holder).Store(&pid); err != nil {
				pid = 0
			}
			pids[h.Holder] = pid
		}
		h.PID = pid
		if pid != 0 {
			h.Command = procComm(pid)
		}
	}
}

// procComm is /proc/PID/comm without its newline, read at most 64 bytes
// (the kernel keeps 15), "" when it cannot be read.
func procComm(pid uint32) string {
	f, err := os.Open(filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "comm"))
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 64))
	return strings.TrimSuffix(string(b), "\n")
}

// holderText is how status names a hold's holder: "PID 1234 (make,
// :1.42)", or its bus name alone when the bus did not give its PID.
func holderText(h hold) string {
	switch {
	case h.PID == 0:
		return h.Holder
	case h.Command == "":
		return fmt.Sprintf("PID %d (%s)", h.PID, h.Holder)
	}
	return fmt.Sprintf("PID %d (%s, %s)", h.PID, printable(h.Command), h.Holder)
}

// workload is one entry of the Workloads property, a(sssdss).
type workload struct {
	Name   string  `json:"name"`
	Path   string  `json:"path"`   // cgroup directory
	CPUs   string  `json:"cpus"`   // cpulist, e.g. 0-3,8
	Util   float64 `json:"util"`   // decayed utilisation, in CPUs
	Policy string  `json:"policy"` // per-workload override, "" for none
	// Class is "workload", "service", "user" or a managed slice's name
	// ("" from a daemon before classes).
	Class string `json:"class"`
}

// statusFrom decodes GetAll's answer. A property of an unexpected type is
// an error: the client and daemon disagree about the contract.
func statusFrom(props map[string]dbus.Variant) (status, error) {
	var s status
	s.Holds, s.Workloads, s.Confined, s.Exemptions = []hold{}, []workload{}, []confined{}, []exemption{}
	for name, v := range props {
		var err error
		switch name {
		case "ActivePolicy":
			err = v.Store(&s.ActivePolicy)
		case "AvailablePolicies":
			err = v.Store(&s.AvailablePolicies)
		case "PowerAware":
			err = v.Store(&s.PowerAware)
		case "PowerAwarePolicy":
			err = v.Store(&s.PowerAwarePolicy)
		case "PowerSource":
			err = v.Store(&s.PowerSource)
		case "OnBattery":
			err = v.Store(&s.OnBattery)
		case "Boost":
			err = v.Store(&s.Boost)
		case "Reason":
			err = v.Store(&s.Reason)
		case "LastChange":
			err = v.Store(&s.LastChangeUsec)
			if err == nil && s.LastChangeUsec > 0 {
				s.LastChange = time.UnixMicro(int64(s.LastChangeUsec)).UTC().Format(time.RFC3339)
			}
		case "KnobFrom":
			err = v.Store(&s.KnobFrom)
		case "KnobChosenAt":
			err = v.Store(&s.KnobChosenAtUsec)
			if err == nil && s.KnobChosenAtUsec > 0 {
				s.KnobChosenAt = time.UnixMicro(int64(s.KnobChosenAtUsec)).UTC().Format(time.RFC3339)
			}
		case "Holds":
			s.Holds, err = holdsFrom(v)
		case "Workloads":
			s.Workloads, err = workloadsFrom(v)
		case "Confined":
			s.Confined, err = confinedFrom(v)
		case "Exemptions":
			s.Exemptions, err = exemptionsFrom(v)
			s.exempts = true
		}
		if err != nil {
			return status{}, fmt.Errorf("property %s has type %s: %w", name, v.Signature(), err)
		}
	}
	return s, nil
}

func holdsFrom(v dbus.Variant) ([]hold, error) {
	var raw [][]any
	if err := storeList(v, &raw); err != nil {
		return nil, err
	}
	out := []hold{}
	for _, r := range raw {
		var h hold
		if err := dbus.Store(r, &h.Cookie, &h.Policy, &h.Reason, &h.Holder); err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

func workloadsFrom(v dbus.Variant) ([]workload, error) {
	var raw [][]any
	if err := storeList(v, &raw); err != nil {
		return nil, err
	}
	out := []workload{}
	for _, r := range raw {
		var w workload
		if len(r) < 5 {
			return nil, fmt.Errorf("a Workloads entry of %d fields, want 6 (sssdss)", len(r))
		}
		if err := dbus.Store(r[:5], &w.Name, &w.Path, &w.CPUs, &w.Util, &w.Policy); err != nil {
			return nil, err
		}
		if len(r) > 5 { // a daemon before classes sends (sssds)
			if err := dbus.Store(r[5:6], &w.Class); err != nil {
				return nil, err
			}
		}
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// knobMeaning describes power_aware's value for humans.
func knobMeaning(v uint32) string {
	switch v {
	case 0:
		return "always performance"
	case 1:
		return "automatic"
	case 2:
		return "always power-aware"
	}
	return "unknown"
}

// ago renders a duration since t coarsely ("3m ago"); now is injected for
// tests.
func ago(t, now time.Time) string {
	d := now.Sub(t)
	switch {
	case d < 0:
		return "in the future"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm ago", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// writeStatus prints the human summary.
func writeStatus(w io.Writer, s status, now time.Time) {
	fmt.Fprintf(w, "policy:        %s\n", s.ActivePolicy)
	if s.Reason != "" {
		fmt.Fprintf(w, "  reason:      %s\n", s.Reason)
	}
	if s.LastChangeUsec > 0 {
		t := time.UnixMicro(int64(s.LastChangeUsec))
		fmt.Fprintf(w, "  since:       %s (%s)\n", t.Local().Format("2006-01-02 15:04:05"), ago(t, now))
	}
	src := s.PowerSource
	if s.OnBattery {
		src += " (on battery)"
	}
	fmt.Fprintf(w, "power source:  %s\n", src)
	fmt.Fprintf(w, "knob:          power_aware=%d (%s) power_aware_policy=%s\n", s.PowerAware, knobMeaning(s.PowerAware), s.PowerAwarePolicy)
	if from := knobFromText(s, now); from != "" {
		fmt.Fprintf(w, "  from:        %s\n", from)
	}
	fmt.Fprintf(w, "boost:         %s\n", s.Boost)
	if len(s.Holds) == 0 {
		fmt.Fprintf(w, "holds:         none\n")
	} else {
		fmt.Fprintf(w, "holds:         %d\n", len(s.Holds))
		for _, h := range s.Holds {
			fmt.Fprintf(w, "  #%d %s by %s: %s\n", h.Cookie, h.Policy, holderText(h), printable(h.Reason))
		}
	}
	if len(s.Workloads) == 0 {
		fmt.Fprintf(w, "workloads:     none\n")
	} else {
		fmt.Fprintf(w, "workloads:     %d\n", len(s.Workloads))
		writeWorkloadTable(w, s.Workloads, "  ")
	}
	if s.exempts {
		writeConfined(w, s)
	}
}

// writeWorkloadTable prints NAME CLASS CPUS UTIL POLICY PATH columns.
func writeWorkloadTable(w io.Writer, ws []workload, indent string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%sNAME\tCLASS\tCPUS\tUTIL\tPOLICY\tPATH\n", indent)
	for _, wl := range ws {
		pol, class := wl.Policy, wl.Class
		if pol == "" {
			pol = "-"
		}
		if class == "" {
			class = "-"
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%.2f\t%s\t%s\n", indent, printable(wl.Name), printable(class), wl.CPUs, wl.Util, pol, printable(wl.Path))
	}
	tw.Flush()
}

// printable escapes control characters so a hostile name cannot move the
// terminal's cursor.
func printable(s string) string {
	if strings.IndexFunc(s, isControl) < 0 {
		return s
	}
	q := fmt.Sprintf("%q", s)
	return q[1 : len(q)-1]
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (c *cli) readStatus() (status, error) {
	cl, err := c.dial()
	if err != nil {
		return status{}, err
	}
	defer cl.Close()
	props, err := cl.properties()
	if err != nil {
		return status{}, err
	}
	s, err := statusFrom(props)
	if err != nil {
		return status{}, &cliError{exitFailure, err.Error()}
	}
	holderProcesses(context.Background(), cl.conn, s.Holds)
	return s, nil
}

func (c *cli) status(args []string) int {
	if len(args) > 0 {
		return c.usage("status", usagef("unexpected argument %q", args[0]))
	}
	s, err := c.readStatus()
	if err != nil {
		return c.fail(err)
	}
	if c.g.json {
		if err := writeJSON(c.stdout, s); err != nil {
			return c.fail(err)
		}
		return exitOK
	}
	writeStatus(c.stdout, s, time.Now())
	return exitOK
}

func (c *cli) workloads(args []string) int {
	if len(args) > 0 {
		return c.usage("workloads", usagef("unexpected argument %q", args[0]))
	}
	s, err := c.readStatus()
	if err != nil {
		return c.fail(err)
	}
	if c.g.json {
		if err := writeJSON(c.stdout, s.Workloads); err != nil {
			return c.fail(err)
		}
		return exitOK
	}
	if len(s.Workloads) == 0 {
		fmt.Fprintln(c.stdout, "no managed workloads")
		return exitOK
	}
	writeWorkloadTable(c.stdout, s.Workloads, "")
	return exitOK
}

// knobFromText says where the knob in force comes from, and for an
// explicit choice since when and how to undo it; "" from a daemon that
// does not say.
func knobFromText(s status, now time.Time) string {
	switch s.KnobFrom {
	case "choice":
		since := ""
		if s.KnobChosenAtUsec > 0 {
			t := time.UnixMicro(int64(s.KnobChosenAtUsec))
			since = fmt.Sprintf(" since %s (%s)", t.Local().Format("2006-01-02 15:04:05"), ago(t, now))
		}
		return "an explicit choice, in force" + since + "; it overrides the configuration until 'schedpolicyctl reset'"
	case "profile":
		return "the followed power-profiles daemon's profile"
	case "config":
		return "the configuration file"
	case "default":
		return "the built-in default (no configuration file sets it)"
	}
	return ""
}

// errNoProperty is storeList's error for a property the daemon did not
// send (the zero Variant of a missing map entry).
var errNoProperty = errors.New("the daemon did not send it")

// storeList decodes the array property v into raw: an error, never a
// panic, for a property that is absent (godbus's Store panics on the
// zero Variant's nil value) or of another type.
func storeList(v dbus.Variant, raw *[][]any) error {
	if v.Value() == nil {
		return errNoProperty
	}
	return dbus.Store([]any{v.Value()}, raw)
}
