package main

// exempt, unexempt and workload-policy: taking a unit or a workload out
// of placement, and its own policy; status's list of what is confined.

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/names"
)

// confined is one entry of the Confined property, a(sssss): a workload
// placed on fewer CPUs than it may have.
type confined struct {
	Name    string `json:"name"`
	Manager string `json:"manager"` // system, user:UID, "" for a cgroup
	CPUs    string `json:"cpus"`
	Class   string `json:"class"`
	Policy  string `json:"policy"` // the policy that placed it
	// Exempt is the command that exempts it.
	Exempt string `json:"exempt"`
}

// exemption is one entry of the Exemptions property, a(ss).
type exemption struct {
	Entry string `json:"entry"`
	From  string `json:"from"` // config or state
}

func confinedFrom(v dbus.Variant) ([]confined, error) {
	var raw [][]any
	if err := storeList(v, &raw); err != nil {
		return nil, err
	}
	out := []confined{}
	for _, r := range raw {
		var c confined
		if err := dbus.Store(r, &c.Name, &c.Manager, &c.CPUs, &c.Class, &c.Policy); err != nil {
			return nil, err
		}
		c.Exempt = "schedpolicyctl exempt " + shellWord(exemptName(c.Name, c.Manager, os.Getuid()))
		out = append(out, c)
	}
	return out, nil
}

func exemptionsFrom(v dbus.Variant) ([]exemption, error) {
	var raw [][]any
	if err := storeList(v, &raw); err != nil {
		return nil, err
	}
	out := []exemption{}
	for _, r := range raw {
		var e exemption
		if err := dbus.Store(r, &e.Entry, &e.From); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// exemptName is the name that exempts workload name of manager for a
// caller of uid: the name itself for one of the caller's own units, a
// system unit or a cgroup (the daemon resolves it: Exempt in
// schedpolicyctl(1)), user:UID/NAME for another user's unit.
func exemptName(name, manager string, uid int) string {
	if id, ok := strings.CutPrefix(manager, "user:"); ok && id != strconv.Itoa(uid) {
		return manager + "/" + name
	}
	return name
}

// shellWord is s as one word of a shell command line: as it is when it
// holds only characters a unit or workload name usually has, else in
// single quotes.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_.@/+-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// writeConfined prints the confined workloads with where, why and the
// command that exempts each, and the exempt list with the workloads it
// names now.
func writeConfined(w io.Writer, s status) {
	if len(s.Confined) == 0 {
		fmt.Fprintf(w, "confined:      none\n")
	} else {
		fmt.Fprintf(w, "confined:      %d, placed on fewer CPUs than they may use\n", len(s.Confined))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  NAME\tCPUS\tWHY\tTO EXEMPT IT\n")
		for _, c := range s.Confined {
			name := c.Name
			if strings.HasPrefix(c.Manager, "user:") {
				name += " (" + c.Manager + ")"
			}
			why := c.Class
			if why == "" {
				why = "workload"
			}
			if c.Policy != "" {
				why += ", " + c.Policy
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", printable(name), c.CPUs, printable(why), printable(c.Exempt))
		}
		tw.Flush()
	}
	if len(s.Exemptions) == 0 {
		fmt.Fprintf(w, "exempt:        none\n")
		return
	}
	var list []string
	for _, e := range s.Exemptions {
		from := "schedpolicyctl exempt"
		if e.From == "config" {
			from = "configuration file"
		}
		list = append(list, printable(e.Entry)+" ("+from+")")
	}
	fmt.Fprintf(w, "exempt:        %s\n", strings.Join(list, ", "))
	for _, wl := range s.Workloads {
		if wl.Policy == "exempt" {
			fmt.Fprintf(w, "  %s: exempt, on %s\n", printable(wl.Name), wl.CPUs)
		}
	}
}

// exempt and unexempt call Exempt or Unexempt with NAME, and say which
// entry the daemon made or removed.
func (c *cli) exempt(args []string) int   { return c.exemptCall("exempt", "Exempt", args) }
func (c *cli) unexempt(args []string) int { return c.exemptCall("unexempt", "Unexempt", args) }

func (c *cli) exemptCall(cmd, method string, args []string) int {
	if len(args) != 1 {
		return c.usage(cmd, usagef("want exactly one UNIT or WORKLOAD name (or a glob of them)"))
	}
	if _, err := names.ParseExempt(args[0]); err != nil {
		return c.fail(&cliError{exitInvalid, err.Error()})
	}
	cl, err := c.dial()
	if err != nil {
		return c.fail(err)
	}
	defer cl.Close()
	var entry string
	if err := cl.call(method, []any{&entry}, args[0]); err != nil {
		return c.fail(err)
	}
	if method == "Exempt" {
		fmt.Fprintf(c.stdout, "exempt: %s: given its original CPUs back, not placed until 'schedpolicyctl unexempt %s'\n", printable(entry), printable(entry))
	} else {
		fmt.Fprintf(c.stdout, "no longer exempt: %s: placed again\n", printable(entry))
	}
	return exitOK
}

// workloadPolicy sets or clears a workload's own policy
// (SetWorkloadPolicy): performance keeps it on every CPU it may have,
// none clears it.
func (c *cli) workloadPolicy(args []string) int {
	if len(args) != 2 {
		return c.usage("workload-policy", usagef("want NAME and performance or none"))
	}
	p := args[1]
	switch p {
	case "performance":
	case "none":
		p = ""
	default:
		return c.fail(&cliError{exitInvalid, fmt.Sprintf("invalid workload policy %q: want performance (every CPU it may use, whatever the machine's policy) or none (the machine's policy again)", p)})
	}
	return c.simpleCall("SetWorkloadPolicy", args[0], p)
}
