package main

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestMetricsTextfileBinary: the real binary on a mock laptop on battery
// keeps the node_exporter textfile, which promtool accepts, opens no IP
// socket for it (every socket it holds is a Unix or netlink one: the unit
// keeps RestrictAddressFamilies=AF_UNIX AF_NETLINK), follows a change and
// removes the file on SIGTERM.
func TestMetricsTextfileBinary(t *testing.T) {
	src := filepath.Join(powerCases, "surface-pro-on-battery", "sys", "class")
	bin := buildDaemon(t)
	dir := t.TempDir()
	sys := filepath.Join(dir, "sys")
	testutil.CopyFixture(t, "../../sysfs/testdata/topology/laptop-4c8t", sys)
	testutil.CopyFixture(t, src, filepath.Join(sys, "class"))
	prom := filepath.Join(dir, "textfile", "schedpolicyd.prom")
	os.Mkdir(filepath.Dir(prom), 0o755)
	tree := filepath.Join(dir, "run", "tree")
	addr := testutil.StartBus(t, testutil.BusOptions{}).Addr // a Unix socket to hold
	p := procOf(testutil.StartProc(t, bin, "--sysfs-root", sys, "--cgroup-root", "none", "--bus", addr, "--events", "fsnotify",
		"--tree-backend", "plain", "--tree-dir", tree, "--state-dir", filepath.Join(dir, "state"),
		"--debounce", "20ms", "--metrics-textfile", prom, "--config", emptyConf(t)))
	testutil.WaitFor(t, "the textfile", 15*time.Second, func() (bool, string) {
		b, err := os.ReadFile(prom)
		return err == nil && strings.Contains(string(b), `schedpolicyd_power_source{power_source="battery"} 1`), string(b)
	})
	b := testutil.Read(t, prom)
	if out, ok := testutil.CheckMetrics(t, []byte(b)); !ok {
		t.Errorf("promtool check metrics refused the daemon's file:\n%s\n%s", out, b)
	}
	for _, want := range []string{`schedpolicyd_policy{policy="powersaving"} 1`, `schedpolicyd_energy_source{energy_source="battery"} 1`, "schedpolicyd_workloads 0"} {
		if !strings.Contains(b, want) {
			t.Errorf("textfile lacks %s:\n%s", want, b)
		}
	}

	// Every socket of the process is a Unix or netlink socket.
	pid := p.cmd.Process.Pid
	socks := socketInodes(t, pid)
	if len(socks) == 0 {
		t.Fatal("no socket at all, not even the bus connection: the fd view is wrong")
	}
	known := map[string]bool{}
	for _, table := range []string{"unix", "netlink"} {
		for ino := range procNetInodes(t, pid, table) {
			known[ino] = true
		}
	}
	for _, table := range []string{"tcp", "tcp6", "udp", "udp6", "raw", "raw6"} {
		for ino := range procNetInodes(t, pid, table) {
			if socks[ino] {
				t.Errorf("the daemon holds an IP socket (%s, inode %s)", table, ino)
			}
		}
	}
	for ino := range socks {
		if !known[ino] {
			t.Errorf("socket inode %s is neither a Unix nor a netlink socket", ino)
		}
	}

	// A change is written; the stop removes the file.
	if err := os.WriteFile(filepath.Join(tree, "devices/system/cpu/sched_policy/power_aware"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the change in the textfile", 10*time.Second, func() (bool, string) {
		b, _ := os.ReadFile(prom)
		return strings.Contains(string(b), `schedpolicyd_policy{policy="performance"} 1`), string(b)
	})
	p.stop(t)
	if _, err := os.Stat(prom); !os.IsNotExist(err) {
		t.Errorf("textfile after a clean stop: %v, want it removed", err)
	}
}

// TestProcNetInodes: the socket check sees an IP socket where there is
// one (this test process's TCP listener), so it can fail.
func TestProcNetInodes(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no TCP on loopback: %v", err)
	}
	defer l.Close()
	found := false
	tcp := procNetInodes(t, os.Getpid(), "tcp")
	for ino := range socketInodes(t, os.Getpid()) {
		found = found || tcp[ino]
	}
	if !found {
		t.Errorf("the test's own TCP listener is not seen: %v", tcp)
	}
}

// socketInodes lists the inodes of pid's open sockets (/proc/PID/fd links
// "socket:[N]").
func socketInodes(t *testing.T, pid int) map[string]bool {
	t.Helper()
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name())
		if ino, ok := strings.CutPrefix(l, "socket:["); err == nil && ok {
			out[strings.TrimSuffix(ino, "]")] = true
		}
	}
	return out
}

// procNetInodes lists the socket inodes of /proc/PID/net/TABLE (the
// process's network namespace). unix and netlink name the inode column in
// their header and their rows have one field per header word; the IP
// tables (tcp, udp, raw and their 6 forms, proc_net_tcp.rst) write
// "tx_queue rx_queue" and "tr tm->when" as one field each, which puts the
// inode in field 9 of every row.
func procNetInodes(t *testing.T, pid int, table string) map[string]bool {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/net/" + table)
	if err != nil {
		return nil // no such protocol in this kernel
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	col := -1
	out := map[string]bool{}
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if col < 0 {
			col = 9
			if table == "unix" || table == "netlink" {
				col = -1
				for i, h := range fields {
					if strings.EqualFold(h, "inode") {
						col = i
					}
				}
				if col < 0 {
					t.Fatalf("/proc/net/%s has no inode column: %q", table, sc.Text())
				}
			}
			continue
		}
		if col < len(fields) {
			out[fields[col]] = true
		}
	}
	return out
}
