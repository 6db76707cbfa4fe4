package sysfs

import (
	"errors"
	"strings"
	"testing"
)

// TestParseCPUList covers the inputs of platform.md §1.4, verified there
// against a 6.18 kernel with nr_cpu_ids = 2. Where the kernel's answer
// depends on the machine (ERANGE) the parser accepts the list; "N" is
// deliberately unsupported.
func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in      string
		want    string // String() of the result
		wantErr bool
	}{
		// accepted, as by the kernel
		{"0-1:2/2", "0-1", false},
		{"0, 1", "0-1", false},
		{"0 1", "0-1", false},
		{"0-1,", "0-1", false},
		{"  ,0", "0", false},
		{"0\n1", "0", false},             // parsing stops at the newline
		{"0-1\x00garbage", "0-1", false}, // and at NUL
		{"0-1023:2/256", "0-1,256-257,512-513,768-769", false},
		{"", "", false},   // empty set
		{"\n", "", false}, // the kernel prints the empty set as "\n"
		{"3,1,2,2", "1-3", false},
		{"0-3", "0-3", false}, // ERANGE on a 2-CPU kernel, not our concern
		{"5", "5", false},     // likewise
		{"8191", "8191", false},
		// rejected, as by the kernel (EINVAL, EOVERFLOW)
		{"0-1:2", "", true}, // stride without /group
		{"1-0", "", true},   // reversed
		{"0x1", "", true},
		{"-1", "", true},
		{"99999999999999999999", "", true},
		{"0-1:0/2", "", true},
		{"0-1:3/2", "", true},
		{"1:1/2", "", true}, // stride without a range
		{"1-2-3", "", true},
		// rejected by us
		{"N", "", true},    // needs nr_cpu_ids
		{"0-N", "", true},  // likewise
		{"8192", "", true}, // ≥ MaxCPUs
	}
	for _, tt := range tests {
		got, err := ParseCPUList(tt.in)
		if tt.wantErr {
			if err == nil {
				t.Errorf("ParseCPUList(%q) = %q, want an error", tt.in, got)
			} else if !errors.Is(err, ErrCPUList) {
				t.Errorf("ParseCPUList(%q) error %v does not wrap ErrCPUList", tt.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseCPUList(%q): %v", tt.in, err)
			continue
		}
		if got.String() != tt.want {
			t.Errorf("ParseCPUList(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzParseCPUList checks the round trip: whatever parses prints as a
// kernel-style list (no spaces, no strides) that parses back to the same set.
// The seed corpus is in testdata/fuzz/FuzzParseCPUList.
func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0-3,8", "0 1", "0-1023:2/256", "", "1-0", "N"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		set, err := ParseCPUList(in)
		if err != nil {
			return
		}
		out := set.String()
		if strings.ContainsAny(out, " :\n") {
			t.Fatalf("String() = %q: not a kernel cpulist", out)
		}
		back, err := ParseCPUList(out)
		if err != nil {
			t.Fatalf("ParseCPUList(%q) (from %q): %v", out, in, err)
		}
		if !back.Equal(set) {
			t.Fatalf("round trip of %q: %q → %q", in, out, back)
		}
		if back.String() != out {
			t.Fatalf("String not canonical: %q then %q", out, back.String())
		}
	})
}
