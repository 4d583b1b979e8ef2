package fleet

import (
	"testing"

	"github.com/stretchr/testify/require"
)

var abc = []Member{{1, "127.0.0.1:7401"}, {2, "127.0.0.1:7402"}, {3, "127.0.0.1:7403"}}

func TestStaticFormationIsTheList(t *testing.T) {
	id := staticFormation("c", abc)
	require.True(t, ValidFormationID(id))
	require.Equal(t, id, staticFormation("c", []Member{abc[2], abc[0], abc[1]}), "the same list in another order of entries")
	require.NotEqual(t, id, staticFormation("d", abc), "another cluster")
	acb := []Member{{1, abc[0].Addr}, {2, abc[2].Addr}, {3, abc[1].Addr}}
	require.NotEqual(t, id, staticFormation("c", acb), "the same addresses numbered differently")
}

func TestStaticDetailRoundTrip(t *testing.T) {
	d := staticDetail(abc)
	require.Equal(t, "static members [1=127.0.0.1:7401 2=127.0.0.1:7402 3=127.0.0.1:7403]", d)
	got, ok := parseStaticDetail(d)
	require.True(t, ok)
	require.Equal(t, abc, got)
	require.Equal(t, "static members [0000000000000001=127.0.0.1:7401 0000000000000002=127.0.0.1:7402 0000000000000003=127.0.0.1:7403]",
		showStatic(abc), "messages show the ids in hex; the wire keeps decimal for earlier versions")
	for _, bad := range []string{"", "static members [1=a", "static members [x=a]", "other"} {
		_, ok := parseStaticDetail(bad)
		require.False(t, ok, bad)
	}
}

func TestDiffStatic(t *testing.T) {
	acb := []Member{{1, abc[0].Addr}, {2, abc[2].Addr}, {3, abc[1].Addr}}
	d := diffStatic(abc, acb)
	require.Contains(t, d, "id 0000000000000002 is 127.0.0.1:7402 here, 127.0.0.1:7403 there")
	require.Contains(t, d, "the same addresses in another order")
	require.Equal(t, "id 0000000000000003 (127.0.0.1:7403) only here", diffStatic(abc, abc[:2]))
	require.Equal(t, "id 0000000000000003 (127.0.0.1:7403) only there", diffStatic(abc[:2], abc))
	require.Contains(t, diffStatic(abc, abc), "the same list")
}

// A mismatch counts only for a listed member this node dialed; once a
// majority of the others is on another list, the node is told to stop.
func TestForeignStaticPeers(t *testing.T) {
	five := append(append([]Member{}, abc...), Member{4, "127.0.0.1:7404"}, Member{5, "127.0.0.1:7405"})
	f, _ := newTestFleet(t, nil, five, nil)
	other := staticDetail([]Member{{1, "127.0.0.1:7401"}, {2, "127.0.0.1:7499"}})
	require.NoError(t, f.OnForeignStaticPeer(2, other, false), "a claim, not dialed: said, not counted")
	require.NoError(t, f.OnForeignStaticPeer(9, other, true), "not in the list")
	require.Empty(t, f.StaticMismatch())

	require.NoError(t, f.OnForeignStaticPeer(2, "", true))
	require.Contains(t, f.StaticMismatch(), "belongs to another cluster formation")
	require.NoError(t, f.OnForeignStaticPeer(2, other, true))
	require.Contains(t, f.StaticMismatch(), "id 0000000000000002 is 127.0.0.1:7402 here, 127.0.0.1:7499 there", "a detailed message wins")
	require.NoError(t, f.OnForeignStaticPeer(3, other, true), "2 of 4 others: a quorum is still possible")
	err := f.OnForeignStaticPeer(4, other, true)
	require.ErrorContains(t, err, "3 of the other 4 members are on another static member list")
}

func TestStaticFormationAdoption(t *testing.T) {
	f, h := newTestFleet(t, nil, abc, nil)
	id, err := f.InitStaticFormation(true)
	require.NoError(t, err)
	require.Empty(t, id, "a directory from before the check keeps none")
	require.Error(t, f.AdoptStaticFormation(staticFormation("c", abc[:2])), "another list's id")
	require.NoError(t, f.AdoptStaticFormation(staticFormation("c", abc)))
	require.Equal(t, staticFormation("c", abc), f.Formation())
	require.Len(t, h.persisted, 1, "written before it is used")

	g, h2 := newTestFleet(t, nil, abc, nil)
	id, err = g.InitStaticFormation(false)
	require.NoError(t, err)
	require.Equal(t, staticFormation("c", abc), id, "a new directory takes its list's id")
	require.Equal(t, []string{id}, h2.persisted)
}
