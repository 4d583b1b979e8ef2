package views

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/lockraft/lockraft/internal/lockerr"
)

// MemberID is a member's raft id. It prints and marshals as 16 hex digits,
// as in gossip names, profile labels, the admin handler and lockraftctl (a
// JSON number would lose precision above 2^53 in many readers).
type MemberID uint64

// String is the 16-digit hex form.
func (id MemberID) String() string { return fmt.Sprintf("%016x", uint64(id)) }

// MemberIDs is ids as MemberIDs, for a log attribute or a message naming
// several members (a configuration's voters): each prints as 16 hex digits.
func MemberIDs(ids []uint64) []MemberID {
	out := make([]MemberID, len(ids))
	for i, id := range ids {
		out[i] = MemberID(id)
	}
	return out
}

// MarshalText implements encoding.TextMarshaler.
func (id MemberID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler; it accepts hex with or
// without 0x. A bad id is lockraft.ErrInvalidConfig.
func (id *MemberID) UnmarshalText(b []byte) error {
	v, err := ParseMemberID(string(b))
	*id = v
	return err
}

// ParseMemberID parses a member id written in hex (with or without 0x), as
// MemberID prints it. A bad id is lockraft.ErrInvalidConfig.
func ParseMemberID(s string) (MemberID, error) {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil || s == "" {
		return 0, fmt.Errorf("%w: bad member id %q (want hex, as lockraftctl members shows)", lockerr.ErrInvalidConfig, s)
	}
	return MemberID(v), nil
}
