package transport

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/internal/netrules"
	"github.com/lockraft/lockraft/transport/transportpb"
)

func withFormation(id string) func(*Config) { return func(c *Config) { c.Formation = id } }

// adopter records AdoptFormation calls; fail, if set, refuses them.
type adopter struct {
	mu   sync.Mutex
	ids  []string
	fail error
}

func (a *adopter) adopt(id string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail != nil {
		return a.fail
	}
	a.ids = append(a.ids, id)
	return nil
}

func (a *adopter) adopted() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.ids...)
}

// sendUntilDecided sends msgApp batches from a to b until b has received a
// new one from a or a reports b unreachable once more; it returns whether b
// received.
func sendUntilDecided(t *testing.T, a, b *node) bool {
	t.Helper()
	from := func() int {
		msgs, _ := b.rec.received()
		k := 0
		for _, m := range msgs {
			if m.GetFrom() == a.t.cfg.LocalID {
				k++
			}
		}
		return k
	}
	had, unreachable := from(), a.rec.UnreachableCount(b.t.cfg.LocalID)
	var got bool
	require.Eventually(t, func() bool {
		a.t.Send([]*raftpb.Message{msgApp(a.t.cfg.LocalID, b.t.cfg.LocalID, 1)})
		got = from() > had
		return got || a.rec.UnreachableCount(b.t.cfg.LocalID) > unreachable
	}, waitFor, 10*time.Millisecond)
	return got
}

// TestS1OtherFormationIsRejected: two formed clusters that share a
// ClusterID never exchange a raft message or a call (S1: a cluster never
// takes another's log, votes or members). The refusal is logged once.
func TestS1OtherFormationIsRejected(t *testing.T) {
	a := newNode(t, "shared", 1, withFormation("f-aaaa"))
	b := newNode(t, "shared", 2, withFormation("f-bbbb"))
	connect(a, b)
	require.False(t, sendUntilDecided(t, a, b), "a raft message crossed two formations")
	for range 5 {
		a.t.Send([]*raftpb.Message{msgApp(1, 2, 2)})
	}
	_, err := a.t.Leave(context.Background(), 2, &transportpb.LeaveRequest{})
	require.ErrorIs(t, err, ErrFormationMismatch)
	_, err = a.t.Leave(context.Background(), 2, &transportpb.LeaveRequest{})
	require.ErrorIs(t, err, ErrFormationMismatch)
	got, _ := b.rec.received()
	require.Empty(t, got)
	require.Equal(t, 1, strings.Count(b.log.String(), "rejected a peer of another formed cluster"), b.log.String())
	require.Equal(t, "f-bbbb", b.t.Formation(), "a rejected peer changes nothing")
}

// TestS1FreshNodeAdoptsFirstFormation: a node without a formation id that is
// sent raft traffic by a formed cluster (it is being added) adopts that
// cluster's id, persisted through AdoptFormation before anything is
// delivered; from then on a second formed cluster is refused. So a fresh
// node that two clusters try to add joins exactly one of them.
func TestS1FreshNodeAdoptsFirstFormation(t *testing.T) {
	var ad adopter
	fresh := newNode(t, "shared", 3, func(c *Config) { c.AdoptFormation = ad.adopt })
	a := newNode(t, "shared", 1, withFormation("f-aaaa"))
	b := newNode(t, "shared", 2, withFormation("f-bbbb"))
	connect(a, fresh)
	connect(b, fresh)
	require.True(t, sendUntilDecided(t, a, fresh))
	require.Equal(t, []string{"f-aaaa"}, ad.adopted())
	require.Equal(t, "f-aaaa", fresh.t.Formation())

	require.False(t, sendUntilDecided(t, b, fresh), "the second cluster's traffic was accepted")
	require.Equal(t, []string{"f-aaaa"}, ad.adopted(), "adopted once")

	// A call carries no adoption: a fresh node only adopts from raft traffic.
	var ad2 adopter
	fresh2 := newNode(t, "shared", 4, func(c *Config) { c.AdoptFormation = ad2.adopt })
	connect(a, fresh2)
	_, err := a.t.Leave(context.Background(), 4, &transportpb.LeaveRequest{})
	require.NoError(t, err)
	require.Empty(t, ad2.adopted())
	require.Empty(t, fresh2.t.Formation())
}

// A node that cannot adopt (AdoptFormation fails: it has raft data from
// before formation ids) refuses the traffic instead of joining.
func TestS1AdoptionRefusedRejectsTraffic(t *testing.T) {
	ad := adopter{fail: errors.New("has raft data")}
	old := newNode(t, "shared", 3, func(c *Config) { c.AdoptFormation = ad.adopt })
	a := newNode(t, "shared", 1, withFormation("f-aaaa"))
	connect(a, old)
	require.False(t, sendUntilDecided(t, a, old))
	require.Empty(t, old.t.Formation())
}

