package main

// schedpolicyctl top: a terminal view of the machine as the balancer sees
// it, kept up to date by the daemon's signals alone (PropertiesChanged,
// and NameOwnerChanged for the daemon leaving or joining the bus); it never
// polls. The terminal side is Bubble Tea (charm.land/bubbletea/v2); the
// screen itself is topview.go's renderTop. When standard output is not a
// terminal it prints one snapshot as plain text and exits.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/term"
	"github.com/godbus/dbus/v5"
)

// Messages from the D-Bus feed to the terminal program.
type (
	// topAllMsg is GetAll's answer: at start and when the daemon joins.
	topAllMsg struct{ props map[string]dbus.Variant }
	// topChangedMsg is one PropertiesChanged; invalidated are the
	// properties it invalidated that could not be read again.
	topChangedMsg struct {
		changed     map[string]dbus.Variant
		invalidated []string
	}
	// topGoneMsg: the daemon left the bus, or was not on it.
	topGoneMsg struct{}
	// topLostMsg: the bus connection ended; top exits with err.
	topLostMsg struct{ err error }
)

// topModel is the Bubble Tea model: the state and the view's geometry.
type topModel struct {
	s             topState
	width, height int
	scroll        int
	err           error // why the program ended, if not the user
	now           func() time.Time
}

func (m *topModel) Init() tea.Cmd { return nil }

func (m *topModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
	case tea.KeyPressMsg:
		switch msg.String() {
		case "q", "ctrl+c", "esc":
			return m, tea.Quit
		case "up", "k":
			m.scroll--
		case "down", "j":
			m.scroll++
		case "pgup":
			m.scroll -= max(1, m.height/2)
		case "pgdown", "space":
			m.scroll += max(1, m.height/2)
		case "home", "g":
			m.scroll = 0
		case "end", "G":
			m.scroll = 1 << 30
		}
	case topAllMsg:
		m.s.setAll(msg.props, m.now())
	case topChangedMsg:
		m.s.merge(msg.changed, msg.invalidated, m.now())
	case topGoneMsg:
		m.s.running = false
		m.s.props = nil
		m.s.updated = m.now()
	case topLostMsg:
		m.err = msg.err
		return m, tea.Quit
	}
	return m, nil
}

func (m *topModel) View() tea.View {
	w, h := m.width, m.height
	if w <= 0 || h <= 0 {
		w, h = 80, 24
	}
	lines, scroll := renderTop(&m.s, w, h, m.scroll)
	m.scroll = scroll
	v := tea.NewView(strings.Join(lines, "\n"))
	v.AltScreen = true
	v.WindowTitle = "schedpolicyctl top"
	return v
}

// topFeed subscribes to the daemon's signals, reads every property once,
// then sends each change to send until ctx ends or the connection is lost.
// The subscription comes before the first read, so no change between the
// two is missed; changes queued behind that read are applied after it, in
// the order the daemon sent them. Invalidated properties (the daemon
// sends none today) are read again, in answer to that signal.
func topFeed(ctx context.Context, cl *client, send func(tea.Msg)) {
	conn := cl.conn
	sigs := make(chan *dbus.Signal, 256)
	conn.Signal(sigs)
	defer conn.RemoveSignal(sigs)
	owner, err := subscribe(ctx, conn,
		[]dbus.MatchOption{dbus.WithMatchObjectPath(objectPath), dbus.WithMatchInterface("org.freedesktop.DBus.Properties"), dbus.WithMatchMember("PropertiesChanged"), dbus.WithMatchArg(0, iface)})
	if err != nil {
		send(topLostMsg{busError(cl.bus, "subscribing to signals", err)})
		return
	}
	readAll := func() {
		props, err := cl.properties()
		var ce *cliError
		switch {
		case err == nil:
			send(topAllMsg{props})
		case errors.As(err, &ce) && strings.Contains(ce.msg, "is not running"):
			send(topGoneMsg{})
		default:
			send(topLostMsg{err})
		}
	}
	readAll()
	for {
		select {
		case <-ctx.Done():
			return
		case s, ok := <-sigs:
			if !ok {
				send(topLostMsg{&cliError{exitFailure, "lost the connection to " + busLabel(cl.bus)}})
				return
			}
			if owner.Observe(s) {
				if owner.Unique() == "" {
					send(topGoneMsg{})
				} else {
					readAll()
				}
				continue
			}
			if !owner.Sent(s) {
				continue // only the daemon speaks for the daemon
			}
			switch s.Name {
			case "org.freedesktop.DBus.Properties.PropertiesChanged":
				var name string
				var changed map[string]dbus.Variant
				var invalidated []string
				if s.Path != objectPath || dbus.Store(s.Body, &name, &changed, &invalidated) != nil || name != iface {
					continue
				}
				var gone []string
				for _, p := range invalidated {
					if v, err := cl.obj.GetProperty(iface + "." + p); err == nil {
						changed[p] = v
					} else {
						gone = append(gone, p)
					}
				}
				send(topChangedMsg{changed, gone})
			}
		}
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(f.Fd())
}

func (c *cli) top(args []string) int {
	if len(args) > 0 {
		return c.usage("top", usagef("unexpected argument %q", args[0]))
	}
	cl, err := c.dial()
	if err != nil {
		return c.fail(err)
	}
	defer cl.Close()
	if !isTerminal(c.stdout) {
		return c.topSnapshot(cl)
	}
	m := &topModel{s: topState{bus: c.g.bus}, now: time.Now}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := tea.NewProgram(m, tea.WithContext(ctx), tea.WithOutput(c.stdout))
	feedDone := make(chan struct{})
	go func() {
		defer close(feedDone)
		topFeed(ctx, cl, p.Send)
	}()
	_, err = p.Run()
	cancel()
	<-feedDone
	switch {
	case m.err != nil:
		return c.fail(m.err)
	case err != nil && !errors.Is(err, tea.ErrInterrupted) && !errors.Is(err, context.Canceled):
		return c.fail(&cliError{exitFailure, fmt.Sprintf("terminal: %v", err)})
	}
	return exitOK
}

// topSnapshot prints the screen once, every line of it, 80 columns wide:
// what top shows when its output is a file or a pipe.
func (c *cli) topSnapshot(cl *client) int {
	props, err := cl.properties()
	if err != nil {
		return c.fail(err)
	}
	s := topState{bus: c.g.bus}
	s.setAll(props, time.Time{})
	if s.err != "" {
		return c.fail(&cliError{exitFailure, s.err})
	}
	lines, _ := renderTop(&s, 80, 0, 0)
	for _, l := range lines {
		fmt.Fprintln(c.stdout, l)
	}
	return exitOK
}
