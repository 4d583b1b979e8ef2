package lockraft

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Durations reach a JSON log as text, in a record's attributes, the
// logger's own and groups alike; other values are untouched.
func TestLogDurationsAsText(t *testing.T) {
	var buf bytes.Buffer
	l := withDurationText(slog.New(slog.NewJSONHandler(&buf, nil)))
	require.Same(t, l, withDurationText(l), "wrapped once")
	l.With("ttl", 10*time.Second).WithGroup("g").Info("leader again", "leaderless_for", 1500*time.Millisecond,
		slog.Group("tick", "every", 100*time.Millisecond, "n", 3), "term", 7)
	out := buf.String()
	require.Contains(t, out, `"ttl":"10s"`)
	require.Contains(t, out, `"leaderless_for":"1.5s"`)
	require.Contains(t, out, `"tick":{"every":"100ms","n":3}`)
	require.Contains(t, out, `"term":7`)
	require.Nil(t, withDurationText(nil))
}
