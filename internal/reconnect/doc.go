// Package reconnect holds the one rule by which the daemon's clients of a
// unix socket (its own D-Bus connection, the bus client for UPower and
// logind, acpid's event socket) come back after the service goes away:
// attempts in a loop with exponential backoff (Backoff.Keep), and between
// attempts a wait that ends as soon as the service's socket file appears
// and has no timer while it is missing (WaitSocket, BusSocket). It imports
// nothing of the project's.
package reconnect
