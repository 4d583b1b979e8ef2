package node

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRaftWarningsQuietWhileClosing: raft's warnings reach the node's logger
// at Warn, and at Info once the node is closing (its peers leaving with it
// make raft complain about the lost quorum).
func TestRaftWarningsQuietWhileClosing(t *testing.T) {
	var buf bytes.Buffer
	var closing atomic.Bool
	r := raftLogger{l: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), closing: &closing}
	r.Warningf("%x stepped down to follower since quorum is not active", 2)
	closing.Store(true)
	r.Warning("stepped down again")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	require.Contains(t, lines[0], "level=WARN")
	require.Contains(t, lines[1], "level=INFO")
}
