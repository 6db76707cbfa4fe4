package acpi

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestUnixSocketPath(t *testing.T) {
	for addr, want := range map[string]string{
		"unix:path=/run/dbus/system_bus_socket":      "/run/dbus/system_bus_socket",
		"unix:path=/tmp/bus,guid=0123":               "/tmp/bus",
		"tcp:host=localhost,port=1;unix:path=/run/x": "/run/x",
		"unix:abstract=/tmp/dbus-XYZ":                "",
		"tcp:host=localhost,port=1":                  "",
		"":                                           "",
	} {
		if got := unixSocketPath(addr); got != want {
			t.Errorf("unixSocketPath(%q) = %q, want %q", addr, got, want)
		}
	}
}

// TestWaitForSocket: an existing file returns false at once (the caller
// backs off); a missing one is waited for through inotify — also when its
// directory does not exist yet — and the wait ends when it is created.
func TestWaitForSocket(t *testing.T) {
	root := t.TempDir()
	existing := filepath.Join(root, "there")
	if err := os.WriteFile(existing, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if waitForSocket(t.Context(), existing) {
		t.Fatal("waited for a file that exists")
	}
	if waitForSocket(t.Context(), filepath.Join(root, "no", "such", "dir", "sock")) {
		t.Fatal("reported a wait with neither the directory nor its parent there")
	}

	sock := filepath.Join(root, "dbus", "system_bus_socket") // dbus/ does not exist yet
	done := make(chan bool, 1)
	go func() { done <- waitForSocket(t.Context(), sock) }()
	select {
	case <-done:
		t.Fatal("returned before the socket existed")
	case <-time.After(100 * time.Millisecond):
	}
	if err := os.Mkdir(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		t.Fatal("returned when only the directory was created")
	case <-time.After(100 * time.Millisecond):
	}
	if err := os.WriteFile(sock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("returned false after the socket appeared")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting 10s after the socket appeared")
	}

	ctx, cancel := context.WithCancel(t.Context())
	go func() { done <- waitForSocket(ctx, filepath.Join(root, "dbus", "other")) }()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("did not return after ctx was cancelled")
	}
}
