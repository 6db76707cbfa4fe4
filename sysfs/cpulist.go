package sysfs

import (
	"errors"
	"fmt"
	bits64 "math/bits"
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
// group size, or a CPU ≥ MaxCPUs. Whatever the list, it holds at most
// MaxCPUs CPUs at a time (ParseCPUListBelow).
func ParseCPUList(s string) (CPUSet, error) {
	return parseCPUList(s, MaxCPUs, false)
}

// CPURangeError is the error of ParseCPUListBelow for a cpulist that names
// a CPU at or beyond its limit. It wraps ErrCPUList.
type CPURangeError struct {
	List  string // the cpulist, up to a newline or NUL
	CPU   string // the CPU as written: decimal digits, perhaps too many for an int
	Limit int    // every CPU must be below it; at least 0
}

func (e *CPURangeError) Error() string {
	if e.Limit <= 0 {
		return fmt.Sprintf("%v %q: CPU %q out of range (no CPU is)", ErrCPUList, e.List, e.CPU)
	}
	return fmt.Sprintf("%v %q: CPU %q out of range (max %d)", ErrCPUList, e.List, e.CPU, e.Limit-1)
}

// Unwrap returns ErrCPUList.
func (e *CPURangeError) Unwrap() error { return ErrCPUList }

// ParseCPUListBelow is ParseCPUList for CPUs below limit (a limit above
// MaxCPUs counts as MaxCPUs, one below 0 as 0): a list that names a CPU
// at or beyond limit is a *CPURangeError, and so is a range "a-b" whose b
// is, whatever its stride selects (the kernel refuses such a region with
// ERANGE). Items are checked left to right and the first bad one is the
// error, before the CPUs of any later item are taken. It allocates
// O(limit) besides the result, whatever the list's length, and takes
// O(len(s) + limit × the number of items) time. Other errors are
// ParseCPUList's.
func ParseCPUListBelow(s string, limit int) (CPUSet, error) {
	return parseCPUList(s, min(max(limit, 0), MaxCPUs), true)
}

// parseCPUList is ParseCPUList (bounded false: CPUs below MaxCPUs, and
// its errors) and ParseCPUListBelow (bounded: CPUs below limit ≤ MaxCPUs,
// a *CPURangeError beyond). The CPUs are marked in a bitmap of limit bits,
// so a list that names the same CPUs again and again takes no more room.
func parseCPUList(s string, limit int, bounded bool) (CPUSet, error) {
	if i := strings.IndexAny(s, "\n\x00"); i >= 0 {
		s = s[:i]
	}
	num := func(f string) (int, error) {
		if !bounded {
			return parseCPU(f)
		}
		return parseCPUBelow(s, f, limit)
	}
	bits := make([]uint64, (limit+63)/64)
	rest := s
	for rest != "" {
		// The items are separated by commas, spaces and tabs, empty
		// ones skipped (strings.FieldsFunc, without its slice).
		end := strings.IndexAny(rest, ", \t")
		item := rest
		if end >= 0 {
			item, rest = rest[:end], rest[end+1:]
		} else {
			rest = ""
		}
		if item == "" {
			continue
		}
		rng, stride, hasStride := strings.Cut(item, ":")
		lo, hi, isRange := strings.Cut(rng, "-")
		a, err := num(lo)
		if err != nil {
			return CPUSet{}, cpuListError(s, err)
		}
		b := a
		if isRange {
			if b, err = num(hi); err != nil {
				return CPUSet{}, cpuListError(s, err)
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
		if used == group { // every CPU of a-b: whole words at a time
			for c := a; c <= b; {
				if c%64 == 0 && c+63 <= b {
					bits[c/64] = ^uint64(0)
					c += 64
					continue
				}
				bits[c/64] |= 1 << (c % 64)
				c++
			}
			continue
		}
		for c := a; c <= b; c++ {
			if (c-a)%group < used {
				bits[c/64] |= 1 << (c % 64)
			}
		}
	}
	n := 0
	for _, w := range bits {
		n += bits64.OnesCount64(w)
	}
	if n == 0 {
		return CPUSet{}, nil
	}
	out := make([]int, 0, n)
	for k, w := range bits {
		for w != 0 {
			out = append(out, k*64+bits64.TrailingZeros64(w))
			w &= w - 1
		}
	}
	return CPUSet{cpus: out}, nil
}

// cpuListError is err of a number of list s: a *CPURangeError as it is,
// any other wrapped with ErrCPUList and s.
func cpuListError(s string, err error) error {
	if _, ok := err.(*CPURangeError); ok {
		return err
	}
	return fmt.Errorf("%w %q: %v", ErrCPUList, s, err)
}

// parseCPUBelow parses the CPU number f of list s: decimal digits, below
// limit, else a *CPURangeError.
func parseCPUBelow(s, f string, limit int) (int, error) {
	if err := cpuDigits(f); err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(f)
	if err != nil || n >= limit {
		return 0, &CPURangeError{List: s, CPU: f, Limit: limit}
	}
	return n, nil
}

func parseCPU(s string) (int, error) {
	if err := cpuDigits(s); err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n >= MaxCPUs {
		return 0, fmt.Errorf("CPU %q out of range (max %d)", s, MaxCPUs-1)
	}
	return n, nil
}

// cpuDigits checks that s is a CPU number's decimal digits.
func cpuDigits(s string) error {
	if s == "" {
		return errors.New("missing number")
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return fmt.Errorf("%q is not a CPU number", s)
		}
	}
	return nil
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
