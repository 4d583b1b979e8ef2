package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTermTimeBound (S5): a node's bound for a leader of term T covers
// everything it saw in older terms (and a stale leader's late message), and
// nothing of term T itself.
func TestTermTimeBound(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var c termTime
	c.record(3, at(10))
	c.record(3, at(20))
	require.Equal(t, at(20), c.bound(4))
	require.True(t, c.bound(3).IsZero(), "term 3's own contacts are not older than term 3")
	c.record(4, at(30)) // the new leader's rounds
	require.Equal(t, at(20), c.bound(4))
	require.Equal(t, at(30), c.bound(5))
	c.record(2, at(40)) // a deposed leader's late heartbeat still counts as seen then
	require.Equal(t, at(40), c.bound(4))

	var log contactLog
	log.init(at(5))
	log.see(3, []uint64{7}, at(50))
	require.Equal(t, at(50), log.sessionBound(4, 7))
	require.Equal(t, at(5), log.sessionBound(4, 8), "a session never seen since the start: the start")
	require.Equal(t, at(50), log.anyBound(4))
}

// TestContactReportRoundTrip (S5): a report decodes to instants no earlier
// than the ones the follower saw (its elapsed times are shortened by the
// drift bound), and garbage is refused.
func TestContactReportRoundTrip(t *testing.T) {
	now := time.Unix(2000, 0)
	var c contactLog
	c.init(now.Add(-10 * time.Second))
	c.see(6, []uint64{3, 9}, now.Add(-1500*time.Millisecond))
	c.see(6, []uint64{3}, now.Add(-700*time.Millisecond))
	opened := map[uint64]time.Time{3: now.Add(-5 * time.Second), 11: now.Add(-time.Second)}
	b := c.appendReport(nil, 7, now, opened)
	recv := now.Add(2 * time.Millisecond) // on the leader's clock
	r, ok := decodeReport(b, recv, 0.02)
	require.True(t, ok)
	require.False(t, r.session(3).Before(now.Add(-700*time.Millisecond)))
	require.False(t, r.session(9).Before(now.Add(-1500*time.Millisecond)))
	require.False(t, r.start.Before(now.Add(-10*time.Second)))
	require.WithinDuration(t, now.Add(-700*time.Millisecond), r.session(3), 20*time.Millisecond)
	require.Equal(t, r.start, r.session(42), "unlisted sessions: the start")
	require.Equal(t, r.start, r.session(11), "opened but never seen: the start")
	require.False(t, r.opened[3].Before(now.Add(-5*time.Second)))
	require.WithinDuration(t, now.Add(-time.Second), r.opened[11], 30*time.Millisecond)
	_, known := r.opened[9]
	require.False(t, known)
	for _, bad := range [][]byte{nil, {'X'}, b[:len(b)-1], append(append([]byte{}, b...), 0)} {
		_, ok := decodeReport(bad, recv, 0.02)
		require.False(t, ok, "%x", bad)
	}

	// The k-th smallest of a majority: one reporter that restarted after the
	// holder's last keepalive cannot push the base below the others'.
	rs := reportState{voters: []uint64{1, 2, 3}, need: 2, got: map[uint64]*memberReport{
		1: {start: now.Add(-time.Hour), sessions: map[uint64]time.Time{5: now.Add(-2 * time.Second)}},
		2: {start: now.Add(-time.Hour), sessions: map[uint64]time.Time{5: now.Add(-2 * time.Second)}},
		3: {start: now.Add(-100 * time.Millisecond)},
	}}
	require.Equal(t, now.Add(-2*time.Second), rs.kth(func(m *memberReport) time.Time { return m.session(5) }))

	// Five voters (at most two outside any quorum that saw the holder): the
	// third smallest, however many reported. A majority of three in which
	// two restarted since the holder's last keepalive can only say "not
	// since our starts"; each further report lowers the third smallest.
	session5 := func(m *memberReport) time.Time { return m.session(5) }
	seen := &memberReport{start: now.Add(-time.Hour), sessions: map[uint64]time.Time{5: now.Add(-2 * time.Second)}}
	five := reportState{voters: []uint64{1, 2, 3, 4, 5}, need: 3, got: map[uint64]*memberReport{
		1: seen, 2: {start: now.Add(-500 * time.Millisecond)}, 3: {start: now.Add(-100 * time.Millisecond)},
	}}
	require.Equal(t, now.Add(-100*time.Millisecond), five.kth(session5), "a majority: the latest of three")
	five.got[4] = seen
	require.Equal(t, now.Add(-500*time.Millisecond), five.kth(session5), "four: the third smallest")
	five.got[5] = seen
	require.Equal(t, now.Add(-2*time.Second), five.kth(session5), "five: the third smallest")
}

// TestHeartbeatExtension: the sessions ride after raft's 8-byte position,
// which stays intact; plain contexts have no extension.
func TestHeartbeatExtension(t *testing.T) {
	pos := []byte{9, 0, 0, 0, 0, 0, 0, 0}
	ctx := appendHeartbeatExt(append([]byte{}, pos...), true, []uint64{1, 300, 1 << 40})
	require.Equal(t, pos, ctx[:hbPosLen])
	flags, sessions, ok := parseHeartbeatExt(ctx)
	require.True(t, ok)
	require.Equal(t, byte(roundWantsReport), flags)
	require.Equal(t, []uint64{1, 300, 1 << 40}, sessions)
	hint := []byte("lockraft/commit-hint") // another context a heartbeat may carry
	for _, plain := range [][]byte{nil, pos, hint, ctx[:len(ctx)-1]} {
		_, _, ok := parseHeartbeatExt(plain)
		require.False(t, ok, "%x", plain)
	}
}
