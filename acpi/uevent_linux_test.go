//go:build linux

package acpi

import (
	"bytes"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// cpu0Uevent is written to make the kernel send a harmless "change" uevent.
const cpu0Uevent = "/sys/devices/system/cpu/cpu0/uevent"

// TestKernelUeventCPU opens the real uevent socket, sends a forged
// power_supply message from user space to group 1 (must be dropped: nl_pid
// is not 0), then writes "change" to cpu0's uevent file and expects the
// kernel's SUBSYSTEM=cpu event.
func TestKernelUeventCPU(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("needs root to write %s", cpu0Uevent)
	}
	src, err := openNetlinkUevents()
	if err != nil {
		t.Skipf("cannot open the uevent netlink socket: %v", err)
	}
	type result struct {
		b   []byte
		err error
	}
	got := make(chan result, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			b, err := src.Receive()
			got <- result{b, err}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		src.Close()
		<-done
	}()

	forged := []byte("change@/devices/forged/power_supply/AC\x00ACTION=change\x00DEVPATH=/devices/forged/power_supply/AC\x00SUBSYSTEM=power_supply\x00")
	if fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_KOBJECT_UEVENT); err == nil {
		if err := unix.Sendto(fd, forged, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: kernelGroup}); err != nil {
			t.Logf("could not send the forged message (%v); the nl_pid filter is not exercised", err)
		}
		unix.Close(fd)
	}
	if err := os.WriteFile(cpu0Uevent, []byte("change"), 0); err != nil {
		t.Skipf("cannot trigger a uevent: %v", err)
	}
	timeout := time.After(5 * time.Second)
	for {
		select {
		case r := <-got:
			if r.err != nil {
				t.Fatalf("Receive: %v", r.err)
			}
			if bytes.Equal(r.b, forged) {
				t.Fatalf("received a user-space message; the nl_pid 0 filter failed")
			}
			ev, err := ParseUevent(r.b)
			if err != nil {
				t.Fatalf("ParseUevent(%q): %v", r.b, err)
			}
			if ev.Subsystem == "cpu" && ev.DevPath == "/devices/system/cpu/cpu0" && ev.Action == "change" {
				if ev.Env["SEQNUM"] == "" {
					t.Errorf("kernel event without SEQNUM: %+v", ev)
				}
				return
			}
		case <-timeout:
			t.Fatalf("no SUBSYSTEM=cpu change uevent for cpu0 within 5s (is this a network namespace without uevents?)")
		}
	}
}

// TestNetlinkCloseUnblocks checks that Close wakes a blocked Receive.
func TestNetlinkCloseUnblocks(t *testing.T) {
	src, err := openNetlinkUevents()
	if err != nil {
		t.Skipf("cannot open the uevent netlink socket: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := src.Receive(); err != nil {
				done <- err
				return
			}
		}
	}()
	time.Sleep(20 * time.Millisecond) // let Receive block; not asserted
	if err := src.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-done:
		t.Logf("Receive after Close: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Receive still blocked 5s after Close")
	}
	if err := src.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
