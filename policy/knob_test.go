package policy

import (
	"errors"
	"fmt"
	"testing"
)

// TestEffectiveEveryCombination covers every power_aware × power_aware_policy
// × power source combination (README.md's opening and "The tree"; unknown
// counts as AC).
func TestEffectiveEveryCombination(t *testing.T) {
	tests := []struct {
		aware  PowerAware
		pap    Policy
		source string
		want   Policy
	}{
		// 0: always performance.
		{0, Balance, "ac", Performance},
		{0, Balance, "battery", Performance},
		{0, Balance, "unknown", Performance},
		{0, Powersaving, "ac", Performance},
		{0, Powersaving, "battery", Performance},
		{0, Powersaving, "unknown", Performance},
		// 1: power-aware only on positive battery evidence.
		{1, Balance, "ac", Performance},
		{1, Balance, "battery", Balance},
		{1, Balance, "unknown", Performance}, // unknown counts as AC
		{1, Powersaving, "ac", Performance},
		{1, Powersaving, "battery", Powersaving},
		{1, Powersaving, "unknown", Performance}, // unknown counts as AC
		// 2: always the power-aware policy.
		{2, Balance, "ac", Balance},
		{2, Balance, "battery", Balance},
		{2, Balance, "unknown", Balance},
		{2, Powersaving, "ac", Powersaving},
		{2, Powersaving, "battery", Powersaving},
		{2, Powersaving, "unknown", Powersaving},
	}
	if len(tests) != 3*2*3 {
		t.Fatalf("table has %d rows, want all 18 combinations", len(tests))
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d/%s/%s", tt.aware, tt.pap, tt.source), func(t *testing.T) {
			k := Knob{PowerAware: tt.aware, PowerAwarePolicy: tt.pap}
			if err := k.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := k.Effective(tt.source); got != tt.want {
				t.Errorf("Effective(%q) = %q, want %q", tt.source, got, tt.want)
			}
		})
	}
}

func TestDefaultKnob(t *testing.T) {
	k := DefaultKnob()
	if k.PowerAware != PowerAwareAuto || k.PowerAwarePolicy != Powersaving {
		t.Fatalf("DefaultKnob() = %+v, want {1 powersaving}", k)
	}
}

func TestWithCurrentPolicy(t *testing.T) {
	tests := []struct {
		name  string
		start Knob
		write Policy
		want  Knob
	}{
		{"performance keeps the power-aware policy", Knob{1, Balance}, Performance, Knob{0, Balance}},
		{"balance forces mode 2", Knob{0, Powersaving}, Balance, Knob{2, Balance}},
		{"powersaving forces mode 2", Knob{1, Balance}, Powersaving, Knob{2, Powersaving}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.start.WithCurrentPolicy(tt.write)
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			if eff := got.Effective("ac"); eff != tt.write {
				t.Errorf("after writing %q the effective policy on AC is %q", tt.write, eff)
			}
		})
	}
}

func TestScanToken(t *testing.T) {
	big := make([]byte, MaxWrite+1)
	for i := range big {
		big[i] = 'a'
	}
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		// accepted like sscanf("%15s")
		{"powersaving\n", "powersaving", false},
		{"  balance  \n", "balance", false},
		{"balance junk", "balance", false}, // extra tokens ignored
		{"\tperformance", "performance", false},
		{"Performance", "Performance", false}, // token ok; ParsePolicy rejects case
		// rejected
		{"", "", true},
		{"   \n", "", true},
		{"aaaaaaaaaaaaaaaa", "", true}, // 16 bytes > %15s
		{"bal\x00ance", "", true},
		{string(big), "", true},
	}
	for _, tt := range tests {
		got, err := ScanToken([]byte(tt.in))
		if tt.wantErr {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("ScanToken(%.20q) err = %v, want ErrInvalid", tt.in, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ScanToken(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestParsers(t *testing.T) {
	for _, s := range []string{"performance", "balance", "powersaving"} {
		if p, err := ParsePolicy(s); err != nil || string(p) != s {
			t.Errorf("ParsePolicy(%q) = %q, %v", s, p, err)
		}
	}
	for _, s := range []string{"", "Performance", "bogus", "performance "} {
		if _, err := ParsePolicy(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParsePolicy(%q) err = %v, want ErrInvalid", s, err)
		}
	}
	if _, err := ParsePowerAwarePolicy("performance"); !errors.Is(err, ErrInvalid) {
		t.Errorf("performance accepted as power_aware_policy")
	}
	for s, want := range map[string]PowerAware{"0": 0, "1": 1, "2": 2} {
		if got, err := ParsePowerAware(s); err != nil || got != want {
			t.Errorf("ParsePowerAware(%q) = %d, %v", s, got, err)
		}
	}
	for _, s := range []string{"3", "-1", "01", "on", ""} {
		if _, err := ParsePowerAware(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParsePowerAware(%q) accepted", s)
		}
	}
	if err := (Knob{3, Balance}).Validate(); !errors.Is(err, ErrInvalid) {
		t.Errorf("Validate accepted power_aware 3")
	}
	if err := (Knob{1, Performance}).Validate(); !errors.Is(err, ErrInvalid) {
		t.Errorf("Validate accepted power_aware_policy performance")
	}
}
