package daemon

import (
	"sync"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

const polkitd = testutil.PolkitdBinary

// lockedLog collects a child's output for the failure message.
type lockedLog struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
