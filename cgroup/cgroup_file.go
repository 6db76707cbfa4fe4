package cgroup

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// cgReadString reads a whole cgroupfs file (which may exceed a page, unlike
// sysfs attributes) and trims surrounding whitespace.
func cgReadString(path string) (string, error) {
	b, err := sysfs.ReadFileRaw(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// cgReadCPUs reads a cpulist file.
func cgReadCPUs(path string) (sysfs.CPUSet, error) {
	s, err := cgReadString(path)
	if err != nil {
		return sysfs.CPUSet{}, err
	}
	set, err := sysfs.ParseCPUList(s)
	if err != nil {
		return sysfs.CPUSet{}, &sysfs.ParseError{Path: path, Err: err}
	}
	return set, nil
}

// cgReadIDs reads a file of one decimal ID per line (cgroup.procs, tasks);
// anything else is a *sysfs.ParseError.
func cgReadIDs(path string) ([]int, error) {
	s, err := cgReadString(path)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(s) {
		id, err := strconv.Atoi(f)
		if err != nil || id <= 0 {
			return nil, &sysfs.ParseError{Path: path, Err: fmt.Errorf("bad ID %q", f)}
		}
		out = append(out, id)
	}
	return out, nil
}

func cgExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
