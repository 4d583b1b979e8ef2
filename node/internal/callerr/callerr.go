// Package callerr builds the errors that an Acquire returns for reasons of
// its own making (an outage, a leased grant given back), so that errors.Is
// agrees with what their text says and IsRetryable with what a caller
// should do.
package callerr

import (
	"errors"
	"fmt"

	"github.com/lockraft/lockraft/internal/lockerr"
)

// InOutage is err as an Acquire returns it: a call failed because this
// node's session lapsed (lockerr.ErrSessionExpired) while the node had no
// leader (leaderless, asked only then) also wraps lockerr.ErrUnavailable:
// the session lapsed because of the outage, and the call is worth retrying
// once a leader is back. Any other err is returned as is.
func InOutage(err error, leaderless func() bool) error {
	if errors.Is(err, lockerr.ErrSessionExpired) && leaderless() {
		return fmt.Errorf("%w: no leader: %w", lockerr.ErrUnavailable, err)
	}
	return err
}

// GivenBack is the error of an Acquire whose leased grant was given back
// because the renewal that had to confirm it failed with cause (or came
// too late). It wraps lockerr.ErrLeaseExpired and cause (so that
// "cluster unavailable" in its text is lockerr.ErrUnavailable), except
// lockerr.ErrNotHeld, which is about a handle the caller never got: only
// what cause says beyond it (the session expired, say) is kept.
func GivenBack(cause error) error {
	if errors.Is(cause, lockerr.ErrNotHeld) {
		if why := unwrapOnce(cause); why != nil {
			return fmt.Errorf("%w: the grant was lost before it could be handed out: %w", lockerr.ErrLeaseExpired, why)
		}
		return fmt.Errorf("%w: the grant was lost before it could be handed out", lockerr.ErrLeaseExpired)
	}
	return fmt.Errorf("%w: %w", lockerr.ErrLeaseExpired, cause)
}

// unwrapOnce is what an error made as fmt.Errorf("%w: %w", ErrNotHeld,
// why) wraps besides ErrNotHeld (nil if nothing).
func unwrapOnce(err error) error {
	if m, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range m.Unwrap() {
			if !errors.Is(e, lockerr.ErrNotHeld) {
				return e
			}
		}
	}
	return nil
}
