package callerr

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/lockerr"
)

func TestInOutage(t *testing.T) {
	yes, no := func() bool { return true }, func() bool { return false }
	err := InOutage(lockerr.ErrSessionExpired, yes)
	require.ErrorIs(t, err, lockerr.ErrUnavailable)
	require.ErrorIs(t, err, lockerr.ErrSessionExpired)
	require.Equal(t, lockerr.ErrSessionExpired, InOutage(lockerr.ErrSessionExpired, no), "a leader is known")
	require.Equal(t, lockerr.ErrLocked, InOutage(lockerr.ErrLocked, yes))
	require.NoError(t, InOutage(nil, yes))
}

// TestGivenBack: the cause is kept for errors.Is (an unavailable renewal is
// lockerr.ErrUnavailable), but not lockerr.ErrNotHeld: the caller never had
// the handle it is about.
func TestGivenBack(t *testing.T) {
	err := GivenBack(fmt.Errorf("%w: %v", lockerr.ErrUnavailable, errors.New("rpc error")))
	require.ErrorIs(t, err, lockerr.ErrLeaseExpired)
	require.ErrorIs(t, err, lockerr.ErrUnavailable)

	err = GivenBack(fmt.Errorf("%w: %w", lockerr.ErrNotHeld, lockerr.ErrSessionExpired))
	require.ErrorIs(t, err, lockerr.ErrLeaseExpired)
	require.ErrorIs(t, err, lockerr.ErrSessionExpired)
	require.NotErrorIs(t, err, lockerr.ErrNotHeld)

	err = GivenBack(lockerr.ErrNotHeld)
	require.ErrorIs(t, err, lockerr.ErrLeaseExpired)
	require.NotErrorIs(t, err, lockerr.ErrNotHeld)

	err = GivenBack(errors.New("lease ran out before the grant could be handed out"))
	require.ErrorIs(t, err, lockerr.ErrLeaseExpired)
	require.NotErrorIs(t, err, lockerr.ErrUnavailable)
}
