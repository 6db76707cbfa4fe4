package daemon

// requestClockSync has the loop sync the placement's counters with the
// plan once the event being handled is done (Daemon.clockSync).
func (d *Daemon) requestClockSync() {
	select {
	case d.clockSync <- struct{}{}:
	default:
	}
}
