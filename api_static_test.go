package lockraft_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft"
)

// logRecorder is a slog handler that keeps every record's level, message
// and attributes (with the logger's own attributes), for tests.
type logRecorder struct {
	mu    *sync.Mutex
	recs  *[]logRecord
	attrs []slog.Attr
}

type logRecord struct {
	level slog.Level
	msg   string
	keys  []string // attribute keys in order, the logger's own first
	text  string   // msg and every attribute, for searching
	// durations are the keys of attributes that are time.Durations (which
	// slog.JSONHandler writes as integer nanoseconds).
	durations []string
}

func newLogRecorder() logRecorder {
	return logRecorder{mu: new(sync.Mutex), recs: new([]logRecord)}
}

func (h logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message}
	var b strings.Builder
	b.WriteString(r.Message)
	add := func(a slog.Attr) {
		rec.keys = append(rec.keys, a.Key)
		b.WriteString(" " + a.Key + "=" + a.Value.String())
		if v := a.Value.Resolve(); v.Kind() == slog.KindDuration {
			rec.durations = append(rec.durations, a.Key)
		}
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(func(a slog.Attr) bool { add(a); return true })
	rec.text = b.String()
	h.mu.Lock()
	*h.recs = append(*h.recs, rec)
	h.mu.Unlock()
	return nil
}

func (h logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return h
}

func (h logRecorder) WithGroup(string) slog.Handler { return h }

func (h logRecorder) records() []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]logRecord(nil), *h.recs...)
}

// find returns the records at level or above whose text contains every one
// of subs.
func (h logRecorder) find(level slog.Level, subs ...string) []logRecord {
	var out []logRecord
	for _, r := range h.records() {
		ok := r.level >= level
		for _, s := range subs {
			ok = ok && strings.Contains(r.text, s)
		}
		if ok {
			out = append(out, r)
		}
	}
	return out
}

// S1 (no member's vote counted twice) and L1: static replicas given member
// lists that differ, in order or in content, are refused from the first
// message, and the odd one out stops with ErrInvalidConfig saying what
// differs, instead of every Lock on it timing out. The two replicas that
// agree form a quorum and serve, and log the odd one out at ERROR.
func TestStaticMemberListsDiffer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		third func(peers []string) []string // the third replica's list
		want  string
		stops bool          // both others are known foreign: it stops
		wait  time.Duration // the Lock's deadline on the odd replica
	}{
		// [a c b]: the replica at c takes id 2 and finds both others on
		// another list: it can never reach a quorum and stops.
		{"order", func(p []string) []string { return []string{p[0], p[2], p[1]} }, "another order", true, 20 * time.Second},
		// [a x c]: member 2 is an address where nothing runs. The replica
		// cannot know x will never start, so it does not stop; a Lock that
		// finds no leader fails with what differs.
		{"content", func(p []string) []string { return []string{p[0], freeAddr(t), p[2]} }, "there", false, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peers := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
			logs := make([]logRecorder, 3)
			nodes := make([]*lockraft.Node, 3)
			for i := range 3 {
				list := peers
				if i == 2 {
					list = tc.third(peers)
				}
				logs[i] = newLogRecorder()
				n, err := lockraft.Join(list, lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr(peers[i]),
					lockraft.WithLogger(slog.New(logs[i])), fast())
				require.NoError(t, err)
				t.Cleanup(func() { n.Close(context.Background()) })
				nodes[i] = n
			}
			lctx, lcancel := context.WithTimeout(context.Background(), tc.wait)
			defer lcancel()
			start := time.Now()
			_, err := nodes[2].Lock(lctx, "static")
			t.Logf("odd replica refused after %v: %v", time.Since(start).Round(time.Millisecond), err)
			require.ErrorIs(t, err, lockraft.ErrInvalidConfig)
			if tc.stops {
				require.NotErrorIs(t, err, context.DeadlineExceeded, "stopped, not timed out")
			}
			require.Contains(t, err.Error(), tc.want)
			require.Contains(t, err.Error(), "static member list")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			lockInTurn(ctx, t, nodes[:2], "static")
			require.Eventually(t, func() bool {
				return len(logs[0].find(slog.LevelError, "another static member list", tc.want))+
					len(logs[1].find(slog.LevelError, "another static member list", tc.want)) > 0
			}, 10*time.Second, 20*time.Millisecond, "a replica on the majority's list says what differs")
		})
	}
}
