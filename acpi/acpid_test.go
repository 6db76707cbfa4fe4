package acpi

import (
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

func TestParseAcpidEvent(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    AcpidEvent
		power   bool
		wantErr string
	}{
		// Lines acpid writes (acpid's netlink.c format; drivers/acpi/ac.c's
		// class, HID and event 0x80).
		{"AC unplugged", "ac_adapter ACPI0003:00 00000080 00000000\n",
			AcpidEvent{Class: "ac_adapter", BusID: "ACPI0003:00", Coded: true, Type: 0x80, Data: 0}, true, ""},
		{"AC plugged", "ac_adapter ACPI0003:00 00000080 00000001",
			AcpidEvent{Class: "ac_adapter", BusID: "ACPI0003:00", Coded: true, Type: 0x80, Data: 1}, true, ""},
		{"battery status", "battery PNP0C0A:00 00000080 00000001\n",
			AcpidEvent{Class: "battery", BusID: "PNP0C0A:00", Coded: true, Type: 0x80, Data: 1}, true, ""},
		{"battery info", "battery PNP0C0A:01 00000081 00000001\r\n",
			AcpidEvent{Class: "battery", BusID: "PNP0C0A:01", Coded: true, Type: 0x81, Data: 1}, true, ""},
		{"power button", "button/power PBTN 00000080 00000000",
			AcpidEvent{Class: "button/power", BusID: "PBTN", Coded: true, Type: 0x80}, false, ""},
		{"input-layer lid", "button/lid LID close",
			AcpidEvent{Class: "button/lid", BusID: "LID", Args: []string{"close"}}, false, ""},
		{"input-layer jack", "jack/headphone HEADPHONE plug",
			AcpidEvent{Class: "jack/headphone", BusID: "HEADPHONE", Args: []string{"plug"}}, false, ""},
		{"four fields, not hex", "ac_adapter ACPI0003:00 zz 1",
			AcpidEvent{Class: "ac_adapter", BusID: "ACPI0003:00", Args: []string{"zz", "1"}}, true, ""},
		// Failure.
		{"empty", "\n", AcpidEvent{}, false, "at least class and bus id"},
		{"class only", "ac_adapter", AcpidEvent{}, false, "at least class and bus id"},
		{"control character", "ac_adapter ACPI0003:00\x00 00000080 00000001", AcpidEvent{}, false, "control character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseAcpidEvent(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(tt.want, got) {
				t.Fatalf("\nwant %+v\ngot  %+v", tt.want, got)
			}
			if got.PowerHint() != tt.power {
				t.Fatalf("PowerHint() = %v, want %v", got.PowerHint(), tt.power)
			}
		})
	}
}

// FuzzParseAcpidEvent: never panics; accepted lines have a class and bus id
// without spaces, and Args only when not Coded.
func FuzzParseAcpidEvent(f *testing.F) {
	f.Add("ac_adapter ACPI0003:00 00000080 00000001\n")
	f.Add("button/lid LID close")
	f.Add("battery PNP0C0A:00 00000081 ffffffff")
	f.Fuzz(func(t *testing.T, line string) {
		ev, err := ParseAcpidEvent(line)
		if err != nil {
			return
		}
		if ev.Class == "" || ev.BusID == "" || strings.ContainsAny(ev.Class+ev.BusID, " \t\n") {
			t.Fatalf("bad fields: %+v", ev)
		}
		if ev.Coded && ev.Args != nil {
			t.Fatalf("coded event with args: %+v", ev)
		}
	})
}

// acpidServer is a stand-in for acpid: a real unix stream socket that
// writes lines to each client.
type acpidServer struct {
	path  string
	ln    net.Listener
	conns chan net.Conn
}

func newAcpidServer(t *testing.T) *acpidServer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "acpid.socket")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := &acpidServer{path: path, ln: ln, conns: make(chan net.Conn, 4)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns <- c
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return s
}

func (s *acpidServer) accept(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-s.conns:
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("monitor did not connect to the acpid socket")
	}
	return nil
}

// TestMonitorAcpid: an ac_adapter line on a real unix socket makes the
// monitor re-read (trigger "acpid"), whatever the line's data says; lines
// of other classes do not; when acpid goes away the monitor reconnects.
func TestMonitorAcpid(t *testing.T) {
	fsys := fixtureRoot(t, "ac-offline-battery-unknown")
	srv := newAcpidServer(t)
	m := NewMonitor(MonitorConfig{FS: fsys, Events: EventsNone, AcpidSocket: srv.path, Debounce: time.Millisecond, Settle: -1, Interval: -1, Log: testutil.Logger(t)})
	stop := runMonitor(t, m)
	defer stop()
	if st := recvState(t, m); st.Power.Source != Unknown {
		t.Fatalf("initial %+v", st)
	}
	c := srv.accept(t)

	// Not power: no re-read. Then a power line whose data claims AC
	// online: the re-read finds the battery discharging, which wins.
	testutil.WriteFile(t, fsys.Path("class/power_supply/BAT0/status"), "Discharging\n")
	if _, err := c.Write([]byte("button/lid LID close\njack/headphone HEADPHONE plug\nac_adapter ACPI0003:00 00000080 00000001\n")); err != nil {
		t.Fatal(err)
	}
	st := recvState(t, m)
	if st.Power.Source != Battery || st.Trigger != TriggerAcpid {
		t.Fatalf("after ac_adapter line: %+v", st)
	}
	if n := m.reads.Load(); n != 2 {
		t.Fatalf("%d reads, want 2: other classes must not cause re-reads", n)
	}

	// acpid restarts: the monitor reconnects and keeps listening.
	c.Close()
	c = srv.accept(t)
	testutil.WriteFile(t, fsys.Path("class/power_supply/BAT0/status"), "Charging\n")
	if _, err := c.Write([]byte("battery PNP0C0A:00 00000080 00000001\n")); err != nil {
		t.Fatal(err)
	}
	if st := recvState(t, m); st.Power.Source != AC || st.Trigger != TriggerAcpid {
		t.Fatalf("after reconnect: %+v", st)
	}
}
