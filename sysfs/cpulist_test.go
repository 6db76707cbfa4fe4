package sysfs

import (
	"errors"
	"strings"
	"testing"
)

// TestParseCPUList covers the kernel list parser's inputs
// (bitmap_parselist, lib/bitmap.c) as a 6.18 kernel with nr_cpu_ids = 2
// answered them (docs/SOURCES.md §10). Where the kernel's answer
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

// TestParseCPUListBelow: a CPU at or beyond the limit, the end of a range
// included whatever its stride, is a *CPURangeError naming it (the first
// bad item from the left), with the exact message; other errors are
// ParseCPUList's; a limit above MaxCPUs counts as MaxCPUs.
func TestParseCPUListBelow(t *testing.T) {
	for _, c := range []struct {
		in    string
		limit int
		want  string // String() of the set, or the error
		cpu   string // the CPURangeError's CPU; "" for none
	}{
		{"0-7", 8, "0-7", ""},
		{"7,0-3:1/2", 8, "0,2,7", ""},
		{"0-7,0-7,3", 8, "0-7", ""},
		{"", 0, "", ""},
		{"0-8", 8, `invalid cpulist "0-8": CPU "8" out of range (max 7)`, "8"},
		{"0-2147483646", 8, `invalid cpulist "0-2147483646": CPU "2147483646" out of range (max 7)`, "2147483646"},
		{"1,99999999999999999999", 8, `invalid cpulist "1,99999999999999999999": CPU "99999999999999999999" out of range (max 7)`, "99999999999999999999"},
		{"0-100:1/200", 8, `invalid cpulist "0-100:1/200": CPU "100" out of range (max 7)`, "100"},
		{"9-x", 8, `invalid cpulist "9-x": CPU "9" out of range (max 7)`, "9"},
		{"3,x,9", 8, `invalid cpulist "3,x,9": "x" is not a CPU number`, ""},
		{"3-1", 8, `invalid cpulist "3-1": range 3-1 is reversed`, ""},
		{"0", 0, `invalid cpulist "0": CPU "0" out of range (no CPU is)`, "0"},
		{"0", -5, `invalid cpulist "0": CPU "0" out of range (no CPU is)`, "0"},
		{"8191", 1 << 20, "8191", ""},
		{"8192", 1 << 20, `invalid cpulist "8192": CPU "8192" out of range (max 8191)`, "8192"},
	} {
		got, err := ParseCPUListBelow(c.in, c.limit)
		var re *CPURangeError
		switch {
		case err == nil && got.String() != c.want:
			t.Errorf("ParseCPUListBelow(%q, %d) = %q, want %q", c.in, c.limit, got, c.want)
		case err != nil && err.Error() != c.want:
			t.Errorf("ParseCPUListBelow(%q, %d): %v, want %s", c.in, c.limit, err, c.want)
		case err != nil && !errors.Is(err, ErrCPUList):
			t.Errorf("ParseCPUListBelow(%q, %d): %v does not wrap ErrCPUList", c.in, c.limit, err)
		case errors.As(err, &re) != (c.cpu != "") || c.cpu != "" && re.CPU != c.cpu:
			t.Errorf("ParseCPUListBelow(%q, %d): %#v, want a CPURangeError for CPU %q", c.in, c.limit, err, c.cpu)
		}
	}
}

// TestParseCPUListRepeatsTakeNoRoom: a list naming the same CPUs again and
// again (2000 times "0-8191") parses to them with as many allocations as
// one item does: the CPUs are marked in a bitmap, not gathered item by
// item (that took 130 MB for this list; a 128 KiB command-line argument
// of it, 1.2 GB).
func TestParseCPUListRepeatsTakeNoRoom(t *testing.T) {
	long := strings.Repeat("0-8191,", 2000)
	for name, parse := range map[string]func(string) (CPUSet, error){
		"ParseCPUList":      ParseCPUList,
		"ParseCPUListBelow": func(s string) (CPUSet, error) { return ParseCPUListBelow(s, MaxCPUs) },
	} {
		one := testing.AllocsPerRun(1, func() { parse("0-8191") })
		many := testing.AllocsPerRun(1, func() {
			if set, err := parse(long); err != nil || set.Size() != MaxCPUs {
				t.Errorf("%s: %d CPUs, %v", name, set.Size(), err)
			}
		})
		if many > one {
			t.Errorf("%s: %v allocations for 2000 items, %v for one", name, many, one)
		}
	}
}
