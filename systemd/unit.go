package systemd

import (
	_ "embed"
)

// Unit is the content of schedpolicyd.service, the systemd unit the Debian
// package installs.
//
//go:embed schedpolicyd.service
var Unit string
