package node

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/lockerr"
)

// A Hold makes its Context only when asked (the lock path then costs no
// context per hold). Whenever it is asked, before, between or after the
// hold's own end and its parent's (the session or the lease running out), the
// Context must say what a context made with the hold would: the first end
// that happened, its cause, and Done closed (S5: the holder is told why its
// lock was lost). Checked against such a context for every order of the
// three, and with either end missing.
func TestHoldContextMadeLateSaysWhatAnEagerOneWould(t *testing.T) {
	const (
		parentEnds = "parent ends"
		holdEnds   = "hold ends"
		asked      = "asked"
	)
	orders := [][]string{
		{asked},
		{parentEnds, asked},
		{holdEnds, asked},
		{asked, parentEnds},
		{asked, holdEnds},
	}
	for _, a := range []string{parentEnds, holdEnds, asked} {
		for _, b := range []string{parentEnds, holdEnds, asked} {
			for _, c := range []string{parentEnds, holdEnds, asked} {
				if a != b && b != c && a != c {
					orders = append(orders, []string{a, b, c})
				}
			}
		}
	}
	for _, order := range orders {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			parent, endParent := context.WithCancelCause(context.Background())
			defer endParent(nil)
			h := &Hold{name: "n", parent: parent}
			eager, endEager := context.WithCancelCause(parent)
			var got context.Context
			for _, step := range order {
				switch step {
				case parentEnds:
					endParent(lockerr.ErrSessionExpired)
				case holdEnds:
					h.end(lockerr.ErrReleased)
					endEager(lockerr.ErrReleased)
				case asked:
					got = h.Context()
				}
				require.Equal(t, context.Cause(eager), h.endCause(), "after %q", step)
			}
			require.Same(t, got, h.Context(), "every call returns the one context")
			require.Equal(t, context.Cause(eager), context.Cause(got))
			require.Equal(t, eager.Err(), got.Err())
			if eager.Err() != nil {
				select {
				case <-got.Done():
				default:
					t.Fatal("the hold ended and its Context's Done is open")
				}
			}
			// A second end changes nothing, as a context's second cancel does not.
			h.end(errors.New("later"))
			endEager(errors.New("later"))
			require.Equal(t, context.Cause(eager), context.Cause(got))
		})
	}
}
