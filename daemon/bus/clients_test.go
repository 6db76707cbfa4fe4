package bus

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/policy"
)

// TestBusRealClients talks to the service with the three command-line
// clients people use: busctl (systemd), gdbus (GLib) and dbus-send. Reads
// show the daemon's snapshot, a value the daemon refuses is InvalidArgs
// from every client and changes nothing, and a good one reaches the
// daemon from each.
func TestBusRealClients(t *testing.T) {
	for _, tool := range []string{"busctl", "gdbus", "dbus-send"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (Debian packages systemd, libglib2.0-bin, dbus)", tool)
		}
	}
	st := startService(t, "", Config{})
	addr := st.addr
	run := func(name string, args ...string) (string, error) {
		out, err := exec.Command(name, args...).CombinedOutput()
		return string(out), err
	}
	// Reads.
	if out, err := run("busctl", "--address="+addr, "get-property", Name, string(ObjectPath), Interface, "ActivePolicy", "OnBattery"); err != nil || out != "s \"performance\"\nb false\n" {
		t.Errorf("busctl get-property: %v %q", err, out)
	}
	out, err := run("gdbus", "call", "--address", addr, "--dest", Name, "--object-path", string(ObjectPath),
		"--method", "org.freedesktop.DBus.Properties.GetAll", Interface)
	if err != nil || !strings.Contains(out, "'ActivePolicy': <'performance'>") || !strings.Contains(out, "'PowerAware': <uint32 1>") {
		t.Errorf("gdbus GetAll: %v %q", err, out)
	}
	out, err = run("gdbus", "introspect", "--address", addr, "--dest", Name, "--object-path", string(ObjectPath))
	if err != nil || !strings.Contains(out, "SetPolicy(in  s policy);") || !strings.Contains(out, "readwrite u PowerAware") {
		t.Errorf("gdbus introspect: %v\n%s", err, out)
	}
	if out, err := run("dbus-send", "--bus="+addr, "--print-reply", "--dest="+Name, string(ObjectPath),
		"org.freedesktop.DBus.Properties.Get", "string:"+Interface, "string:PowerSource"); err != nil || !strings.Contains(out, `string "ac"`) {
		t.Errorf("dbus-send Get: %v %q", err, out)
	}
	// A bad value: InvalidArgs from every client, nothing changes.
	if out, err := run("gdbus", "call", "--address", addr, "--dest", Name, "--object-path", string(ObjectPath),
		"--method", Interface+".SetPolicy", "bogus"); err == nil || !strings.Contains(out, "org.freedesktop.DBus.Error.InvalidArgs") {
		t.Errorf("gdbus SetPolicy bogus: %v %q", err, out)
	}
	if out, err := run("dbus-send", "--bus="+addr, "--print-reply", "--dest="+Name, string(ObjectPath),
		Interface+".SetPolicy", "string:Performance"); err == nil || !strings.Contains(out, "org.freedesktop.DBus.Error.InvalidArgs") {
		t.Errorf("dbus-send SetPolicy Performance: %v %q", err, out)
	}
	if k := st.f.Published().Knob; k.PowerAware != policy.PowerAwareAuto {
		t.Fatalf("rejected calls changed the knob: %+v", k)
	}
	st.f.waitCalls(t, `WriteKnob current_sched_policy "bogus" dbus`, `WriteKnob current_sched_policy "Performance" dbus`)
	// A good value through each client.
	want := []string{`WriteKnob current_sched_policy "bogus" dbus`, `WriteKnob current_sched_policy "Performance" dbus`}
	for _, c := range []struct {
		name string
		args []string
		want policy.Policy
	}{
		{"busctl", []string{"--address=" + addr, "call", Name, string(ObjectPath), Interface, "SetPolicy", "s", "balance"}, policy.Balance},
		{"gdbus", []string{"call", "--address", addr, "--dest", Name, "--object-path", string(ObjectPath), "--method", Interface + ".SetPolicy", "powersaving"}, policy.Powersaving},
		{"dbus-send", []string{"--bus=" + addr, "--print-reply", "--dest=" + Name, string(ObjectPath), Interface + ".SetPolicy", "string:performance"}, policy.Performance},
	} {
		if out, err := run(c.name, c.args...); err != nil {
			t.Errorf("%s SetPolicy: %v %q", c.name, err, out)
		}
		want = append(want, `WriteKnob current_sched_policy "`+string(c.want)+`" dbus`)
		st.f.waitCalls(t, want...)
		if got := st.f.Published().Policy; got != c.want {
			t.Errorf("after %s: policy %s, want %s", c.name, got, c.want)
		}
	}
}
