//go:build linux

package acpi

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ueventSource delivers raw kernel uevent datagrams. Receive blocks until a
// datagram arrives; it returns an error wrapping syscall.ENOBUFS when the
// receive buffer overran (events were lost: re-read everything), and an
// error after Close. Close unblocks a pending Receive and is idempotent.
type ueventSource interface {
	Receive() ([]byte, error)
	Close() error
}

// netlinkUevents is a NETLINK_KOBJECT_UEVENT socket bound to the kernel
// multicast group 1. It is registered with Go's poller, so Close unblocks a
// Receive in another goroutine.
type netlinkUevents struct {
	f   *os.File
	buf []byte
}

var _ ueventSource = (*netlinkUevents)(nil)

// ueventRcvBuf is the receive buffer asked for: uevents come in bursts
// (hotplug of many CPUs, docks), and an overrun loses them (ENOBUFS).
const ueventRcvBuf = 8 << 20

// kernelGroup is the uevent multicast group of the kernel (group 2 is udev).
const kernelGroup = 1

// openNetlinkUevents opens the uevent socket. No privilege is needed to
// receive; SO_RCVBUFFORCE (root) is tried before SO_RCVBUF. It fails when
// the socket cannot be created or bound (e.g. a seccomp filter, or no
// netlink in the network namespace).
func openNetlinkUevents() (ueventSource, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return nil, fmt.Errorf("open uevent netlink socket: %w", err)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, ueventRcvBuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, ueventRcvBuf)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: kernelGroup}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind uevent netlink socket to group %d: %w", kernelGroup, err)
	}
	return &netlinkUevents{f: os.NewFile(uintptr(fd), "uevent-netlink"), buf: make([]byte, 64<<10)}, nil
}

// Receive returns the next datagram sent by the kernel (nl_pid 0); anything
// sent by a user-space process is dropped, so a local process cannot forge
// power events.
func (n *netlinkUevents) Receive() ([]byte, error) {
	rc, err := n.f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("receive uevent: %w", err)
	}
	for {
		var (
			nr   int
			from unix.Sockaddr
			rerr error
		)
		err = rc.Read(func(fd uintptr) bool {
			nr, from, rerr = unix.Recvfrom(int(fd), n.buf, unix.MSG_DONTWAIT)
			return !errors.Is(rerr, unix.EAGAIN)
		})
		if err != nil {
			return nil, fmt.Errorf("receive uevent: %w", err)
		}
		if rerr != nil {
			return nil, fmt.Errorf("receive uevent: %w", rerr)
		}
		if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != 0 {
			continue
		}
		if nr > len(n.buf) {
			nr = len(n.buf)
		}
		out := make([]byte, nr)
		copy(out, n.buf[:nr])
		return out, nil
	}
}

// Close closes the socket; a blocked Receive returns an error.
func (n *netlinkUevents) Close() error {
	err := n.f.Close()
	if errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}
