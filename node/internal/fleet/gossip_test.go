package fleet

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/membership"
)

// A light member binds to its leader's formation once it has a session, and
// never with raft data of its own.
func TestLightMemberAdoptsLeadersFormation(t *testing.T) {
	var members []membership.Member
	f, h := newTestFleet(t, &membership.Config{BootstrapExpect: 1}, nil, &members)
	ms := []membership.Member{member(2, membership.StateAlive, true, testFormation), member(3, membership.StateAlive, true, "")}
	h.leader = 2
	f.adoptLeadersFormation(ms)
	require.Empty(t, f.Formation(), "no session yet")
	h.session, h.hasData = true, true
	f.adoptLeadersFormation(ms)
	require.Empty(t, f.Formation(), "raft data of its own")
	h.hasData = false
	h.leader = 3
	f.adoptLeadersFormation(ms)
	require.Empty(t, f.Formation(), "a leader without a formation id")
	h.leader = 2
	f.adoptLeadersFormation(ms)
	require.Equal(t, testFormation, f.Formation())
	require.Equal(t, testFormation, h.net.formation)
}

func TestViewKey(t *testing.T) {
	a := []membership.Member{member(2, membership.StateAlive, false, "")}
	b := []membership.Member{member(2, membership.StateAlive, true, "")}
	require.NotEqual(t, viewKey(a), viewKey(b), "raft data changes the view")
	require.Equal(t, viewKey(a), viewKey([]membership.Member{member(2, membership.StateAlive, false, "")}))
}
