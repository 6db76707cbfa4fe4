package main

import (
	"flag"
	"io"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon"
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
		{nil, daemon.PowerProfilesAuto, false},
		{[]string{"--power-profiles-api"}, daemon.PowerProfilesServe, false},
		{[]string{"--power-profiles-api=auto"}, daemon.PowerProfilesAuto, false},
		{[]string{"--power-profiles-api=false"}, daemon.PowerProfilesOff, false},
		{[]string{"--power-profiles-api=on"}, daemon.PowerProfilesServe, false},
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
