package membership

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfigValidate(t *testing.T) {
	ok := testConfig(1, "c")
	require.NoError(t, ok.validate())
	require.Equal(t, "lockraft-0000000000000001", ok.nodeName())
	require.Equal(t, "c", ok.label())
	require.Equal(t, LANTiming(), (&Config{}).timing())

	for name, mut := range map[string]func(*Config){
		"zero raft id":   func(c *Config) { c.Meta.RaftID = 0 },
		"no raft addr":   func(c *Config) { c.Meta.RaftAddr = "" },
		"no cluster id":  func(c *Config) { c.Meta.ClusterID = "" },
		"meta too large": func(c *Config) { c.Meta.Version = strings.Repeat("v", 600) },
		"bind port":      func(c *Config) { c.BindPort = 70000 },
		"bind name":      func(c *Config) { c.BindAddr = "localhost" },
		"advertise port": func(c *Config) { c.AdvertisePort = -1 },
		"long label":     func(c *Config) { c.Label = strings.Repeat("l", 256) },
		"empty seed":     func(c *Config) { c.Seeds = []string{""} },
		"bad timing":     func(c *Config) { c.Timing = Timing{ProbeInterval: time.Second} },
		"probe timeout":  func(c *Config) { c.Timing.ProbeTimeout = time.Hour },
	} {
		c := testConfig(1, "c")
		mut(&c)
		err := c.validate()
		require.ErrorIs(t, err, errInvalidConfig, name)
		_, err = Start(c)
		require.ErrorIs(t, err, errInvalidConfig, name)
	}
}

func TestSecretKeyLength(t *testing.T) {
	for _, n := range []int{16, 24, 32} {
		c := testConfig(1, "c")
		c.SecretKey = make([]byte, n)
		require.NoError(t, c.validate())
	}
	for _, n := range []int{1, 15, 17, 31, 33, 64} {
		c := testConfig(1, "c")
		c.SecretKey = make([]byte, n)
		err := c.validate()
		var kl *KeyLengthError
		require.True(t, errors.As(err, &kl), "len %d", n)
		require.Equal(t, n, kl.Len)
		require.ErrorIs(t, err, errInvalidConfig)
	}
}
