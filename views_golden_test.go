package lockraft_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/views.golden from the current views")

// viewSamples are every view the inspection API and the admin handler
// return, each once with every field set and once empty: the empty ones pin
// which fields are omitted (omitempty, omitzero) and which print as null.
func viewSamples() []struct {
	name string
	v    any
} {
	at := time.Date(2025, 1, 2, 3, 4, 5, 6000000, time.UTC)
	h := lockraft.HolderView{Owner: "owner-1", Session: 2, Member: 0x1234abcd, Token: 4, HoldCount: 5, Mode: "read",
		Permits: 6, Names: []string{"a", "b"}, GrantedAt: at, LeaseMillis: 7, ExpiresAt: at.Add(time.Second)}
	w := lockraft.WaiterView{Position: 1, Owner: "waiter", Session: 8, Member: 9, Enqueued: 10, EnqueuedAt: at,
		LeaseMillis: 11, Mode: "write", Permits: 12, Value: "v", Names: []string{"c"}}
	l := lockraft.LockView{Name: "stock/sku-42", Primitive: "rwlock", Holder: &h, Holds: []lockraft.HolderView{h, h},
		Waiters: []lockraft.WaiterView{w}, Delayed: true, Permits: 13, PermitsInUse: 14, Value: "val"}
	m := lockraft.MemberView{ID: 1<<63 | 1, Role: lockraft.RoleVoter, Leader: true, RaftAddr: "10.0.0.1:7400",
		GossipName: "g-1", GossipAddr: "10.0.0.1:7946", Gossip: "alive", Healthy: true, Match: 6, Lag: 7, LagKnown: true}
	return []struct {
		name string
		v    any
	}{
		{"HolderView", h},
		{"HolderView/empty", lockraft.HolderView{}},
		{"WaiterView", w},
		{"WaiterView/empty", lockraft.WaiterView{}},
		{"LockView", l},
		{"LockView/empty", lockraft.LockView{}},
		{"LockView/no-waiters", lockraft.LockView{Name: "n", Primitive: "mutex", Waiters: []lockraft.WaiterView{}}},
		{"LocksPage", lockraft.LocksPage{Locks: []lockraft.LockView{l}, Next: "x", Applied: 15, ServedBy: 16}},
		{"LocksPage/empty", lockraft.LocksPage{}},
		{"MemberView", m},
		{"MemberView/empty", lockraft.MemberView{}},
		{"MembersView", lockraft.MembersView{Leader: 1<<63 | 1, Term: 2, ServedBy: 3, FromLeader: true, Commit: 4,
			LastIndex: 5, Members: []lockraft.MemberView{m, {ID: 2, Role: lockraft.RoleLight}}}},
		{"MembersView/empty", lockraft.MembersView{}},
		{"StatusView", lockraft.StatusView{ID: 0xff, Version: "v1", Role: lockraft.RoleLearner, Leader: 1, IsLeader: true,
			Ready: true, Session: 2, Term: 3, Commit: 4, Applied: 5, Addr: "a", GossipAddr: "b", LockNames: 6,
			LocksHeld: 7, Waiters: 8, Longest: 9, Sessions: 10}},
		{"StatusView/empty", lockraft.StatusView{}},
		{"MemberID", lockraft.MemberID(0xdeadbeef)},
		{"MemberID/map-key", map[lockraft.MemberID]int{1: 1, 0xa: 2}},
	}
}

// The views' JSON is what the admin handler serves and lockraftctl reads:
// every field name, JSON name and omission rule is pinned byte for byte by
// testdata/views.golden (go test -run TestViewsJSONGolden -update rewrites
// it).
func TestViewsJSONGolden(t *testing.T) {
	var got bytes.Buffer
	for _, s := range viewSamples() {
		b, err := json.Marshal(s.v)
		require.NoError(t, err, s.name)
		fmt.Fprintf(&got, "%s\n%s\n\n", s.name, b)
	}
	path := filepath.Join("testdata", "views.golden")
	if *updateGolden {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, got.Bytes(), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	wantBlocks, gotBlocks := strings.Split(string(want), "\n\n"), strings.Split(got.String(), "\n\n")
	for i := range min(len(wantBlocks), len(gotBlocks)) {
		name, _, _ := strings.Cut(wantBlocks[i], "\n")
		require.Equal(t, wantBlocks[i], gotBlocks[i], "sample %d (%s)", i, name)
	}
	require.Equal(t, string(want), got.String())
	// Independently of the golden file: ids print as 16 hex digits.
	require.Contains(t, got.String(), `"member":"000000001234abcd"`)
	require.Contains(t, got.String(), `{"0000000000000001":1,"000000000000000a":2}`)
}

// Every sample reads back into its own type unchanged: MemberID's text form
// round-trips (lockraftctl and the admin handler parse what they print).
func TestViewsJSONRoundTrip(t *testing.T) {
	for _, s := range viewSamples() {
		b, err := json.Marshal(s.v)
		require.NoError(t, err, s.name)
		p := reflect.New(reflect.TypeOf(s.v)).Interface()
		require.NoError(t, json.Unmarshal(b, p), s.name)
		b2, err := json.Marshal(p)
		require.NoError(t, err, s.name)
		require.Equal(t, string(b), string(b2), s.name)
	}
}
