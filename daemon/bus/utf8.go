package bus

// Every string the daemon puts on D-Bus is valid UTF-8 without NUL, as
// the wire format requires: a message with another string is refused
// (godbus does not encode it: a reply becomes the error "destination
// tried to respond with invalid message", a signal is never sent), so one
// workload whose cgroup is called "caf\xe9" once broke GetAll for every
// client. Names the daemon does not choose are published escaped where
// they are made (snapshot.Escape; the cgroupfs back end's workload
// names); cleanOutgoing is the last line of defence on the connection,
// for every other string (a power supply's name that a reason quotes, an
// error's text, a path): whatever the daemon replies, signals or answers
// in error reaches the bus, with such a string escaped as snapshot.Escape
// does it.

import (
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
)

// busString is s as it goes on the bus: s itself when it is valid UTF-8
// without NUL (the D-Bus type system's rule), else its published form
// (snapshot.Escape), which is. A last resort, not a name's published
// form: a valid s that contains `\x` is kept, so the result does not
// always tell s from such a string (names are escaped where they are
// made, with Escape alone).
func busString(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return snapshot.Escape(s)
}

// cleanOutgoing makes msg fit for the bus; the connection's outgoing
// interceptor (dbus.WithOutgoingInterceptor, fastProps.outgoing) calls it
// for every message. In every method reply, error and signal it replaces a string that cannot go on the bus by busString's, in the
// body's values as godbus encodes them (strings, variants, arrays, maps
// and their keys, structs' exported fields), without modifying them: what
// changes is copied, the body shared with the caller stays as it was.
// The body's signature does not change. Method calls the daemon makes
// (polkit, the bus, systemd) are left as they are: escaping would change
// what they ask for.
func cleanOutgoing(msg *dbus.Message) {
	if msg.Type == dbus.TypeMethodCall || len(msg.Body) == 0 {
		return
	}
	if body, changed := cleanBody(msg.Body); changed {
		msg.Body = body
	}
}

// cleanBody is body with every string busString's, and whether anything
// changed; body is never modified (a change copies it).
func cleanBody(body []any) ([]any, bool) {
	var out []any
	for i, v := range body {
		if c, changed := cleanAny(v, 0); changed {
			if out == nil {
				out = append([]any(nil), body...)
			}
			out[i] = c
		}
	}
	if out == nil {
		return body, false
	}
	return out, true
}

// maxDepth bounds the nesting cleanAny follows: the D-Bus limit of 32
// arrays and 32 structs (godbus refuses to encode deeper values anyway).
const maxDepth = 64

// cleanAny is cleanBody for one value: v, false when nothing in it needs
// escaping, else a copy with what needed it escaped, true.
func cleanAny(v any, depth int) (any, bool) {
	switch x := v.(type) {
	case nil, bool, byte, int16, uint16, int32, uint32, int64, uint64, float64,
		dbus.ObjectPath, dbus.Signature, dbus.UnixFD, dbus.UnixFDIndex:
		// An ObjectPath that is not valid is refused by godbus whatever
		// is done here; escaping would not make it valid.
		return v, false
	case string:
		s := busString(x)
		return s, s != x
	case dbus.Variant:
		return cleanVariant(x, depth)
	case []string:
		var out []string
		for i, s := range x {
			if c := busString(s); c != s {
				if out == nil {
					out = append([]string(nil), x...)
				}
				out[i] = c
			}
		}
		if out == nil {
			return v, false
		}
		return out, true
	case map[string]dbus.Variant:
		return cleanVariantMap(x, depth)
	case []workloadEntry:
		// The largest value published, in every PropertiesChanged that
		// carries the Workloads: without reflection.
		return cleanWorkloads(x)
	}
	if depth >= maxDepth {
		return v, false
	}
	rv := reflect.ValueOf(v)
	if !mayHoldString(rv.Type()) {
		return v, false
	}
	c, changed := cleanValue(rv, depth+1)
	if !changed {
		return v, false
	}
	return c.Interface(), true
}

// cleanVariant is cleanAny for a Variant: its value cleaned, under the
// same signature.
func cleanVariant(x dbus.Variant, depth int) (any, bool) {
	c, changed := cleanAny(x.Value(), depth+1)
	if !changed {
		return x, false
	}
	return dbus.MakeVariantWithSignature(c, x.Signature()), true
}

// cleanVariantMap is cleanAny for an a{sv}, the type of GetAll's reply,
// PropertiesChanged's changes and the power-profiles dictionaries.
func cleanVariantMap(x map[string]dbus.Variant, depth int) (any, bool) {
	var out map[string]dbus.Variant
	for k, val := range x {
		ck := busString(k)
		cv, changed := cleanVariant(val, depth)
		if ck == k && !changed {
			continue
		}
		if out == nil {
			out = make(map[string]dbus.Variant, len(x))
			for k2, v2 := range x {
				out[k2] = v2
			}
		}
		if ck != k {
			delete(out, k)
		}
		out[ck] = cv.(dbus.Variant)
	}
	if out == nil {
		return x, false
	}
	return out, true
}

