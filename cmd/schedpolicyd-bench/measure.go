package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// procSample is one reading of a daemon's /proc files.
type procSample struct {
	at       time.Time
	switches uint64        // voluntary + involuntary context switches, all threads
	cpu      time.Duration // on-CPU time of all threads (schedstat, ns)
	threads  int
	rssKiB   uint64 // smaps_rollup Rss
	pssKiB   uint64 // smaps_rollup Pss
	// perTask holds each thread's counters, keyed by TID, for since.
	perTask map[string]taskCounts
}

type taskCounts struct {
	switches uint64
	cpu      time.Duration
}

// since returns the context switches and CPU time of s's threads since
// the earlier sample s0: per thread, so that a thread that exited in
// between (glib's short-lived worker threads in power-profiles-daemon)
// does not make the sum go backwards; its last counts are lost (an
// undercount, never an overcount), and a new thread counts in full.
func (s procSample) since(s0 procSample) (switches uint64, cpu time.Duration) {
	for tid, c := range s.perTask {
		b := s0.perTask[tid]
		if c.switches >= b.switches {
			switches += c.switches - b.switches
		}
		if c.cpu >= b.cpu {
			cpu += c.cpu - b.cpu
		}
	}
	return switches, cpu
}

// sampleProc reads /proc/PID/task/*/status (context switches),
// /proc/PID/task/*/schedstat (CPU ns) and /proc/PID/smaps_rollup.
// Differences between two samples are taken per thread (procSample.since).
func sampleProc(pid int) (procSample, error) {
	s := procSample{at: time.Now(), perTask: map[string]taskCounts{}}
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	if err != nil || len(tasks) == 0 {
		return s, fmt.Errorf("pid %d: no tasks", pid)
	}
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(t, "status"))
		if err != nil {
			continue
		}
		s.threads++
		var tc taskCounts
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && (k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches") {
				n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				tc.switches += n
			}
		}
		if b, err := os.ReadFile(filepath.Join(t, "schedstat")); err == nil {
			f := strings.Fields(string(b))
			if len(f) > 0 {
				n, _ := strconv.ParseUint(f[0], 10, 64)
				tc.cpu = time.Duration(n)
			}
		}
		s.switches += tc.switches
		s.cpu += tc.cpu
		s.perTask[filepath.Base(t)] = tc
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return s, err
	}
	for _, l := range bytes.Split(b, []byte("\n")) {
		f := strings.Fields(string(l))
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseUint(f[1], 10, 64)
		switch f[0] {
		case "Rss:":
			s.rssKiB = n
		case "Pss:":
			s.pssKiB = n
		}
	}
	return s, nil
}

// cpuOf returns the on-CPU time of all threads of pid.
func cpuOf(pid int) time.Duration {
	s, _ := sampleProc(pid)
	return s.cpu
}

// stats is a set of observations of one quantity.
type stats []float64

func (s stats) sorted() stats {
	c := append(stats(nil), s...)
	sort.Float64s(c)
	return c
}

// pct is the p-th percentile (nearest rank) of s; NaN when s is empty.
func (s stats) pct(p float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	c := s.sorted()
	i := int(math.Ceil(p/100*float64(len(c)))) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(c) {
		i = len(c) - 1
	}
	return c[i]
}

func (s stats) median() float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	c := s.sorted()
	n := len(c)
	if n%2 == 1 {
		return c[n/2]
	}
	return (c[n/2-1] + c[n/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
