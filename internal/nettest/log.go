package nettest

import (
	"bytes"
	"strings"
	"sync"
)

// LogBuffer is a goroutine-safe slog sink whose contents tests can assert.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// HasLine reports whether one line of the log holds every one of parts.
func (b *LogBuffer) HasLine(parts ...string) bool { return b.CountLines(parts...) > 0 }

// CountLines counts the lines of the log that hold every one of parts.
func (b *LogBuffer) CountLines(parts ...string) int {
	n := 0
	for _, line := range strings.Split(b.String(), "\n") {
		all := line != ""
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}
