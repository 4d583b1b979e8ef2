package membership

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMetaRoundTrip(t *testing.T) {
	for _, m := range []Meta{
		{RaftID: 1, RaftAddr: "a:1", ClusterID: "c"},
		{RaftID: ^uint64(0), RaftAddr: "[::1]:9000", ClusterID: "prod-eu", Version: "v1.2.3", HasData: true},
		{RaftID: 9, RaftAddr: "a:1", ClusterID: "c", Formation: "0123456789abcdef0123456789abcdef", HasData: true},
	} {
		for _, leaving := range []bool{false, true} {
			b, err := m.encode(leaving)
			require.NoError(t, err)
			require.Equal(t, metaVersion, b[0])
			got, l, err := decodeMeta(b)
			require.NoError(t, err)
			require.Equal(t, m, got)
			require.Equal(t, leaving, l)
			// Trailing bytes (fields a newer writer appended) are ignored.
			got, _, err = decodeMeta(append(b, 7, 7, 7))
			require.NoError(t, err)
			require.Equal(t, m, got)
		}
	}
}

// Metadata written before Formation existed (version 1 without the field)
// still decodes, with Formation "": a fleet can be upgraded member by member.
func TestMetaWithoutFormationDecodes(t *testing.T) {
	old := []byte{1, flagHasData, 5, 3, 'a', ':', '1', 1, 'c', 2, 'v', '1'}
	m, leaving, err := decodeMeta(old)
	require.NoError(t, err)
	require.False(t, leaving)
	require.Equal(t, Meta{RaftID: 5, RaftAddr: "a:1", ClusterID: "c", Version: "v1", HasData: true}, m)
	_, _, err = decodeMeta(append(old, 40, 'x')) // a formation longer than what is left
	require.Error(t, err)
}

// The largest metadata lockraft writes fits memberlist's 512 bytes: a
// 128-byte ClusterID (Config's limit), a long address and version, and a
// formation id.
func TestMetaLargestFits(t *testing.T) {
	m := Meta{RaftID: ^uint64(0), RaftAddr: strings.Repeat("h", 253) + ":65535", ClusterID: strings.Repeat("c", 128),
		Version: "lockraft/0.1", Formation: strings.Repeat("f", 32), HasData: true}
	b, err := m.encode(true)
	require.NoError(t, err)
	require.LessOrEqual(t, len(b), maxMetaSize)
}

func TestMetaTooLarge(t *testing.T) {
	m := Meta{RaftID: 1, RaftAddr: "a:1", ClusterID: "c", Version: strings.Repeat("x", 510)}
	_, err := m.encode(false)
	require.ErrorIs(t, err, errMetaTooLarge)
	m.Version = strings.Repeat("x", 490)
	b, err := m.encode(true)
	require.NoError(t, err)
	require.LessOrEqual(t, len(b), maxMetaSize)
}

func TestDecodeMetaRejectsGarbage(t *testing.T) {
	good, err := Meta{RaftID: 5, RaftAddr: "a:1", ClusterID: "c"}.encode(false)
	require.NoError(t, err)
	cases := map[string][]byte{
		"nil":          nil,
		"one byte":     {1},
		"version 2":    append([]byte{2}, good[1:]...),
		"truncated":    good[:len(good)-2], // inside Version (dropping only the Formation is an older writer)
		"bad varint":   {1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"huge length":  {1, 0, 5, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"zero raft id": {1, 0, 0, 3, 'a', ':', '1', 1, 'c', 0},
		"no cluster":   {1, 0, 5, 3, 'a', ':', '1', 0, 0},
	}
	for name, b := range cases {
		_, _, err := decodeMeta(b)
		require.Error(t, err, name)
	}
}

func FuzzDecodeMeta(f *testing.F) {
	good, _ := Meta{RaftID: 5, RaftAddr: "a:1", ClusterID: "c", Version: "v", HasData: true}.encode(true)
	f.Add(good)
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, leaving, err := decodeMeta(b)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to something that decodes the same.
		again, err := m.encode(leaving)
		if err != nil {
			return // may exceed the size limit only if the input did
		}
		m2, l2, err := decodeMeta(again)
		require.NoError(t, err)
		require.Equal(t, m, m2)
		require.Equal(t, leaving, l2)
	})
}
