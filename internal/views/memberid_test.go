package views

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/lockraft/lockraft/internal/lockerr"
)

func TestMemberIDText(t *testing.T) {
	for _, id := range []MemberID{0, 1, 0xdeadbeef, 1<<63 | 1, ^MemberID(0)} {
		b, err := id.MarshalText()
		if err != nil || len(b) != 16 || string(b) != id.String() {
			t.Fatalf("%d: MarshalText = %q, %v; String = %q", uint64(id), b, err, id)
		}
		var back MemberID
		if err := back.UnmarshalText(b); err != nil || back != id {
			t.Fatalf("%q: UnmarshalText = %v, %v", b, back, err)
		}
	}
	for s, want := range map[string]MemberID{"ff": 0xff, "0xFF": 0xff, "0X0a": 10, "00000000deadbeef": 0xdeadbeef} {
		if got, err := ParseMemberID(s); err != nil || got != want {
			t.Errorf("ParseMemberID(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "0x", "xyz", "-1", "10000000000000000", "12 "} {
		if _, err := ParseMemberID(s); !errors.Is(err, lockerr.ErrInvalidConfig) {
			t.Errorf("ParseMemberID(%q) = %v; want ErrInvalidConfig", s, err)
		}
	}
}

// A log attribute given MemberIDs prints hex in both of slog's handlers.
func TestMemberIDsLogged(t *testing.T) {
	var text, js strings.Builder
	for _, h := range []slog.Handler{slog.NewTextHandler(&text, nil), slog.NewJSONHandler(&js, nil)} {
		slog.New(h).Info("x", "leader", MemberID(26), "voters", MemberIDs([]uint64{26, 1 << 63}))
	}
	for out, want := range map[string]string{
		text.String(): "leader=000000000000001a voters=\"[000000000000001a 8000000000000000]\"",
		js.String():   `"leader":"000000000000001a","voters":["000000000000001a","8000000000000000"]`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log %q; want %q in it", out, want)
		}
	}
}
