package acpi

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// Captured from a kernel (the format of lib/kobject_uevent.c and
// power_supply_uevent in drivers/power/supply/power_supply_sysfs.c), with
// SEQNUMs shortened.
const (
	acChange = "change@/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0003:00/power_supply/AC\x00" +
		"ACTION=change\x00DEVPATH=/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0003:00/power_supply/AC\x00" +
		"SUBSYSTEM=power_supply\x00POWER_SUPPLY_NAME=AC\x00POWER_SUPPLY_TYPE=Mains\x00POWER_SUPPLY_ONLINE=0\x00SEQNUM=4242\x00"
	cpuOffline = "offline@/devices/system/cpu/cpu1\x00ACTION=offline\x00DEVPATH=/devices/system/cpu/cpu1\x00SUBSYSTEM=cpu\x00SEQNUM=17\x00"
)

func TestParseUevent(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Uevent
		wantErr string // substring; "" means success
	}{
		// Success.
		{
			name: "AC adapter change",
			in:   acChange,
			want: Uevent{Action: "change", DevPath: "/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0003:00/power_supply/AC", Subsystem: "power_supply", Env: map[string]string{
				"ACTION": "change", "DEVPATH": "/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0003:00/power_supply/AC",
				"SUBSYSTEM": "power_supply", "POWER_SUPPLY_NAME": "AC", "POWER_SUPPLY_TYPE": "Mains",
				"POWER_SUPPLY_ONLINE": "0", "SEQNUM": "4242",
			}},
		},
		{
			name: "CPU offline",
			in:   cpuOffline,
			want: Uevent{Action: "offline", DevPath: "/devices/system/cpu/cpu1", Subsystem: "cpu", Env: map[string]string{
				"ACTION": "offline", "DEVPATH": "/devices/system/cpu/cpu1", "SUBSYSTEM": "cpu", "SEQNUM": "17",
			}},
		},
		{
			name: "no trailing NUL, value containing =",
			in:   "add@/module/foo\x00SUBSYSTEM=module\x00ARGS=a=b",
			want: Uevent{Action: "add", DevPath: "/module/foo", Subsystem: "module", Env: map[string]string{"SUBSYSTEM": "module", "ARGS": "a=b"}},
		},
		{
			name: "header only: no subsystem",
			in:   "remove@/devices/virtual/foo\x00",
			want: Uevent{Action: "remove", DevPath: "/devices/virtual/foo", Env: map[string]string{}},
		},
		// Failure.
		{name: "empty", in: "", wantErr: "empty message"},
		{name: "udev group message", in: "libudev\x00\xfe\xed\xca\xfe\x00\x00\x00\x28", wantErr: "udev monitor message"},
		{name: "header-less variables", in: "ACTION=change\x00SUBSYSTEM=power_supply\x00", wantErr: "not ACTION@DEVPATH"},
		{name: "empty action", in: "@/devices/x\x00", wantErr: "bad action"},
		{name: "relative devpath", in: "change@devices/x\x00", wantErr: "does not start with /"},
		{name: "variable without =", in: "change@/devices/x\x00SUBSYSTEM\x00", wantErr: "not KEY=VALUE"},
		{name: "empty key", in: "change@/devices/x\x00=cpu\x00", wantErr: "not KEY=VALUE"},
		{name: "ACTION contradicts header", in: "change@/devices/x\x00ACTION=add\x00", wantErr: "contradicts header"},
		{name: "DEVPATH contradicts header", in: "change@/devices/x\x00DEVPATH=/devices/y\x00", wantErr: "contradicts header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseUevent([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !reflect.DeepEqual(tt.want, got) {
				t.Fatalf("\nwant %+v\ngot  %+v", tt.want, got)
			}
		})
	}
}

func TestParseUeventUdevSentinel(t *testing.T) {
	_, err := ParseUevent([]byte("libudev\x00rest"))
	if !errors.Is(err, ErrUdevMessage) {
		t.Fatalf("err = %v, want ErrUdevMessage", err)
	}
}

// FuzzParseUevent checks that ParseUevent never panics, that what it
// accepts satisfies its documented invariants, and that re-encoding an
// accepted event parses back to the same value.
func FuzzParseUevent(f *testing.F) {
	f.Add([]byte(acChange))
	f.Add([]byte(cpuOffline))
	f.Add([]byte("libudev\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := ParseUevent(b)
		if err != nil {
			return
		}
		if ev.Action == "" || strings.ContainsAny(ev.Action, "=") || !strings.HasPrefix(ev.DevPath, "/") {
			t.Fatalf("accepted bad header: %+v", ev)
		}
		if ev.Subsystem != ev.Env["SUBSYSTEM"] {
			t.Fatalf("Subsystem %q != SUBSYSTEM %q", ev.Subsystem, ev.Env["SUBSYSTEM"])
		}
		var sb strings.Builder
		sb.WriteString(ev.Action + "@" + ev.DevPath + "\x00")
		for k, v := range ev.Env {
			sb.WriteString(k + "=" + v + "\x00")
		}
		again, err := ParseUevent([]byte(sb.String()))
		if err != nil {
			t.Fatalf("re-encoded %q: %v", sb.String(), err)
		}
		if !reflect.DeepEqual(ev, again) {
			t.Fatalf("round trip:\n%+v\n%+v", ev, again)
		}
	})
}
