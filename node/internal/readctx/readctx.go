// Package readctx is the request context of a node's raft ReadIndex calls.
// Raft hands the context back, unread, in the ReadState that answers the
// call; each user of ReadIndex in a node tags its own with a byte and
// numbers its rounds, so that it picks out its answers among the others'.
package readctx

import (
	"encoding/binary"
	"slices"
)

// The users' tags.
const (
	Keepalive byte = 'k' // leadership confirmations for keepalives (node/confirm.go)
	Read      byte = 'i' // linearizable reads (node/readindex.go)
	Removal   byte = 'r' // confirmations before telling a member it was removed (node/internal/fleet)
)

// Encode is the context of round id of the user tag.
func Encode(tag byte, id uint64) []byte {
	var c [9]byte
	c[0] = tag
	binary.BigEndian.PutUint64(c[1:], id)
	return c[:]
}

// Decode is the round id of a context Encode made for tag; ok is false for
// another user's context.
func Decode(c []byte, tag byte) (id uint64, ok bool) {
	if len(c) != 9 || c[0] != tag {
		return 0, false
	}
	return binary.BigEndian.Uint64(c[1:]), true
}

// Answered cuts from *rounds, oldest first, the rounds that the answer with
// context c settles: the round it was issued for and every earlier one, as
// raft answers ReadIndex requests in order and a later round's index covers
// the earlier ones. id is a round's id. It cuts none for another user's
// context, nor for a round already settled through a later one.
func Answered[R any](rounds *[]R, id func(R) uint64, tag byte, c []byte) []R {
	want, ok := Decode(c, tag)
	if !ok {
		return nil
	}
	upto := slices.IndexFunc(*rounds, func(r R) bool { return id(r) == want })
	if upto < 0 {
		return nil
	}
	done := (*rounds)[:upto+1]
	*rounds = (*rounds)[upto+1:]
	return done
}
