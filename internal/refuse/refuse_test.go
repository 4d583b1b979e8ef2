package refuse

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// One log line per (kind, source) per interval, every refusal counted; the
// next line after the interval says how many were suppressed; what callers
// derive from input (sources, kinds) cannot grow memory without bound.
func TestRefusalsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	r := New(slog.New(slog.NewTextHandler(&buf, nil)), time.Minute)
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	for range 100 {
		r.Refuse("raft message", "7", "why", "bad")
	}
	r.Refuse("raft message", "8")
	r.Note("call", "7")
	require.EqualValues(t, 101, r.Count("raft message"))
	require.Equal(t, 1, strings.Count(buf.String(), `msg="refused raft message" source=7`))
	require.Equal(t, 1, strings.Count(buf.String(), `msg="refused raft message" source=8`))
	require.Contains(t, buf.String(), `level=INFO msg="refused call" source=7`)

	now = now.Add(time.Minute)
	r.Refuse("raft message", "7")
	require.Contains(t, buf.String(), "suppressed_since_last_log=99")

	for i := range 2 * maxSources {
		r.Refuse("connection", fmt.Sprint(i))
		now = now.Add(time.Millisecond)
	}
	require.LessOrEqual(t, len(r.seen), maxSources)
	for i := range 2 * maxKinds {
		r.Refuse(fmt.Sprintf("kind %d", i), "x")
	}
	require.LessOrEqual(t, len(r.counts), maxKinds+1)
	require.NotZero(t, r.Count(otherKind))
	var nilLog *Log
	nilLog.Refuse("x", "y") // a nil Log is a no-op
	require.Zero(t, nilLog.Count("x"))
}
