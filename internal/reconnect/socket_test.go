package reconnect

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
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

// TestWaitSocket: a missing socket is waited for without a timer (the
// backoff here is 1 ms), also while its directory does not exist yet, and
// the wait ends when it is created; an existing socket waits for the
// backoff or its re-creation, whichever comes first; without a watchable
// directory it is the backoff.
func TestWaitSocket(t *testing.T) {
	root := t.TempDir()
	wait := func(ctx context.Context, path string, backoff time.Duration) <-chan struct{} {
		done := make(chan struct{})
		go func() { WaitSocket(ctx, path, backoff); close(done) }()
		return done
	}
	returned := func(done <-chan struct{}, within time.Duration) bool {
		select {
		case <-done:
			return true
		case <-time.After(within):
			return false
		}
	}

	sock := filepath.Join(root, "dbus", "system_bus_socket") // dbus/ does not exist yet
	done := wait(t.Context(), sock, time.Millisecond)
	if returned(done, 200*time.Millisecond) {
		t.Fatal("returned on the 1 ms backoff while the socket was missing")
	}
	if err := os.Mkdir(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	if returned(done, 200*time.Millisecond) {
		t.Fatal("returned when only the directory was created")
	}
	if err := os.WriteFile(sock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !returned(done, 10*time.Second) {
		t.Fatal("still waiting 10s after the socket appeared")
	}

	// It exists (a dead service's socket): an hour's backoff, cut short
	// when the service starts again and re-creates it.
	done = wait(t.Context(), sock, time.Hour)
	if returned(done, 200*time.Millisecond) {
		t.Fatal("returned at once for an existing socket")
	}
	os.Remove(sock)
	if returned(done, 200*time.Millisecond) {
		t.Fatal("returned when the socket was removed")
	}
	if err := os.WriteFile(sock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !returned(done, 10*time.Second) {
		t.Fatal("still waiting 10s after the socket was re-created")
	}

	// Existing socket, short backoff: the timer.
	if !returned(wait(t.Context(), sock, time.Millisecond), 10*time.Second) {
		t.Fatal("an existing socket's 1 ms backoff did not end the wait")
	}
	// Nothing to watch: the timer.
	if !returned(wait(t.Context(), filepath.Join(root, "no", "such", "dir", "sock"), time.Millisecond), 10*time.Second) {
		t.Fatal("the 1 ms backoff did not end the wait with nothing to watch")
	}
	// ctx.
	ctx, cancel := context.WithCancel(t.Context())
	done = wait(ctx, filepath.Join(root, "dbus", "other"), time.Hour)
	cancel()
	if !returned(done, 10*time.Second) {
		t.Fatal("did not return after ctx was cancelled")
	}
}

// TestWaitSocketDirMovedAway: the socket's directory moved away and deleted
// while a wait is under way (a private bus's directory at its end), then
// made again with the socket in it, ends the wait. fsnotify's reader reports
// the moved watch's error while holding the lock Add takes, which
// deadlocked a wait that read Errors in the loop that calls Add.
func TestWaitSocketDirMovedAway(t *testing.T) {
	for i := 0; i < 30; i++ {
		root := t.TempDir()
		dir := filepath.Join(root, "dbus")
		sock := filepath.Join(dir, "system_bus_socket")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { WaitSocket(t.Context(), sock, time.Hour); close(done) }()
		time.Sleep(5 * time.Millisecond) // let the watch on dbus/ be set up (not required for correctness)
		gone := filepath.Join(t.TempDir(), "gone")
		if err := os.Rename(dir, gone); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(gone); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(sock, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: still waiting 10s after the directory and socket were made again", i)
		}
	}
}

// TestListeningWaitsForListen: a socket file that exists but is not
// listening yet (bound, as a service has it between bind() and listen())
// refuses connections; listening probes it again until the service
// listens, and its probe is accepted.
func TestListeningWaitsForListen(t *testing.T) {
	defer func(g time.Duration) { listenGrace = g }(listenGrace)
	listenGrace = time.Minute
	path := filepath.Join(t.TempDir(), "sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("unix", path); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("a bound socket that does not listen: dial %v, want ECONNREFUSED", err)
	}
	done := make(chan struct{})
	go func() { listening(context.Background(), path); close(done) }()
	if err := syscall.Listen(fd, 1); err != nil {
		t.Fatal(err)
	}
	nfd, _, err := syscall.Accept(fd)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(nfd)
	<-done
}
