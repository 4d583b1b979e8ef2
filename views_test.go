package lockraft

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/node"
)

// The root views mirror the node's field for field, with the same JSON
// names: the admin handler's JSON and lockraftctl depend on it. A field
// added to a node view without its root copy (and its converter) fails
// here. The planted check: a struct with one field fewer is caught.
func TestViewsMirrorNode(t *testing.T) {
	for _, p := range [][2]any{
		{LockView{}, node.LockView{}}, {HolderView{}, node.HolderView{}}, {WaiterView{}, node.WaiterView{}},
		{LocksPage{}, node.LocksPage{}}, {MembersView{}, node.MembersView{}}, {MemberView{}, node.MemberView{}},
	} {
		require.Equal(t, jsonFields(reflect.TypeOf(p[1])), jsonFields(reflect.TypeOf(p[0])), "%T", p[0])
	}
	type short struct {
		Name string `json:"name"`
	}
	require.NotEqual(t, jsonFields(reflect.TypeOf(node.LockView{})), jsonFields(reflect.TypeOf(short{})))
}

// jsonFields lists a struct's fields as "Name json-tag kind".
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		out = append(out, f.Name+" "+f.Tag.Get("json")+" "+f.Type.Kind().String())
	}
	return out
}

// The converters carry every field: a node view with every field set
// converts to a root view that marshals to the same JSON.
func TestViewConvertersCarryEveryField(t *testing.T) {
	h := node.HolderView{Owner: "o", Session: 2, Member: 3, Token: 4, HoldCount: 5, Mode: "read", Permits: 6,
		Names: []string{"a", "b"}, LeaseMillis: 7}
	w := node.WaiterView{Position: 1, Owner: "w", Session: 8, Member: 9, Enqueued: 10, LeaseMillis: 11, Mode: "write",
		Permits: 12, Value: "v", Names: []string{"c"}}
	v := node.LockView{Name: "n", Primitive: "rwlock", Holder: &h, Holds: []node.HolderView{h}, Waiters: []node.WaiterView{w},
		Delayed: true, Permits: 13, PermitsInUse: 14, Value: "val"}
	require.Equal(t, mustJSON(t, v), mustJSON(t, lockView(v)))
	p := node.LocksPage{Locks: []node.LockView{v}, Next: "x", Applied: 15, ServedBy: 16}
	require.Equal(t, mustJSON(t, p), mustJSON(t, locksPage(p)))
	m := node.MembersView{Leader: 1, Term: 2, ServedBy: 3, FromLeader: true, Commit: 4, LastIndex: 5,
		Members: []node.MemberView{{ID: 1, Role: "voter", Leader: true, RaftAddr: "a", GossipName: "g", GossipAddr: "b",
			Gossip: "alive", Healthy: true, Match: 6, Lag: 7, LagKnown: true}}}
	require.Equal(t, mustJSON(t, m), mustJSON(t, membersView(m)))
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
