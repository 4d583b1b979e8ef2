package readctx

import "testing"

func TestRoundTrip(t *testing.T) {
	for _, tag := range []byte{Keepalive, Read, Removal} {
		c := Encode(tag, 1<<40+7)
		if id, ok := Decode(c, tag); !ok || id != 1<<40+7 {
			t.Fatalf("tag %c: got %d, %v", tag, id, ok)
		}
		for _, other := range []byte{Keepalive, Read, Removal} {
			if _, ok := Decode(c, other); ok != (other == tag) {
				t.Fatalf("tag %c read as %c: %v", tag, other, ok)
			}
		}
	}
	if _, ok := Decode(nil, Read); ok {
		t.Fatal("an empty context decoded")
	}
}

func TestAnswered(t *testing.T) {
	id := func(r uint64) uint64 { return r }
	rounds := []uint64{3, 4, 5}
	if got := Answered(&rounds, id, Read, Encode(Keepalive, 4)); got != nil || len(rounds) != 3 {
		t.Fatalf("another user's answer settled %v", got)
	}
	if got := Answered(&rounds, id, Read, Encode(Read, 4)); len(got) != 2 || got[0] != 3 || got[1] != 4 {
		t.Fatalf("round 4 settled %v, want [3 4]", got)
	}
	if got := Answered(&rounds, id, Read, Encode(Read, 3)); got != nil || len(rounds) != 1 || rounds[0] != 5 {
		t.Fatalf("a round settled already settled %v again; left %v", got, rounds)
	}
}
