package names

import (
	"errors"
	"strings"
	"testing"
)

func TestWorkload(t *testing.T) {
	for _, ok := range []string{"build", "a", "my.job-1_2+x", "ünïcode", strings.Repeat("x", 64), "a..b", "x.cpuset"} {
		if err := Workload(ok); err != nil {
			t.Errorf("%q rejected: %v", ok, err)
		}
	}
	for bad, why := range map[string]string{
		"":                      "empty",
		strings.Repeat("x", 65): "longer than 64 bytes",
		".":                     `"." and ".." are not names`,
		"..":                    `"." and ".." are not names`,
		".x":                    "starts with a dot",
		"tasks":                 "is a cgroup interface file",
		"cgroup.procs":          "looks like a cgroup interface file",
		"cpuset.x":              "looks like a cgroup interface file",
		"a/b":                   `contains "/"`,
		"/abs":                  `contains "/"`,
		"tab\t":                 "contains a control character",
		"del\x7f":               "contains a control character",
		"c1\u0085":              "contains a control character",
		"bad\xffutf8":           "not valid UTF-8",
	} {
		err := Workload(bad)
		var e *Error
		if !errors.As(err, &e) || e.Why != why || e.Name != bad {
			t.Errorf("Workload(%q) = %v, want why %q", bad, err, why)
		}
	}
}
