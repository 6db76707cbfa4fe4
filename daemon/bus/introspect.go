package bus

import (
	"strings"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"
)

// introspectable serves the committed XML plus the standard interfaces.
type introspectable string

func (x introspectable) Introspect() (string, *dbus.Error) {
	body := string(x)
	i := strings.Index(body, "<node>")
	j := strings.LastIndex(body, "</node>")
	if i < 0 || j < 0 {
		return "", errBadIntrospection
	}
	std := introspect.IntrospectDataString + `<interface name="org.freedesktop.DBus.Properties">
  <method name="Get"><arg name="interface" type="s" direction="in"/><arg name="property" type="s" direction="in"/><arg name="value" type="v" direction="out"/></method>
  <method name="GetAll"><arg name="interface" type="s" direction="in"/><arg name="props" type="a{sv}" direction="out"/></method>
  <method name="Set"><arg name="interface" type="s" direction="in"/><arg name="property" type="s" direction="in"/><arg name="value" type="v" direction="in"/></method>
  <signal name="PropertiesChanged"><arg name="interface" type="s"/><arg name="changed_properties" type="a{sv}"/><arg name="invalidated_properties" type="as"/></signal>
</interface>
<interface name="org.freedesktop.DBus.Peer">
  <method name="Ping"/>
  <method name="GetMachineId"><arg name="machine_uuid" type="s" direction="out"/></method>
</interface>
`
	return `<!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN" "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
<node>
` + std + body[i+len("<node>"):j] + "</node>\n", nil
}
