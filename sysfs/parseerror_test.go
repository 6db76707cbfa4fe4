package sysfs

import (
	"path/filepath"
	"strconv"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestParseError: a file that is there but malformed gives a *ParseError
// naming that file, whose cause stays reachable with errors.Is, and whose
// text is "parse <file>: <cause>".
func TestParseError(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteTree(t, dir, map[string]string{
		"int":                       "7.2 W\n",
		"devices/system/cpu/online": "\n",
	})
	fsys, err := NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	testutil.CheckParseErrors(t, dir, func(e *ParseError) string { return e.Path }, []testutil.ParseErrorCase{
		{Name: "ReadIntAttr", Read: func() error { _, err := ReadIntAttr(filepath.Join(dir, "int")); return err },
			Path: "int", Cause: strconv.ErrSyntax, Text: `parse ` + filepath.Join(dir, "int") + `: strconv.ParseInt: parsing "7.2 W": invalid syntax`},
		{Name: "CPUTopology", Read: func() error { _, err := fsys.CPUTopology(); return err },
			Path: "devices/system/cpu/online", Cause: nil, Text: `parse ` + filepath.Join(dir, "devices/system/cpu/online") + `: no online CPUs`},
	})
}