// TestS1FormedNodeRefusesRaftTrafficWithoutFormation: raft traffic without
// an id is from a node of no formed cluster; a formed node refuses it, but
// still answers its calls (a fresh member asks the leader to join, a light
// member forwards its locks).
func TestS1FormedNodeRefusesRaftTrafficWithoutFormation(t *testing.T) {
	formed := newNode(t, "shared", 1, withFormation("f-aaaa"))
	none := newNode(t, "shared", 2)
	connect(formed, none)
	require.False(t, sendUntilDecided(t, none, formed))
	_, err := none.t.Leave(context.Background(), 1, &transportpb.LeaveRequest{})
	require.NoError(t, err)
	// And the other way: a node without an id and without AdoptFormation
	// (static membership) accepts everything, as before formation ids.
	require.True(t, sendUntilDecided(t, formed, none))
	require.Empty(t, none.t.Formation())
}

// TestS1StreamReopensWithFormation: a stream opened before the sender had a
// formation id carries none; once the sender gets one (SetFormation) its
// next batch goes on a new stream that says so, so a receiver of another
// formation refuses it from then on.
func TestS1StreamReopensWithFormation(t *testing.T) {
	a := newNode(t, "shared", 1)
	b := newNode(t, "shared", 2) // accepts anything: no id, no AdoptFormation
	connect(a, b)
	a.t.Send([]*raftpb.Message{msgApp(1, 2, 1)}) // opens the stream, without an id
	require.Eventually(t, func() bool { m, _ := b.rec.received(); return len(m) == 1 }, waitFor, tick)
	require.NoError(t, a.t.SetFormation("f-aaaa"))
	require.NoError(t, a.t.SetFormation("f-aaaa"), "setting the same id again is a no-op")
	require.ErrorIs(t, a.t.SetFormation("f-other"), ErrFormationMismatch, "an id never changes")
	require.NoError(t, b.t.SetFormation("f-bbbb"))
	require.False(t, sendUntilDecided(t, a, b), "the old stream kept delivering after both had ids")
}

// TestFormationDetailAtItsLongest: formation details of the longest length
// allowed (netrules.MaxFormationDetail) fit the header-list cap both ways:
// a stream's headers carry the sender's, and a refusal's status (trailers)
// the receiver's. Within one formation the traffic crosses; across two,
// each side learns the other's whole detail.
func TestFormationDetailAtItsLongest(t *testing.T) {
	detail := func(c byte) string { return strings.Repeat(string(c), netrules.MaxFormationDetail) }
	type foreign struct {
		mu      sync.Mutex
		details []string
	}
	seen := func(f *foreign) func(uint64, string, bool) {
		return func(_ uint64, d string, _ bool) {
			f.mu.Lock()
			f.details = append(f.details, d)
			f.mu.Unlock()
		}
	}
	got := func(f *foreign) []string {
		f.mu.Lock()
		defer f.mu.Unlock()
		return append([]string(nil), f.details...)
	}

	same1 := newNode(t, "shared", 1, withFormation("f-aaaa"), func(c *Config) { c.FormationDetail = detail('a') })
	same2 := newNode(t, "shared", 2, withFormation("f-aaaa"), func(c *Config) { c.FormationDetail = detail('a') })
	connect(same1, same2)
	require.True(t, sendUntilDecided(t, same1, same2), "a formation's own traffic was refused")

	var atA, atB foreign
	a := newNode(t, "shared", 3, withFormation("f-aaaa"), func(c *Config) {
		c.FormationDetail, c.OnForeignPeer = detail('a'), seen(&atA)
	})
	b := newNode(t, "shared", 4, withFormation("f-bbbb"), func(c *Config) {
		c.FormationDetail, c.OnForeignPeer = detail('b'), seen(&atB)
	})
	connect(a, b)
	require.False(t, sendUntilDecided(t, a, b), "a raft message crossed two formations")
	require.Eventually(t, func() bool { return len(got(&atA)) > 0 && len(got(&atB)) > 0 }, waitFor, 10*time.Millisecond,
		"each side is told of the other (a: %d, b: %d)", len(got(&atA)), len(got(&atB)))
	require.Equal(t, detail('b'), got(&atA)[0], "the refusal's status carried the receiver's whole detail")
	require.Equal(t, detail('a'), got(&atB)[0], "the stream's headers carried the sender's whole detail")
}
