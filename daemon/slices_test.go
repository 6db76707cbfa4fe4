package daemon

import (
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

func TestCheckSlices(t *testing.T) {
	ps := policy.SliceRule{Policy: policy.Powersaving}
	tests := []struct {
		rules  map[string]policy.SliceRule
		manage []string
		want   string // "" for accepted
	}{
		{nil, nil, ""},
		{map[string]policy.SliceRule{"system.slice": ps}, nil, ""}, // DefaultManage
		{map[string]policy.SliceRule{"background.slice": ps}, []string{"schedpolicyd.slice", "background.slice"}, ""},
		{map[string]policy.SliceRule{"background.slice": ps}, nil, ""}, // DefaultManage since issue 34
		// The default manage lists the users' slices since issue 34.
		{map[string]policy.SliceRule{"batch.slice": ps}, nil, "slice batch.slice: not in manage (schedpolicyd.slice, system.slice, app.slice, background.slice, session.slice): its rule would never apply"},
		{map[string]policy.SliceRule{"cron.service": ps}, []string{"cron.service"}, `slice "cron.service": not the name of a slice (NAME.slice)`},
		{map[string]policy.SliceRule{"system.slice": {Policy: policy.Performance}}, nil, `slice system.slice: policy "performance": want balance or powersaving`},
		{map[string]policy.SliceRule{"system.slice": {}}, nil, `slice system.slice: policy "": want balance or powersaving`},
	}
	for _, tt := range tests {
		err := placement.CheckSlices(tt.rules, tt.manage)
		if got := errString(err); got != tt.want {
			t.Errorf("checkSlices(%v, %v) = %q, want %q", tt.rules, tt.manage, got, tt.want)
		}
	}
	if got := placement.SliceRulesString(map[string]policy.SliceRule{"b.slice": ps, "a.slice": {Policy: policy.Balance, Always: true}}); got != "a.slice=balance+always b.slice=powersaving" {
		t.Errorf("sliceRulesString = %q", got)
	}
	if got := placement.SliceRulesString(nil); got != "none" {
		t.Errorf("sliceRulesString(nil) = %q", got)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
