module github.com/schedpolicyd/schedpolicyd

go 1.26.8

require (
	github.com/coreos/go-systemd/v22 v22.7.0 // indirect
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	github.com/godbus/dbus/v5 v5.2.4 // indirect
	github.com/hanwen/go-fuse/v2 v2.12.1 // indirect
	github.com/sirupsen/logrus v1.10.2 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
