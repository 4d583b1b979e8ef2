package membership

import (
	"bytes"
	"context"
	"log"
	"log/slog"
)

// slogWriter adapts memberlist's *log.Logger output ("[LEVEL] memberlist: msg")
// to slog, mapping DEBUG/INFO/WARN/ERR to slog levels and tagging each record
// with component=memberlist.
type slogWriter struct{ l *slog.Logger }

func newStdLogger(l *slog.Logger) *log.Logger {
	return log.New(slogWriter{l: l.With("component", "memberlist")}, "", 0)
}

func (w slogWriter) Write(p []byte) (int, error) {
	msg := bytes.TrimRight(p, "\n")
	level := slog.LevelInfo
	for _, lv := range []struct {
		tag   string
		level slog.Level
	}{
		{"[DEBUG]", slog.LevelDebug},
		{"[INFO]", slog.LevelInfo},
		{"[WARN]", slog.LevelWarn},
		{"[ERR]", slog.LevelError},
		{"[ERROR]", slog.LevelError},
	} {
		if bytes.HasPrefix(msg, []byte(lv.tag)) {
			level = lv.level
			msg = bytes.TrimSpace(msg[len(lv.tag):])
			break
		}
	}
	msg = bytes.TrimPrefix(msg, []byte("memberlist: "))
	if bytes.HasPrefix(msg, []byte("ignoring alive message for")) {
		level = slog.LevelDebug // already logged once at Warn by delegate.check
	}
	if w.l.Enabled(context.Background(), level) {
		w.l.Log(context.Background(), level, string(msg))
	}
	return len(p), nil
}
