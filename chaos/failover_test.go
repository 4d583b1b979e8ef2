package chaos

import (
	"testing"
	"time"
)

// TestDeadHolds: the holds a killed node's sessions had at its death, and
// those granted to them while dead, stand in the way until released;
// sessions the node opens once it runs again are alive.
func TestDeadHolds(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var life []lifeAt
	add := func(ms int, r lifeRec) {
		life = append(life, lifeAt{lifeRec: r, index: uint64(len(life) + 1), at: at(ms)})
	}
	add(0, lifeRec{K: lifeOpened, Session: 10, Node: 1})
	add(0, lifeRec{K: lifeOpened, Session: 20, Node: 2})
	add(10, lifeRec{K: lifeGranted, Session: 10, Owner: "h", Names: []string{"a", "b"}}) // held at the death
	add(20, lifeRec{K: lifeGranted, Session: 20, Owner: "x", Names: []string{"c"}})
	// n1 dies at 100 ms and runs again at 400 ms.
	add(150, lifeRec{K: lifeOpened, Session: 11, Node: 1}) // its late OpenSession: dead too
	add(200, lifeRec{K: lifeReleased, Session: 20, Owner: "x", Names: []string{"c"}})
	add(200, lifeRec{K: lifeGranted, Session: 10, Owner: "w", Names: []string{"c"}}) // a dead waiter granted
	add(450, lifeRec{K: lifeOpened, Session: 12, Node: 1})                           // the new incarnation
	add(460, lifeRec{K: lifeGranted, Session: 12, Owner: "n", Names: []string{"d"}})
	add(470, lifeRec{K: lifeGranted, Session: 11, Owner: "l", Names: []string{"e"}})
	add(500, lifeRec{K: lifeReleased, Session: 10, Owner: "h", Names: []string{"a", "b"}})
	add(500, lifeRec{K: lifeReleased, Session: 10, Owner: "w", Names: []string{"c"}})
	add(500, lifeRec{K: lifeEnded, Session: 10})
	deaths := []death{{id: 1, at: at(100), back: at(400)}}
	got := map[string]deadHold{}
	for _, h := range deadHolds(life, deaths) {
		got[h.name+"/"+h.owner] = h
	}
	want := map[string][2]int{"a/h": {100, 500}, "b/h": {100, 500}, "c/w": {200, 500}, "e/l": {470, -1}}
	if len(got) != len(want) {
		t.Fatalf("dead holds %v, want %v", got, want)
	}
	for k, w := range want {
		h, ok := got[k]
		if !ok {
			t.Fatalf("no dead hold %s in %v", k, got)
		}
		if !h.from.Equal(at(w[0])) || !h.death.Equal(at(100)) || h.victim != 1 {
			t.Errorf("%s: from %v death %v victim %d, want from %v", k, h.from.Sub(t0), h.death.Sub(t0), h.victim, time.Duration(w[0])*time.Millisecond)
		}
		if w[1] < 0 && !h.freed.IsZero() || w[1] >= 0 && !h.freed.Equal(at(w[1])) {
			t.Errorf("%s: freed %v, want %d ms (-1: still held)", k, h.freed.Sub(t0), w[1])
		}
	}

	gaps := []gap{{start: at(100), end: at(350), victim: 1}}
	s, _ := summarizeFailover(3, time.Second, 200*time.Millisecond, gaps, deaths, life)
	if s.Kills != 1 || s.Leaderless.Max != 250*time.Millisecond || s.NoGrant.Max != 100*time.Millisecond {
		t.Errorf("kills %d, leaderless %v, kill → next grant %v; want 1, 250ms, 100ms", s.Kills, s.Leaderless, s.NoGrant)
	}
	if s.DeadHolds != 4 || s.Pending != 1 || s.Freed.Max != 400*time.Millisecond || s.NameMax["c"] != 400*time.Millisecond {
		t.Errorf("dead holds %d (pending %d), death → release %v, c %v", s.DeadHolds, s.Pending, s.Freed, s.NameMax["c"])
	}
}

func TestDistOf(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 200; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	d := distOf(ds)
	if d.N != 200 || d.P50 != 100*time.Millisecond || d.P99 != 198*time.Millisecond || d.Max != 200*time.Millisecond {
		t.Fatalf("distOf(1..200 ms) = %+v", d)
	}
	if distOf(nil).String() != "-" {
		t.Fatal("an empty distribution prints as -")
	}
}

// TestParseElectionStep reads raft's election logs.
func TestParseElectionStep(t *testing.T) {
	for msg, want := range map[string]electionEvent{
		"a became pre-candidate at term 4": {node: 10, kind: evPreCandidate, term: 4},
		"3 became candidate at term 5":     {node: 3, kind: evCandidate, term: 5},
		"2 became leader at term 7":        {node: 2, kind: evLeader, term: 7},
		"3 [logterm: 4, index: 466, vote: 0] ignored MsgPreVote from 2 [logterm: 4, index: 466] at term 4: lease is not expired (remaining ticks: 3)": {node: 3, kind: evLeaseRefusal},
	} {
		got, ok := parseElectionStep(msg)
		if !ok || got != want {
			t.Errorf("%q: %+v %v, want %+v", msg, got, ok, want)
		}
	}
	if _, ok := parseElectionStep("3 [logterm: 4, index: 466, vote: 3] rejected MsgVote from 2 at term 5"); ok {
		t.Error("a log-based refusal is not an election step here")
	}
}
