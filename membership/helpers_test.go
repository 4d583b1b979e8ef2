package membership

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/nettest"
)

// logBuf is a goroutine-safe log sink for slog.
type logBuf = nettest.LogBuffer

type tnode struct {
	m      *Membership
	events chan Event
	logs   *logBuf
}

func (n *tnode) addr() string { return n.m.Local().Addr }

func testConfig(id uint64, cluster string) Config {
	return Config{
		BindAddr: "127.0.0.1",
		Meta:     Meta{RaftID: id, RaftAddr: fmt.Sprintf("127.0.0.1:%d", 20000+id), ClusterID: cluster, Version: "test"},
		Timing:   FastTiming(),
	}
}

// startNode starts a member with a captured logger and a generous event buffer.
func startNode(t *testing.T, cfg Config) *tnode {
	t.Helper()
	n := &tnode{events: make(chan Event, 4096), logs: &logBuf{}}
	cfg.Logger = slog.New(slog.NewTextHandler(n.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.Events = n.events
	m, err := Start(cfg)
	require.NoError(t, err)
	n.m = m
	t.Cleanup(func() {
		_ = m.Shutdown()
		if t.Failed() {
			t.Logf("logs of %s:\n%s", m.name, n.logs.String())
		}
	})
	return n
}

// aliveIDs returns the RaftIDs n sees Alive.
func aliveIDs(n *tnode) []uint64 {
	var ids []uint64
	for _, mem := range n.m.Members() {
		if mem.State == StateAlive {
			ids = append(ids, mem.Meta.RaftID)
		}
	}
	return ids
}

// waitEvent waits for an event matching f, discarding others.
func waitEvent(t *testing.T, n *tnode, timeout time.Duration, f func(Event) bool) Event {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev := <-n.events:
			if f(ev) {
				return ev
			}
		case <-deadline:
			t.Fatalf("event not observed within %v", timeout)
			return Event{}
		}
	}
}

const tick = 10 * time.Millisecond

func newTestLogger(l *logBuf) *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
