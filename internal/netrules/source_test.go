package netrules

import (
	"net"
	"testing"
)

func TestSourceOf(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"10.1.2.3:7000", "10.1.2.3"},
		{"[::ffff:10.1.2.3]:7000", "10.1.2.3"},
		{"[2001:db8:1:2:aaaa::1]:7000", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:bbbb::9]:7001", "2001:db8:1:2::/64"},
		{"[2001:db8:1:3::1]:7000", "2001:db8:1:3::/64"},
	} {
		addr, err := net.ResolveTCPAddr("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := SourceOf(addr); got != tc.want {
			t.Errorf("SourceOf(%s) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}

func TestBusiest(t *testing.T) {
	if src, n := Busiest(nil); src != "" || n != 0 {
		t.Errorf("Busiest(nil) = %q, %d", src, n)
	}
	for range 20 { // map order must not matter
		if src, n := Busiest(map[string]int{"b": 3, "a": 3, "c": 1}); src != "a" || n != 3 {
			t.Fatalf("Busiest = %q, %d, want a, 3", src, n)
		}
	}
}
