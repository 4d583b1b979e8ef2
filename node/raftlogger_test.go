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

// formatCounter counts how often fmt formats it.
type formatCounter struct{ n *int }

func (c formatCounter) String() string { *c.n++; return "x" }

// TestRaftLogsFormattedOnlyWhenEnabled: raft's Info and Debug lines (logged
// at Debug) are not formatted when the logger drops Debug (raft logs at Info
// on the lock path under load), and a Warning still is.
func TestRaftLogsFormattedOnlyWhenEnabled(t *testing.T) {
	var buf bytes.Buffer
	r := raftLogger{l: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	n := 0
	arg := formatCounter{&n}
	r.Infof("entry at index %v missing from unstable log; ignoring", arg)
	r.Info(arg)
	r.Debugf("%v", arg)
	r.Debug(arg)
	require.Zero(t, n, "a dropped line was formatted")
	require.Empty(t, buf.String())
	r.Warningf("%v", arg)
	require.Equal(t, 1, n)
	require.Contains(t, buf.String(), "level=WARN")
}
