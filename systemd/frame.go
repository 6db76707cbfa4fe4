package systemd

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// What one user's manager may send the daemon on one connection. A user's
// manager is reached through a socket in a directory the user owns
// (/run/user/UID/systemd/private), so whatever the user runs there
// answers: its bytes are bounded here, before godbus decodes them. godbus
// accepts messages of up to 128 MiB (the D-Bus specification's limit) and
// starts a goroutine per signal that finds the receiver's channel full; a
// user must not make a root daemon hold either.
const (
	// MaxUserMessage bounds one message from a user's manager, in bytes
	// (header, fields and body). systemd 252's largest answers to the
	// daemon are ListUnitsByPatterns (about 300 bytes per unit: 4 MiB is
	// more than 10,000 units, and a listing of more than 4,096 is refused
	// anyway) and a unit's GetAll (2–10 kB). godbus decodes some bodies
	// to 16 times their size (an array of byte variants), so this bounds
	// what one message can make the daemon hold for a moment too.
	MaxUserMessage = 4 << 20
	// maxAuthBytes bounds what the manager sends before the first
	// message: the SASL exchange of EXTERNAL is three short lines.
	maxAuthBytes = 4096
	// userMessageRate and userMessageBurst bound how many messages per
	// second a user's manager gets decoded, over all the daemon's
	// connections to it: past the burst, reading its sockets waits (the
	// manager's writes then block), so that a flood of UnitNew signals
	// costs the daemon at most this rate. A real manager sends a few
	// hundred at a login; the daemon's own calls at a full listing are
	// two per unit.
	userMessageRate  = 2000
	userMessageBurst = 4000
	// userByteRate bounds the bytes per second read from one user's
	// manager the same way (burst: MaxUserMessage). godbus spends about
	// 0.2 CPU-seconds decoding a MiB of header fields made to be costly:
	// at this rate a hostile manager costs the daemon at most a fifth of
	// a CPU. An honest one's listing of 1,000 units (two property reads
	// each, 2–10 kB) fits in its burst and a few seconds.
	userByteRate = 1 << 20
	// userWriteTimeout bounds each write to a user's manager: one that
	// stops reading its socket fails the daemon's call instead of holding
	// it (and godbus's send lock) for good.
	userWriteTimeout = 5 * time.Second
)

// ErrMessageTooLarge is the read error of a connection to a user's
// manager that announced a message over MaxUserMessage, or sent more
// than maxAuthBytes before its first message; godbus then closes the
// connection.
var ErrMessageTooLarge = errors.New("the manager sent a message larger than the daemon accepts from a user's manager")

// ErrUnexpectedMessage is the read error of a connection to a user's
// manager that sent what a manager never sends its client: a method call
// (godbus would answer each in a goroutine of its own), or bytes right
// after its SASL "OK", before the client's BEGIN (which godbus's SASL
// reader would swallow, putting the framing out of step).
var ErrUnexpectedMessage = errors.New("the manager sent what systemd never sends its client")

// limitConn is a connection to a user's manager whose incoming bytes are
// checked on their way to godbus: the SASL lines first (at most
// maxAuthBytes, up to the server's "OK" line), then D-Bus messages, each
// announced by its 16-byte fixed header (endianness, type, flags,
// version, body length, serial, header-fields array length; D-Bus
// specification, "Message Format"), whose announced size must not exceed
// MaxUserMessage. Reading waits when the manager sends faster than
// userMessageRate messages or userByteRate bytes per second. The bytes
// themselves are passed on unchanged.
type limitConn struct {
	net.Conn
	// r reads the connection through a buffer: godbus decodes a message's
	// header fields a few bytes at a time.
	r     *bufio.Reader
	clock func() time.Time
	sleep func(time.Duration)

	mu   sync.Mutex
	auth bool // still in the SASL exchange
	line []byte
	seen int // SASL bytes so far
	// hdr collects the fixed header of the next message; left is what
	// remains of the current one once its header is known.
	hdr  [16]byte
	hn   int
	left int64
	*rates
}

// rates are the token buckets of one manager's connections (refilled at
// last), shared by all of them.
type rates struct {
	mu          sync.Mutex
	msgs, bytes float64
	last        time.Time
}

func newRates() *rates { return &rates{msgs: userMessageBurst, bytes: MaxUserMessage} }

