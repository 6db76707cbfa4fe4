package bus

import (
	"sync"

	"github.com/godbus/dbus/v5"
)

// propExporter serves org.freedesktop.DBus.Properties for one D-Bus
// interface whose values the daemon computes from each published
// snapshot, at one or more places (object path and interface name; the
// power-profiles API is one interface under two names), and emits
// PropertiesChanged for it. Both Interface and the power-profiles API use
// it.
//
// It is ours rather than godbus's prop package because that package
// cannot keep the contract of daemon/bus/org.schedpolicyd.SchedPolicy1.xml:
// its Set callback is given neither the message nor the sender, which
// authorisation (polkit, interactive or not) needs; it emits one
// PropertiesChanged per property on every set, changed or not, where
// clients here get one signal per publication carrying every property
// that changed and none when nothing did; its errors are
// org.freedesktop.DBus.Properties.Error.*, not the
// org.freedesktop.DBus.Error.UnknownProperty, UnknownInterface,
// PropertyReadOnly and InvalidArgs that clients (schedpolicyctl among
// them) are told to expect; and it keeps its own copy of every value,
// stored by reflection on each set, where a published list is shared and
// compared in O(1).
type propExporter struct {
	conn   *dbus.Conn
	places []propPlace
	// names holds every property, to tell a read-only one from an unknown.
	names map[string]bool
	// variants returns the current values for Get and GetAll; the map may
	// be shared and is only read.
	variants func() map[string]dbus.Variant
	setters  map[string]propSetter

	mu   sync.Mutex // guards last
	last map[string]any
}

// propPlace is one object path and interface name the properties are
// served at.
type propPlace struct {
	path  dbus.ObjectPath
	iface string
}

// propSetter writes one writable property for the caller of Set on the
// interface name iface (one of the exporter's places): it checks v's type
// and value, authorises the sender, and returns the error to answer with
// (InvalidArgs, AccessDenied, ...), nil once written.
type propSetter func(msg dbus.Message, sender dbus.Sender, iface string, v dbus.Variant) *dbus.Error

// newPropExporter returns the exporter of the properties in initial (the
// values last published; its keys are every property there is) at places.
// Properties with a setter are writable, the others read-only.
func newPropExporter(conn *dbus.Conn, places []propPlace, initial map[string]any, variants func() map[string]dbus.Variant, setters map[string]propSetter) *propExporter {
	names := make(map[string]bool, len(initial))
	for k := range initial {
		names[k] = true
	}
	return &propExporter{conn: conn, places: places, names: names, variants: variants, setters: setters, last: initial}
}

// handler is the org.freedesktop.DBus.Properties object to export at the
// path of the place named iface.
func (e *propExporter) handler(iface string) propsHandler {
	return propsHandler{e: e, iface: iface}
}

// publish records vals as the published values and emits, at every place,
// one PropertiesChanged carrying each property whose value differs from
// the last published one (equalValue), none when nothing changed. It
// returns the values published before.
func (e *propExporter) publish(vals map[string]any) (prev map[string]any) {
	e.mu.Lock()
	changed := map[string]dbus.Variant{}
	for name, v := range vals {
		if !equalValue(e.last[name], v) {
			changed[name] = dbus.MakeVariant(v)
		}
	}
	prev, e.last = e.last, vals
	e.mu.Unlock()
	if len(changed) > 0 {
		for _, p := range e.places {
			e.conn.Emit(p.path, propsIface+".PropertiesChanged", p.iface, changed, []string{})
		}
	}
	return prev
}

// propsHandler serves org.freedesktop.DBus.Properties for the place of
// one interface name.
type propsHandler struct {
	e     *propExporter
	iface string
}

// Get returns one property: UnknownInterface for another interface,
// UnknownProperty for a name it does not have.
func (h propsHandler) Get(iface, name string) (dbus.Variant, *dbus.Error) {
	if iface != h.iface {
		return dbus.Variant{}, unknownInterface(iface)
	}
	v, ok := h.e.variants()[name]
	if !ok {
		return dbus.Variant{}, unknownProperty(name)
	}
	return v, nil
}

// GetAll returns every property ("" means this interface too), or
// UnknownInterface.
func (h propsHandler) GetAll(iface string) (map[string]dbus.Variant, *dbus.Error) {
	if iface != h.iface && iface != "" {
		return nil, unknownInterface(iface)
	}
	// The map may be shared: godbus only reads it to encode the reply.
	return h.e.variants(), nil
}

// Set writes a writable property through its setter; UnknownInterface for
// another interface, PropertyReadOnly for a property without a setter,
// UnknownProperty for a name it does not have.
func (h propsHandler) Set(msg dbus.Message, sender dbus.Sender, iface, name string, v dbus.Variant) *dbus.Error {
	if iface != h.iface {
		return unknownInterface(iface)
	}
	if set, ok := h.e.setters[name]; ok {
		return set(msg, sender, h.iface, v)
	}
	if !h.e.names[name] {
		return unknownProperty(name)
	}
	return propertyReadOnly(name)
}
