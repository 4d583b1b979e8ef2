package membership

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

type levelRecorder struct {
	mu   *sync.Mutex
	recs *[]slog.Record
}

func (h levelRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h levelRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.recs = append(*h.recs, r)
	return nil
}
func (h levelRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h levelRecorder) WithGroup(string) slog.Handler      { return h }

// memberlist's lines reach slog at their level, except the routine events
// of a rolling restart (refuting a suspect or dead message), which are
// DEBUG; a name conflict (refuting an alive message) stays WARN.
func TestMemberlistLogLevels(t *testing.T) {
	for _, tc := range []struct {
		line  string
		level slog.Level
	}{
		{"[WARN] memberlist: Refuting a suspect message (from: orders-1)", slog.LevelDebug},
		{"[WARN] memberlist: Refuting a dead message (from: orders-2)", slog.LevelDebug},
		{"[WARN] memberlist: Refuting an alive message for 'orders-0' (10.0.0.1:7946) meta:([1] VS [2]), vsn:([1] VS [1])", slog.LevelWarn},
		{"[INFO] memberlist: Suspect orders-1 has failed, no acks received", slog.LevelInfo},
		{"[WARN] memberlist: Was able to connect to orders-1 over TCP but UDP probes failed, network may be misconfigured", slog.LevelWarn},
		{"[ERR] memberlist: Failed to send ping: write udp: connection refused", slog.LevelDebug},
	} {
		var recs []slog.Record
		l := newStdLogger(slog.New(levelRecorder{mu: new(sync.Mutex), recs: &recs}), nil)
		l.Print(tc.line)
		require.Len(t, recs, 1, tc.line)
		require.Equal(t, tc.level, recs[0].Level, tc.line)
	}
}
