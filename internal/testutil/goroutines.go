package testutil

import (
	"runtime"
	"strings"
)

// Goroutines are the stacks of every goroutine of the process now
// (runtime.Stack of all), one string each as the runtime prints it
// ("goroutine ID [STATE]:" and its frames), the caller's first; the
// buffer grows until the whole dump fits, so none is cut off.
func Goroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}
