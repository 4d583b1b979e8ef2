package membership

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func mem(id uint64, cluster string, state State, hasData bool) Member {
	return Member{Name: "n" + string(rune('a'+id)), Meta: Meta{RaftID: id, RaftAddr: "x:1", ClusterID: cluster, HasData: hasData}, State: state}
}

func ids(ms []Member) []uint64 {
	var out []uint64
	for _, m := range ms {
		out = append(out, m.Meta.RaftID)
	}
	return out
}

func TestShouldBootstrap(t *testing.T) {
	self := func(id uint64) Meta { return Meta{RaftID: id, RaftAddr: "x:1", ClusterID: "c"} }
	alive := func(id ...uint64) []Member {
		var ms []Member
		for _, i := range id {
			ms = append(ms, mem(i, "c", StateAlive, false))
		}
		return ms
	}
	cases := []struct {
		name   string
		self   Meta
		ms     []Member
		expect int
		want   bool
		voters []uint64
	}{
		{"three seen, lowest bootstraps", self(1), alive(1, 2, 3), 3, true, []uint64{1, 2, 3}},
		{"three seen, not lowest", self(2), alive(1, 2, 3), 3, false, nil},
		{"three seen, highest", self(3), alive(1, 2, 3), 3, false, nil},
		{"too few", self(1), alive(1, 2), 3, false, nil},
		{"self not listed counts", self(1), alive(2, 3), 3, true, []uint64{1, 2, 3}},
		{"more than expect: expect lowest", self(1), alive(1, 5, 3, 4, 2), 3, true, []uint64{1, 2, 3}},
		{"self has data", Meta{RaftID: 1, RaftAddr: "x:1", ClusterID: "c", HasData: true}, alive(1, 2, 3), 3, false, nil},
		{"another has data", self(1), append(alive(1, 2), mem(3, "c", StateAlive, true)), 3, false, nil},
		{"a failed member has data", self(1), append(alive(1, 2, 3), mem(4, "c", StateFailed, true)), 3, false, nil},
		{"a left member has data", self(1), append(alive(1, 2, 3), mem(4, "c", StateLeft, true)), 3, false, nil},
		{"failed members do not count", self(1), append(alive(1, 2), mem(3, "c", StateFailed, false)), 3, false, nil},
		{"failed lower id does not block", self(2), append(alive(2, 3, 4), mem(1, "c", StateFailed, false)), 3, true, []uint64{2, 3, 4}},
		{"other cluster ignored", self(2), append(alive(2, 3, 4), mem(1, "d", StateAlive, true)), 3, true, []uint64{2, 3, 4}},
		{"other cluster not counted", self(1), append(alive(1, 2), mem(3, "d", StateAlive, false)), 3, false, nil},
		{"duplicate raft id", self(1), append(alive(1, 2, 3), Member{Name: "dup", Meta: Meta{RaftID: 2, RaftAddr: "y:1", ClusterID: "c"}}), 3, false, nil},
		{"expect zero", self(1), alive(1, 2, 3), 0, false, nil},
		{"single node mode", self(7), nil, 1, true, []uint64{7}},
		{"single node mode, data", Meta{RaftID: 7, RaftAddr: "x:1", ClusterID: "c", HasData: true}, nil, 1, false, nil},
		{"zero self id", Meta{ClusterID: "c"}, alive(2, 3), 3, false, nil},
		{"empty self cluster", Meta{RaftID: 1}, alive(1, 2, 3), 3, false, nil},
		{"five expected", self(10), alive(10, 20, 30, 40, 50), 5, true, []uint64{10, 20, 30, 40, 50}},
		{"five expected, four seen", self(10), alive(10, 20, 30, 40), 5, false, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, voters := ShouldBootstrap(c.self, c.ms, c.expect)
			require.Equal(t, c.want, got)
			require.Equal(t, c.voters, ids(voters))
		})
	}
}

// TestShouldBootstrapExactlyOne: for every size and expect, with a shared
// view, exactly one member (or none) decides to bootstrap, and all agree on
// the voters.
func TestShouldBootstrapExactlyOne(t *testing.T) {
	for n := 1; n <= 9; n++ {
		for expect := 1; expect <= 9; expect++ {
			var view []Member
			for i := 0; i < n; i++ {
				view = append(view, mem(uint64(100-i*7), "c", StateAlive, false)) // unsorted ids
			}
			yes := 0
			for _, m := range view {
				ok, voters := ShouldBootstrap(m.Meta, view, expect)
				if ok {
					yes++
					require.Len(t, voters, expect)
					require.Equal(t, m.Meta.RaftID, voters[0].Meta.RaftID)
				}
			}
			if n >= expect {
				require.Equal(t, 1, yes, "n=%d expect=%d", n, expect)
			} else {
				require.Zero(t, yes, "n=%d expect=%d", n, expect)
			}
		}
	}
}
