package sysfs

import (
	"errors"
	"path/filepath"
	"strconv"
	"testing"
)

// TestParseError: a file that is there but malformed gives a *ParseError
// naming that file, whose cause stays reachable with errors.Is, and whose
// text is "parse <file>: <cause>".
func TestParseError(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"int":                       "7.2 W\n",
		"devices/system/cpu/online": "\n",
	})
	fsys, err := NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		read  func() error
		path  string
		cause error // errors.Is target; nil: none beyond the ParseError
		text  string
	}{
		{"ReadIntAttr", func() error { _, err := ReadIntAttr(filepath.Join(dir, "int")); return err },
			"int", strconv.ErrSyntax, `parse ` + filepath.Join(dir, "int") + `: strconv.ParseInt: parsing "7.2 W": invalid syntax`},
		{"CPUTopology", func() error { _, err := fsys.CPUTopology(); return err },
			"devices/system/cpu/online", nil, `parse ` + filepath.Join(dir, "devices/system/cpu/online") + `: no online CPUs`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.read()
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v (%T), want a *ParseError", err, err)
			}
			if want := filepath.Join(dir, tt.path); pe.Path != want {
				t.Errorf("Path = %q, want %q", pe.Path, want)
			}
			if tt.cause != nil && !errors.Is(err, tt.cause) {
				t.Errorf("err = %v, want errors.Is %v", err, tt.cause)
			}
			if err.Error() != tt.text {
				t.Errorf("err = %q, want %q", err.Error(), tt.text)
			}
		})
	}
}
