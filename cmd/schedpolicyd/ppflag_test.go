package main

import (
	"flag"
	"io"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
)

// TestPowerProfilesFlag: --power-profiles-api alone is true (as when it was
// a boolean flag), =auto/=true/=false/=on/=off set the mode, anything else
// is an error.
func TestPowerProfilesFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
		bad  bool
	}{
		{nil, bus.PowerProfilesAuto, false},
		{[]string{"--power-profiles-api"}, bus.PowerProfilesServe, false},
		{[]string{"--power-profiles-api=auto"}, bus.PowerProfilesAuto, false},
		{[]string{"--power-profiles-api=false"}, bus.PowerProfilesOff, false},
		{[]string{"--power-profiles-api=on"}, bus.PowerProfilesServe, false},
		{[]string{"--power-profiles-api=maybe"}, "", true},
	} {
		v := DefaultPowerProfilesAPI
		fl := flag.NewFlagSet("t", flag.ContinueOnError)
		fl.SetOutput(io.Discard)
		fl.Var((*ppFlag)(&v), "power-profiles-api", "")
		err := fl.Parse(tc.args)
		if tc.bad {
			if err == nil {
				t.Errorf("%v accepted", tc.args)
			}
			continue
		}
		if err != nil || v != tc.want {
			t.Errorf("%v: %q, %v; want %q", tc.args, v, err, tc.want)
		}
	}
}
