package testutil

import (
	"testing"

	"github.com/godbus/dbus/v5"
)

// TestFakeUnitPath: a unit's object path escapes every byte outside
// [A-Za-z0-9] as _XX, as systemd does, and FakeUnitName undoes it; an
// underscore without two hexadecimal digits after it stays.
func TestFakeUnitPath(t *testing.T) {
	for name, want := range map[string]dbus.ObjectPath{
		"user@4242.service": "/org/freedesktop/systemd1/unit/user_404242_2eservice",
		"a_b-c.scope":       "/org/freedesktop/systemd1/unit/a_5fb_2dc_2escope",
		"caf\xe9.scope":     "/org/freedesktop/systemd1/unit/caf_e9_2escope",
	} {
		if got := FakeUnitPath(name); got != want {
			t.Errorf("FakeUnitPath(%q) = %s, want %s", name, got, want)
		}
		if got := FakeUnitName(want); got != name {
			t.Errorf("FakeUnitName(%s) = %q, want %q", want, got, name)
		}
	}
	if got := FakeUnitName(SystemdUnitPath + "/x_zz_2"); got != "x_zz_2" {
		t.Errorf("FakeUnitName of unescaped underscores = %q, want x_zz_2", got)
	}
}

// TestFakeUnitProps: GetAll answers the function's properties of the unit
// the object path names, Get one of them, or UnknownProperty; the
// function's error comes through both.
func TestFakeUnitProps(t *testing.T) {
	var asked []string
	props := FakeUnitProps(func(name, iface string) (map[string]dbus.Variant, *dbus.Error) {
		asked = append(asked, name+" "+iface)
		if name == "gone.service" {
			return nil, NoSuchUnit(name)
		}
		return map[string]dbus.Variant{"Slice": dbus.MakeVariant("a.slice")}, nil
	})
	msg := func(unit string) dbus.Message {
		return dbus.Message{Headers: map[dbus.HeaderField]dbus.Variant{dbus.FieldPath: dbus.MakeVariant(FakeUnitPath(unit))}}
	}
	const svc = "org.freedesktop.systemd1.Service"
	if all, err := props.GetAll(msg("a-b.service"), svc); err != nil || len(all) != 1 || all["Slice"].Value() != "a.slice" {
		t.Errorf("GetAll = %v, %v", all, err)
	}
	if v, err := props.Get(msg("a-b.service"), svc, "Slice"); err != nil || v.Value() != "a.slice" {
		t.Errorf("Get(Slice) = %v, %v", v, err)
	}
	if _, err := props.Get(msg("a-b.service"), svc, "MainPID"); err == nil || err.Name != "org.freedesktop.DBus.Error.UnknownProperty" {
		t.Errorf("Get(MainPID) = %v, want UnknownProperty", err)
	}
	if _, err := props.Get(msg("gone.service"), svc, "Slice"); err == nil || err.Name != "org.freedesktop.systemd1.NoSuchUnit" || err.Body[0] != "Unit gone.service not loaded." {
		t.Errorf("Get of a unit the function refuses = %v, want its NoSuchUnit", err)
	}
	if want := "a-b.service " + svc; len(asked) != 4 || asked[0] != want {
		t.Errorf("asked %q, want 4 asks, first %q", asked, want)
	}
}
