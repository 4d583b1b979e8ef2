package fleet

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKnowsCatalogue(t *testing.T) {
	for v, want := range map[string]bool{"lockraft/0.2": true, "lockraft/0.3": true, "lockraft/0.10": true, "lockraft/1.0": true,
		"lockraft/0.1": false, "": false, "lockraft/": false, "other/0.3": false, "lockraft/0.2-rc1": true} {
		require.Equal(t, want, knowsCatalogue(v), v)
	}
}
