package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/schedpolicyd/schedpolicyd/daemon"
	"github.com/schedpolicyd/schedpolicyd/internal/trustedpath"
)

// cleanupMain is `schedpolicyd cleanup`: what a daemon that did not stop
// cleanly left of its tree goes (daemon.CleanTree). The unit runs it as
// ExecStopPost=, so that systemd can remove /run/schedpolicyd after a
// crash. The tree directory is walked from / as the daemon walks it
// (trustedpath.ResolveTrustedPath): a path through a symlink or directory
// that a user other than root could change is refused and nothing is
// removed, so a symlink planted in a user's directory can never make it
// remove root's files. Exit status: 0 done (also when nothing was left), 1
// a daemon serves the tree, the path is refused or something could not be
// removed, 2 usage or a bad configuration file.
func cleanupMain(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("schedpolicyd cleanup", flag.ContinueOnError)
	fl.SetOutput(stderr)
	treeDir := fl.String("tree-dir", daemon.DefaultTreeDir, "the tree directory to clean; default: the configuration's tree_dir, else "+daemon.DefaultTreeDir)
	configPath := fl.String("config", DefaultConfigPath, "TOML configuration file, see schedpolicyd.conf(5): its tree_dir is the default of --tree-dir")
	fl.Usage = func() {
		fmt.Fprintln(fl.Output(), `Usage: schedpolicyd cleanup [--tree-dir DIR] [--config FILE]

After a daemon that did not stop cleanly (kill -9, a crash): detach the tree
it left mounted and remove the tree directory and lock file it made, as its
clean stop would have. Workloads are not touched (the next start restores
them from state.json). Nothing changes while a daemon serves the tree, nor
when the path goes through a symlink or directory a user other than root
could change.`)
		fl.PrintDefaults()
	}
	if code, ok := parseFlags(fl, "schedpolicyd cleanup", args, stdout, stderr); !ok {
		return code
	}
	set := map[string]bool{}
	fl.Visit(func(f *flag.Flag) { set[f.Name] = true })
	fc, err := loadConfig(*configPath, set["config"])
	if err != nil {
		fmt.Fprintf(stderr, "schedpolicyd cleanup: %v\n", err)
		return 2
	}
	cfg := daemon.Config{TreeDir: *treeDir}
	fc.apply(&cfg, set)
	found, err := daemon.CleanTree(cfg.TreeDir)
	for _, f := range found {
		fmt.Fprintf(stdout, "schedpolicyd cleanup: %s: removed %s\n", cfg.TreeDir, f)
	}
	switch {
	case errors.Is(err, daemon.ErrAlreadyRunning), errors.Is(err, trustedpath.ErrUntrustedPath):
		fmt.Fprintf(stderr, "schedpolicyd cleanup: %s: %v; nothing changed\n", cfg.TreeDir, err)
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "schedpolicyd cleanup: %s: %v\n", cfg.TreeDir, err)
		return 1
	case len(found) == 0:
		fmt.Fprintf(stdout, "schedpolicyd cleanup: %s: nothing left behind\n", cfg.TreeDir)
	}
	return 0
}