func newLimitConn(c net.Conn, r *rates) *limitConn {
	return &limitConn{Conn: c, r: bufio.NewReaderSize(c, 64<<10), clock: time.Now, sleep: time.Sleep, auth: true, rates: r}
}

// Write writes to the manager within userWriteTimeout.
func (c *limitConn) Write(p []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(userWriteTimeout))
	return c.Conn.Write(p)
}

// Read reads from the manager and checks what it read (observe); an
// error there fails the read, and godbus closes the connection.
func (c *limitConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		if oerr := c.observe(p[:n]); oerr != nil {
			return 0, oerr
		}
	}
	return n, err
}

// observe steps the framing over b and waits while the manager is over
// its rates.
func (c *limitConn) observe(b []byte) error {
	c.mu.Lock()
	wait, err := c.step(b)
	c.mu.Unlock()
	if wait > 0 {
		c.sleep(wait)
	}
	return err
}

// step is observe's framing and the rates' wait it asks for.
func (c *limitConn) step(b []byte) (time.Duration, error) {
	total := len(b)
	newMsgs := 0
	for len(b) > 0 {
		if c.auth {
			i := bytes.IndexByte(b, '\n')
			chunk := b
			if i >= 0 {
				chunk = b[:i+1]
			}
			c.seen += len(chunk)
			if c.seen > maxAuthBytes {
				return 0, fmt.Errorf("%w: %d bytes before the first message", ErrMessageTooLarge, c.seen)
			}
			c.line = append(c.line, chunk...)
			b = b[len(chunk):]
			if i < 0 {
				break
			}
			if bytes.HasPrefix(c.line, []byte("OK ")) {
				c.auth = false // messages follow the client's BEGIN
				if len(b) > 0 {
					return 0, fmt.Errorf("%w: %d bytes after its SASL OK", ErrUnexpectedMessage, len(b))
				}
			}
			c.line = c.line[:0]
			continue
		}
		if c.left > 0 {
			k := int64(len(b))
			if k > c.left {
				k = c.left
			}
			c.left -= k
			b = b[k:]
			continue
		}
		k := copy(c.hdr[c.hn:], b)
		c.hn += k
		b = b[k:]
		if c.hn < len(c.hdr) {
			break
		}
		size, err := messageSize(c.hdr)
		if err != nil {
			return 0, err
		}
		if c.hdr[1] == 1 { // METHOD_CALL
			return 0, fmt.Errorf("%w: a method call", ErrUnexpectedMessage)
		}
		c.hn, c.left = 0, size-int64(len(c.hdr))
		newMsgs++
	}
	return c.rateWait(newMsgs, total), nil
}

// messageSize is the whole size of the message whose fixed header is h:
// 16 + the header fields (padded to 8) + the body. Errors: an unknown
// endianness byte, or a size over MaxUserMessage.
func messageSize(h [16]byte) (int64, error) {
	var order binary.ByteOrder
	switch h[0] {
	case 'l':
		order = binary.LittleEndian
	case 'B':
		order = binary.BigEndian
	default:
		return 0, fmt.Errorf("%w: not a D-Bus message (endianness byte %#x)", ErrMessageTooLarge, h[0])
	}
	body := int64(order.Uint32(h[4:8]))
	fields := int64(order.Uint32(h[12:16]))
	size := 16 + (fields+7)&^7 + body
	if size > MaxUserMessage {
		return 0, fmt.Errorf("%w: %d bytes announced, at most %d", ErrMessageTooLarge, size, MaxUserMessage)
	}
	return size, nil
}

// rateWait takes msgs messages and n bytes from the buckets and returns
// how long the reader must wait until they are there.
func (c *limitConn) rateWait(msgs, n int) time.Duration {
	c.rates.mu.Lock()
	defer c.rates.mu.Unlock()
	now := c.clock()
	if !c.last.IsZero() {
		dt := now.Sub(c.last).Seconds()
		c.msgs = min(c.msgs+dt*userMessageRate, userMessageBurst)
		c.bytes = min(c.bytes+dt*userByteRate, MaxUserMessage)
	}
	c.last = now
	c.msgs -= float64(msgs)
	c.bytes -= float64(n)
	var wait time.Duration
	if c.msgs < 0 {
		wait = time.Duration(-c.msgs / userMessageRate * float64(time.Second))
	}
	if c.bytes < 0 {
		wait = max(wait, time.Duration(-c.bytes/userByteRate*float64(time.Second)))
	}
	return wait
}
