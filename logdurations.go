package lockraft

import (
	"context"
	"log/slog"
)

// durationText wraps the service's log handler so that every time.Duration
// attribute is written as text ("1.5s", time.Duration.String) rather than as
// the integer nanoseconds slog.JSONHandler writes for it: a log line is read
// by people and searched by tools, and "10000000000" is neither.
type durationText struct{ h slog.Handler }

// withDurationText returns l logging durations as text (nil stays nil).
func withDurationText(l *slog.Logger) *slog.Logger {
	if l == nil {
		return nil
	}
	if _, ok := l.Handler().(durationText); ok {
		return l
	}
	return slog.New(durationText{l.Handler()})
}

func (d durationText) Enabled(ctx context.Context, level slog.Level) bool {
	return d.h.Enabled(ctx, level)
}

func (d durationText) Handle(ctx context.Context, r slog.Record) error {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		found = hasDuration(a.Value)
		return !found
	})
	if !found {
		return d.h.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(textAttr(a))
		return true
	})
	return d.h.Handle(ctx, out)
}

func (d durationText) WithAttrs(as []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = textAttr(a)
	}
	return durationText{d.h.WithAttrs(out)}
}

func (d durationText) WithGroup(name string) slog.Handler { return durationText{d.h.WithGroup(name)} }

func hasDuration(v slog.Value) bool {
	v = v.Resolve()
	switch v.Kind() {
	case slog.KindDuration:
		return true
	case slog.KindGroup:
		for _, a := range v.Group() {
			if hasDuration(a.Value) {
				return true
			}
		}
	}
	return false
}

// textAttr returns a with every duration in it (in groups too) as text.
func textAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindDuration:
		return slog.String(a.Key, v.Duration().String())
	case slog.KindGroup:
		g := v.Group()
		out := make([]slog.Attr, len(g))
		for i, ga := range g {
			out[i] = textAttr(ga)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(out...)}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