// cleanWorkloads is cleanAny for the Workloads property.
func cleanWorkloads(ws []workloadEntry) (any, bool) {
	var out []workloadEntry
	for i, w := range ws {
		c := w
		c.Name, c.Path, c.CPUs, c.Override, c.Class = busString(w.Name), busString(w.Path), busString(w.CPUs), busString(w.Override), busString(w.Class)
		if c.Name == w.Name && c.Path == w.Path && c.CPUs == w.CPUs && c.Override == w.Override && c.Class == w.Class {
			continue
		}
		if out == nil {
			out = append([]workloadEntry(nil), ws...)
		}
		out[i] = c
	}
	if out == nil {
		return ws, false
	}
	return out, true
}

var variantType = reflect.TypeFor[dbus.Variant]()

// cleanValue is cleanAny for a value of any other type godbus encodes,
// by reflection: it returns v, false, or a new value of v's type.
func cleanValue(v reflect.Value, depth int) (reflect.Value, bool) {
	t := v.Type()
	if depth >= maxDepth || !mayHoldString(t) {
		return v, false
	}
	switch t.Kind() {
	case reflect.String:
		s := v.String()
		c := busString(s)
		if c == s {
			return v, false
		}
		return reflect.ValueOf(c).Convert(t), true
	case reflect.Interface:
		if v.IsNil() {
			return v, false
		}
		c, changed := cleanAny(v.Elem().Interface(), depth)
		if !changed {
			return v, false
		}
		n := reflect.New(t).Elem()
		n.Set(reflect.ValueOf(c))
		return n, true
	case reflect.Pointer:
		if v.IsNil() {
			return v, false
		}
		c, changed := cleanValue(v.Elem(), depth+1)
		if !changed {
			return v, false
		}
		n := reflect.New(t.Elem())
		n.Elem().Set(c)
		return n, true
	case reflect.Slice, reflect.Array:
		var out reflect.Value
		for i := range v.Len() {
			c, changed := cleanValue(v.Index(i), depth+1)
			if !changed {
				continue
			}
			if !out.IsValid() {
				if t.Kind() == reflect.Slice {
					out = reflect.MakeSlice(t, v.Len(), v.Len())
				} else {
					out = reflect.New(t).Elem()
				}
				reflect.Copy(out, v)
			}
			out.Index(i).Set(c)
		}
		if !out.IsValid() {
			return v, false
		}
		return out, true
	case reflect.Map:
		var out reflect.Value
		iter := v.MapRange()
		for iter.Next() {
			ck, kc := cleanValue(iter.Key(), depth+1)
			cv, vc := cleanValue(iter.Value(), depth+1)
			if !kc && !vc {
				continue
			}
			if !out.IsValid() {
				out = reflect.MakeMapWithSize(t, v.Len())
				all := v.MapRange()
				for all.Next() {
					out.SetMapIndex(all.Key(), all.Value())
				}
			}
			if kc {
				out.SetMapIndex(iter.Key(), reflect.Value{})
			}
			out.SetMapIndex(ck, cv)
		}
		if !out.IsValid() {
			return v, false
		}
		return out, true
	case reflect.Struct:
		if t == variantType {
			c, changed := cleanVariant(v.Interface().(dbus.Variant), depth)
			if !changed {
				return v, false
			}
			return reflect.ValueOf(c), true
		}
		var out reflect.Value
		for i := range t.NumField() {
			if !t.Field(i).IsExported() {
				continue
			}
			c, changed := cleanValue(v.Field(i), depth+1)
			if !changed {
				continue
			}
			if !out.IsValid() {
				out = reflect.New(t).Elem()
				out.Set(v)
			}
			out.Field(i).Set(c)
		}
		if !out.IsValid() {
			return v, false
		}
		return out, true
	}
	return v, false
}

// stringFree caches mayHoldString's answers by type.
var stringFree sync.Map // reflect.Type → bool (true: holds no string)

var (
	objectPathType = reflect.TypeFor[dbus.ObjectPath]()
	signatureType  = reflect.TypeFor[dbus.Signature]()
)

// mayHoldString reports whether a value of type t can hold a string
// godbus encodes (so that the Topology's (uuuu) entries are not walked at
// all). A type that refers to itself counts as one that may.
func mayHoldString(t reflect.Type) bool {
	if free, ok := stringFree.Load(t); ok {
		return !free.(bool)
	}
	may := holdsString(t, map[reflect.Type]bool{})
	stringFree.Store(t, !may)
	return may
}

// holdsString is mayHoldString's walk; inside holds the types it is in
// the middle of.
func holdsString(t reflect.Type, inside map[reflect.Type]bool) bool {
	if t == objectPathType || t == signatureType {
		return false
	}
	if inside[t] {
		return true
	}
	inside[t] = true
	defer delete(inside, t)
	switch t.Kind() {
	case reflect.String, reflect.Interface:
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return holdsString(t.Elem(), inside)
	case reflect.Map:
		return holdsString(t.Key(), inside) || holdsString(t.Elem(), inside)
	case reflect.Struct:
		if t == variantType {
			return true
		}
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && holdsString(f.Type, inside) {
				return true
			}
		}
	}
	return false
}
