package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
)

// raftLogger adapts a *slog.Logger to raft.Logger, so that raft's own logs go
// where the node's go instead of raft's process-global default. Once closing
// is set, raft's warnings are logged at Info: a node whose peers are shutting
// down with it loses its quorum and says so, which is expected then.
type raftLogger struct {
	l       *slog.Logger
	closing *atomic.Bool
}

func (r raftLogger) warnLevel() slog.Level {
	if r.closing != nil && r.closing.Load() {
		return slog.LevelInfo
	}
	return slog.LevelWarn
}

func (r raftLogger) log(level slog.Level, msg string) {
	r.l.Log(context.Background(), level, msg, "lockraft_component", "raft")
}

// print logs fmt.Sprint(v...) at level, formatting only if the level is
// enabled: raft logs at Info on the lock path under load (an append that
// raced a newer one, in unstable.stableTo), which this logs at Debug.
func (r raftLogger) print(level slog.Level, v []any) {
	if r.l.Enabled(context.Background(), level) {
		r.log(level, fmt.Sprint(v...))
	}
}

// printf is print for fmt.Sprintf(format, v...).
func (r raftLogger) printf(level slog.Level, format string, v []any) {
	if r.l.Enabled(context.Background(), level) {
		r.log(level, fmt.Sprintf(format, v...))
	}
}

func (r raftLogger) Debug(v ...any)                   { r.print(slog.LevelDebug, v) }
func (r raftLogger) Debugf(format string, v ...any)   { r.printf(slog.LevelDebug, format, v) }
func (r raftLogger) Info(v ...any)                    { r.print(slog.LevelDebug, v) }
func (r raftLogger) Infof(format string, v ...any)    { r.printf(slog.LevelDebug, format, v) }
func (r raftLogger) Warning(v ...any)                 { r.print(r.warnLevel(), v) }
func (r raftLogger) Warningf(format string, v ...any) { r.printf(r.warnLevel(), format, v) }
func (r raftLogger) Error(v ...any)                   { r.print(slog.LevelError, v) }
func (r raftLogger) Errorf(format string, v ...any)   { r.printf(slog.LevelError, format, v) }

// Fatal and Panic are raft's "this must never happen" paths (a corrupted log,
// a broken invariant). raft expects them not to return.
func (r raftLogger) Fatal(v ...any) {
	r.log(slog.LevelError, fmt.Sprint(v...))
	os.Exit(1)
}
func (r raftLogger) Fatalf(format string, v ...any) {
	r.log(slog.LevelError, fmt.Sprintf(format, v...))
	os.Exit(1)
}
func (r raftLogger) Panic(v ...any) {
	s := fmt.Sprint(v...)
	r.log(slog.LevelError, s)
	panic(s)
}
func (r raftLogger) Panicf(format string, v ...any) {
	s := fmt.Sprintf(format, v...)
	r.log(slog.LevelError, s)
	panic(s)
}
