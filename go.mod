module github.com/schedpolicyd/schedpolicyd

go 1.26.8

require (
	github.com/coreos/go-systemd/v22 v22.7.0
	github.com/fsnotify/fsnotify v1.10.1
	github.com/godbus/dbus/v5 v5.2.4
	github.com/hanwen/go-fuse/v2 v2.12.1
	github.com/pelletier/go-toml/v2 v2.4.3
	github.com/sirupsen/logrus v1.10.2
	go.uber.org/goleak v1.3.0
	golang.org/x/sys v0.50.0
	pgregory.net/rapid v1.3.0
)
