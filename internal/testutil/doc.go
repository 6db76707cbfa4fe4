// Package testutil holds the helpers the module's tests share:
//
//   - a private dbus-daemon, session- or system-like, optionally open to
//     every uid and restartable at the same address (StartBus, Bus.Stop,
//     Bus.Kill, NeedBusDaemon), a connection of the test's own to it,
//     closed at cleanup (Connect), and a D-Bus name-owner check to poll
//     with (NameOwned, NameOwnedAt);
//   - copies of fixture trees (CopyFixture) and of live sysfs directories
//     (CopyReadable);
//   - polling with a bound and a message (WaitFor, Eventually);
//   - a logrus logger and an io.Writer that write to t.Log (Logger,
//     LogWriter), and a caught log's entries as lines to compare with
//     (EntryLine), picked by level, text and fields (EntriesAt) and
//     described for a failure (DescribeEntries);
//   - small file helpers that fail the test on error (WriteFile,
//     WriteTree, Put, Write, Read, ReadTrim);
//   - the cpu.stat files a path another process chose may end in: a
//     FIFO, a link to /dev/zero, an oversized file and a good one
//     (NewCPUStatCases), and the check of a reader's parse errors: type,
//     path, cause and text (CheckParseErrors);
//   - a cgroup v1 cpuset parent of the test's own below CpusetRoot,
//     removed with its children at cleanup (CpusetV1Parent, CpusetV1Dir,
//     NeedCpusetV1);
//   - the Prometheus reference checker on a metrics text (CheckMetrics);
//   - directories a user other than root controls, holding a symlink to
//     root's directory or tree directory, for the trusted-path tests of
//     internal/trustedpath, tree, daemon/statefile and the daemon's
//     binary (NeedUserDirs, UserDirCases, UserDir, VictimDir,
//     VictimTreeDir), and a listing of a directory's paths, modes and
//     contents to compare before and after (Listing);
//   - a function run on a thread of its own as another uid, the rest of
//     the process staying root (AsUID): what DialAs and ListenUnixAs
//     connect and listen with;
//   - a systemd manager on a user's private socket or a bus
//     (FakeManager, FakeUnit), and its pieces for another fake of the
//     manager: its names (SystemdName, SystemdPath, SystemdManager,
//     SystemdUnitPath), a unit's object path and back (FakeUnitPath,
//     FakeUnitName), the ListUnitsByPatterns entry (FakeUnitStatus), the
//     units' properties (FakeUnitProps) and the not-loaded error
//     (NoSuchUnit);
//   - a daemon's binary run as a child with an sd_notify socket of the
//     test's own, killed at cleanup (StartProc, Proc.WaitReady: ready or
//     refused; ListenNotify, NotifySocket.Expect), and a child the test
//     talks to through its standard input and output (StartPiped);
//   - the stacks of this process's goroutines, for tests of what a
//     component leaves running (Goroutines);
//   - in-memory CPU pressure triggers a test fires, and what a gate did
//     to them (FakePressureTrigger, FakePressureTriggers), and the check
//     that a channel has a value once a synctest bubble is blocked
//     (Ready);
//   - the skip where /dev/fuse does not open (NeedFUSE), and another
//     process holding a file of a mounted tree open or its cwd in it,
//     which keeps the mount alive after umount -l (HoldFile).
//
// Helpers that need something the machine may lack skip the test and say
// what is missing (and which Debian package or privilege provides it);
// anything else that goes wrong fails the test at once, so a caller never
// checks an error. The pieces a program needs too (the resident-daemon
// bench starts private buses and copies fixtures without a testing.T) have
// error-returning forms: StartBusProcess and CopyTree.
package testutil
