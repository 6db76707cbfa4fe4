//go:build !linux

package acpi

import "errors"

// ueventSource delivers raw kernel uevent datagrams; see uevent_linux.go.
type ueventSource interface {
	Receive() ([]byte, error)
	Close() error
}

// openNetlinkUevents fails: kernel uevents exist only on Linux.
func openNetlinkUevents() (ueventSource, error) {
	return nil, errors.New("kernel uevents need Linux")
}
