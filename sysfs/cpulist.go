package sysfs

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxCPUs bounds CPU numbers accepted by ParseCPUList (the kernel's largest
// NR_CPUS is 8192). It keeps a hostile "0-4000000000" from allocating.
const MaxCPUs = 8192

// ErrCPUList is wrapped by every ParseCPUList error.
var ErrCPUList = errors.New("invalid cpulist")

// CPUSet is an immutable set of logical CPU numbers. Its String form is the
// kernel's cpulist format (%*pbl, see cpuset(7) "List format"): ascending,
// comma-joined "a" or "a-b" items, no spaces, "" for the empty set.
// The zero value is the empty set.
type CPUSet struct {
	cpus []int // sorted, unique
}

// NewCPUSet returns the set of the given CPUs (any order, duplicates allowed).
func NewCPUSet(cpus ...int) CPUSet {
	c := slices.Clone(cpus)
	slices.Sort(c)
	return CPUSet{cpus: slices.Compact(c)}
}

// ParseCPUList parses the kernel's list format as bitmap_parselist accepts
// it (lib/bitmap-str.c): comma-separated decimals and ranges "a-b", with an
// optional stride suffix "a-b:used/group"; whitespace around items and empty
// items are ignored; parsing stops at a newline or NUL, as the kernel does.
// The symbolic "N" (last CPU) is not accepted: it needs the machine's
// nr_cpu_ids. Errors wrap ErrCPUList: a reversed range, a bad number, a zero
// group size, or a CPU ≥ MaxCPUs.
func ParseCPUList(s string) (CPUSet, error) {
	if i := strings.IndexAny(s, "\n\x00"); i >= 0 {
		s = s[:i]
	}
	var out []int
	for _, item := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
		rng, stride, hasStride := strings.Cut(item, ":")
		lo, hi, isRange := strings.Cut(rng, "-")
		a, err := parseCPU(lo)
		if err != nil {
			return CPUSet{}, fmt.Errorf("%w %q: %v", ErrCPUList, s, err)
		}
		b := a
		if isRange {
			if b, err = parseCPU(hi); err != nil {
				return CPUSet{}, fmt.Errorf("%w %q: %v", ErrCPUList, s, err)
			}
		}
		if b < a {
			return CPUSet{}, fmt.Errorf("%w %q: range %d-%d is reversed", ErrCPUList, s, a, b)
		}
		used, group := 1, 1
		if hasStride {
			if !isRange {
				return CPUSet{}, fmt.Errorf("%w %q: stride without a range", ErrCPUList, s)
			}
			us, gs, ok := strings.Cut(stride, "/")
			if !ok {
				return CPUSet{}, fmt.Errorf("%w %q: stride %q is not used/group", ErrCPUList, s, stride)
			}
			if used, err = strconv.Atoi(us); err != nil || used < 1 {
				return CPUSet{}, fmt.Errorf("%w %q: bad stride %q", ErrCPUList, s, stride)
			}
			if group, err = strconv.Atoi(gs); err != nil || group < 1 || used > group {
				return CPUSet{}, fmt.Errorf("%w %q: bad stride %q", ErrCPUList, s, stride)
			}
		}
		for c := a; c <= b; c++ {
			if (c-a)%group < used {
				out = append(out, c)
			}
		}
	}
	return NewCPUSet(out...), nil
}

func parseCPU(s string) (int, error) {
	if s == "" {
		return 0, errors.New("missing number")
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("%q is not a CPU number", s)
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n >= MaxCPUs {
		return 0, fmt.Errorf("CPU %q out of range (max %d)", s, MaxCPUs-1)
	}
	return n, nil
}

// MustParseCPUList is ParseCPUList for literals in tests and tables; it
// panics on error.
func MustParseCPUList(s string) CPUSet {
	c, err := ParseCPUList(s)
	if err != nil {
		panic(err)
	}
	return c
}

// String formats the set as a kernel cpulist, e.g. "0-3,8"; "" when empty.
func (c CPUSet) String() string {
	var b strings.Builder
	for i := 0; i < len(c.cpus); {
		j := i
		for j+1 < len(c.cpus) && c.cpus[j+1] == c.cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(c.cpus[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(c.cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}

// Size is the number of CPUs in the set (the kernel's cpumask_weight).
func (c CPUSet) Size() int { return len(c.cpus) }

// IsEmpty reports whether the set has no CPUs.
func (c CPUSet) IsEmpty() bool { return len(c.cpus) == 0 }

// List returns the CPUs in ascending order (a copy).
func (c CPUSet) List() []int { return slices.Clone(c.cpus) }

// Contains reports whether cpu is in the set.
func (c CPUSet) Contains(cpu int) bool {
	_, ok := slices.BinarySearch(c.cpus, cpu)
	return ok
}

// Equal reports whether both sets hold the same CPUs.
func (c CPUSet) Equal(o CPUSet) bool { return slices.Equal(c.cpus, o.cpus) }

// First returns the lowest CPU, or -1 for the empty set.
func (c CPUSet) First() int {
	if len(c.cpus) == 0 {
		return -1
	}
	return c.cpus[0]
}

// Union returns c ∪ o.
func (c CPUSet) Union(o CPUSet) CPUSet {
	return NewCPUSet(append(slices.Clone(c.cpus), o.cpus...)...)
}

// Intersect returns c ∩ o.
func (c CPUSet) Intersect(o CPUSet) CPUSet {
	var out []int
	for _, x := range c.cpus {
		if o.Contains(x) {
			out = append(out, x)
		}
	}
	return CPUSet{cpus: out}
}

// Difference returns c \ o.
func (c CPUSet) Difference(o CPUSet) CPUSet {
	var out []int
	for _, x := range c.cpus {
		if !o.Contains(x) {
			out = append(out, x)
		}
	}
	return CPUSet{cpus: out}
}

// IsSubsetOf reports whether every CPU of c is in o.
func (c CPUSet) IsSubsetOf(o CPUSet) bool { return c.Difference(o).IsEmpty() }
