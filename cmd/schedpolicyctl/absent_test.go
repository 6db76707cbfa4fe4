package main

import (
	"errors"
	"testing"

	"github.com/godbus/dbus/v5"
)

// TestDecodeAbsentProperty: a list property the daemon did not send (an
// older or a broken daemon; the zero Variant of a missing map entry) is
// an error for every decoder, never a panic.
func TestDecodeAbsentProperty(t *testing.T) {
	var absent dbus.Variant
	if _, err := workloadsFrom(absent); !errors.Is(err, errNoProperty) {
		t.Errorf("workloadsFrom: %v", err)
	}
	if _, err := holdsFrom(absent); !errors.Is(err, errNoProperty) {
		t.Errorf("holdsFrom: %v", err)
	}
	if _, err := energyFrom(absent); !errors.Is(err, errNoProperty) {
		t.Errorf("energyFrom: %v", err)
	}
	if _, err := topologyFrom(absent); !errors.Is(err, errNoProperty) {
		t.Errorf("topologyFrom: %v", err)
	}
	if _, err := classesFrom(absent); !errors.Is(err, errNoProperty) {
		t.Errorf("classesFrom: %v", err)
	}
}
