package bus

import (
	"encoding/binary"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// allStrings returns every string godbus would encode in v (by
// reflection, as it walks it).
func allStrings(v reflect.Value, out *[]string) {
	switch v.Kind() {
	case reflect.String:
		*out = append(*out, v.String())
	case reflect.Interface, reflect.Pointer:
		if !v.IsNil() {
			allStrings(v.Elem(), out)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			allStrings(v.Index(i), out)
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			allStrings(it.Key(), out)
			allStrings(it.Value(), out)
		}
	case reflect.Struct:
		if vr, ok := v.Interface().(dbus.Variant); ok {
			allStrings(reflect.ValueOf(vr.Value()), out)
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				allStrings(v.Field(i), out)
			}
		}
	}
}

// TestCleanBody: every string of a body, wherever godbus finds it (in a
// variant, an array, a dictionary's key or value, a struct's field, behind
// a pointer or an interface), is made valid for the bus; what is valid
// already is kept, the body given is not modified, the signature stays
// the same and godbus then encodes the message.
func TestCleanBody(t *testing.T) {
	type withHidden struct {
		Name   string
		hidden string // not encoded: kept as it is
	}
	name := bad
	for _, v := range []any{
		bad,
		[]string{"ok", bad},
		dbus.MakeVariant(bad),
		dbus.MakeVariant([]string{bad}),
		map[string]dbus.Variant{bad: dbus.MakeVariant(bad), "ok": dbus.MakeVariant(uint32(1))},
		[]map[string]dbus.Variant{{"Reason": dbus.MakeVariant(bad)}},
		[]workloadEntry{{Name: "a"}, {Name: bad, Path: "/cg/" + bad, CPUs: "0-1", Util: 0.5}},
		[]snapshot.Hold{{Cookie: 1, Policy: policy.Balance, Reason: bad, Owner: ":1.2", AppID: bad}},
		[]snapshot.CPUClassEntry{{Name: bad, CPUs: "0", Capacity: 1024}},
		[]any{uint32(1), bad},
		map[string]any{"k": bad},
		[2]string{bad, "ok"},
		&name,
		withHidden{Name: bad, hidden: bad},
		[]estimateEntry{{Policy: bad}},
		map[string][]string{bad: {bad}},
	} {
		body := []any{v, "ok"}
		before := fmt.Sprintf("%#v", body)
		out, changed := cleanBody(body)
		if !changed {
			t.Errorf("%#v: not changed", v)
			continue
		}
		if after := fmt.Sprintf("%#v", body); after != before {
			t.Errorf("cleanBody modified its body: %s, was %s", after, before)
		}
		if got, want := dbus.SignatureOf(out...), dbus.SignatureOf(body...); got != want {
			t.Errorf("%#v: signature %s, was %s", v, got, want)
		}
		var ss []string
		allStrings(reflect.ValueOf(out), &ss)
		for _, s := range ss {
			if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
				t.Errorf("%#v: %q left in %#v", v, s, out)
			}
		}
		if !slicesContain(ss, badOnBus) {
			t.Errorf("%#v: cleaned to %#v, no %q", v, out, badOnBus)
		}
		if h, ok := out[0].(withHidden); ok && h.hidden != bad {
			t.Errorf("an unexported field changed: %q", h.hidden)
		}
		msg := &dbus.Message{Type: dbus.TypeMethodReply, Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldReplySerial: dbus.MakeVariant(uint32(1)),
			dbus.FieldSignature:   dbus.MakeVariant(dbus.SignatureOf(body...)),
		}, Body: out}
		if _, isPtr := v.(*string); !isPtr { // godbus encodes a pointer's value, but its SignatureOf does not follow it
			if err := msg.IsValid(); err != nil {
				t.Errorf("%#v: godbus refuses the cleaned message: %v", v, err)
			}
		}
	}
	// Nothing to do: the same body back.
	for _, v := range []any{"ok", []string{"a"}, dbus.MakeVariant("é"), []workloadEntry{{Name: `back\slash`}}, []snapshot.TopologyEntry{{CPU: 1}}, dbus.ObjectPath("/a"), uint32(0)} {
		body := []any{v}
		if out, changed := cleanBody(body); changed || &out[0] != &body[0] {
			t.Errorf("%#v: changed to %#v", v, out)
		}
	}
}

func slicesContain(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// BenchmarkCleanWorkloads is what the outgoing interceptor costs a
// GetAll of 1,000 workloads, next to godbus's encoding of it
// (BenchmarkEncodeWorkloads); the fast path's replies are not walked
// (fastProps.outgoing), a PropertiesChanged is.
func BenchmarkCleanWorkloads(b *testing.B) {
	body := workloadsBody(1000)
	for b.Loop() {
		cleanBody(body)
	}
}

func BenchmarkEncodeWorkloads(b *testing.B) {
	msg := &dbus.Message{Type: dbus.TypeMethodReply, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldReplySerial: dbus.MakeVariant(uint32(1)), dbus.FieldSignature: sigGetAll}, Body: workloadsBody(1000)}
	for b.Loop() {
		msg.EncodeTo(io.Discard, binary.LittleEndian)
	}
}

// workloadsBody is GetAll's reply body with n workloads.
func workloadsBody(n int) []any {
	snap := snapshot.Snapshot{PolicyReason: "power_aware=1 (automatic) and no positive evidence of battery operation (power source ac): AC: Mains supply AC reports online=1 (rule 2)"}
	for i := range n {
		snap.Workloads = append(snap.Workloads, snapshot.WorkloadStatus{Name: fmt.Sprintf("workload-%d", i), Path: fmt.Sprintf("/sys/fs/cgroup/cpuset/schedpolicyd/workload-%d", i), CPUs: "0-7", Util: 0.5, Class: "workload"})
	}
	vars := map[string]dbus.Variant{}
	for k, v := range propertyValues(snap) {
		vars[k] = dbus.MakeVariant(v)
	}
	return []any{vars}
}
