package fleet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/membership"
)

// The formation rules come first, with the messages the node's
// configuration errors carry; the member's own settings are membership's.
func TestCheckGossip(t *testing.T) {
	for name, tc := range map[string]struct {
		g    membership.Config
		want string // "" = valid
	}{
		"negative expect":        {membership.Config{BootstrapExpect: -1}, "Gossip.BootstrapExpect -1 is negative"},
		"long name":              {membership.Config{BootstrapExpect: 1, Name: string(make([]byte, 257))}, "Gossip.Name is longer than 256 bytes"},
		"no founders":            {membership.Config{}, "Gossip.Founders is required"},
		"expect contradicts":     {membership.Config{BootstrapExpect: 3, Founders: []string{"a", "b"}}, "BootstrapExpect is 3 but 2 Founders"},
		"founder twice":          {membership.Config{Founders: []string{"a", "b", "a"}}, `Gossip.Founders: "a" is listed twice`},
		"empty founder name":     {membership.Config{Founders: []string{"a", ""}}, "a name is empty"},
		"member setting":         {membership.Config{BootstrapExpect: 1, BindAddr: "localhost"}, "is not an IP address"},
		"key length":             {membership.Config{BootstrapExpect: 1, SecretKey: make([]byte, 5)}, "secret key is 5 bytes"},
		"development mode":       {membership.Config{BootstrapExpect: 1}, ""},
		"founders, expect unset": {membership.Config{Founders: []string{"a", "b", "c"}}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			err := CheckGossip(&tc.g)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
	var kl *membership.KeyLengthError
	err := CheckGossip(&membership.Config{BootstrapExpect: 1, Keys: [][]byte{make([]byte, 16), make([]byte, 7)}})
	require.ErrorAs(t, err, &kl)
	require.ErrorContains(t, err, "Keys[1] is 7 bytes")
}

func TestDefaultsAndNames(t *testing.T) {
	g := WithDefaults(membership.Config{Founders: []string{"c", "a", "b"}})
	require.Equal(t, "127.0.0.1", g.BindAddr)
	require.Equal(t, 3, g.BootstrapExpect)
	require.Equal(t, membership.LANTiming(), g.Timing)
	require.Equal(t, 3*g.Timing.ProbeInterval, g.SettleFor)
	require.Equal(t, time.Second, g.ReconcileEvery)
	require.Equal(t, []string{"a", "b", "c"}, founders(&g, "b"), "sorted")
	require.Equal(t, "lockraft-00000000000000ff", gossipName(&g, 255))

	dev := WithDefaults(membership.Config{BootstrapExpect: 1})
	require.Equal(t, []string{"solo"}, founders(&dev, "solo"), "the development mode founds alone")
	fast := WithDefaults(membership.Config{Name: "x", Timing: membership.FastTiming(), SettleFor: time.Minute})
	require.Equal(t, membership.FastTiming(), fast.Timing)
	require.Equal(t, time.Minute, fast.SettleFor)
	require.Equal(t, "x", gossipName(&fast, 1))
}
