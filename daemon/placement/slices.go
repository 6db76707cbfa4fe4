package placement

import (
	"fmt"
	"sort"
	"strings"

	"github.com/schedpolicyd/schedpolicyd/policy"
)

// CheckSlices validates slice rules (Config.Slices) against the managed
// slices (nil: DefaultManage): each names a slice ("NAME.slice") of
// manage, with policy balance or powersaving. A rule for a slice that is
// not managed would never apply, so it is an error too.
func CheckSlices(rules map[string]policy.SliceRule, manage []string) error {
	if manage == nil {
		manage = DefaultManage
	}
	names := make([]string, 0, len(rules))
	for n := range rules {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r := rules[n]
		if !strings.HasSuffix(n, ".slice") || strings.ContainsAny(n, "/ \x00") || n == ".slice" {
			return fmt.Errorf("slice %q: not the name of a slice (NAME.slice)", n)
		}
		if r.Policy != policy.Balance && r.Policy != policy.Powersaving {
			return fmt.Errorf("slice %s: policy %q: want balance or powersaving", n, r.Policy)
		}
		found := false
		for _, m := range manage {
			found = found || m == n
		}
		if !found {
			return fmt.Errorf("slice %s: not in manage (%s): its rule would never apply", n, strings.Join(manage, ", "))
		}
	}
	return nil
}

// SliceRulesString is rules for a log line: "NAME=POLICY[+always] ...",
// sorted; "none" for none.
func SliceRulesString(rules map[string]policy.SliceRule) string {
	if len(rules) == 0 {
		return "none"
	}
	var out []string
	for n, r := range rules {
		s := n + "=" + string(r.Policy)
		if r.Always {
			s += "+always"
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}
