package lockfsm

import (
	"errors"
	"fmt"
	"testing"
)

// TestErrorCodes: the one-byte codes stored in retained results (bbolt and snapshots) never change meaning
// (S7 across versions: the old version's codes 1..13 are as they were), every sentinel round-trips through
// ErrorCode and ErrorForCode, wrapped errors map to their sentinel and foreign ones to 255.
func TestErrorCodes(t *testing.T) {
	old := []error{nil, errBadCommand, errUnsupported, ErrInvalidName, ErrInvalidOwner, ErrNoSession, ErrLocked,
		ErrNotHolder, ErrTooManyHolds, ErrAlreadyWaiting, errStaleSequence, errCancelled, errAlreadyApplied,
		errCorrupt}
	for c, e := range old {
		if got := ErrorCode(e); got != uint8(c) {
			t.Fatalf("%v: code %d, was %d", e, got, c)
		}
	}
	for c := range 256 {
		e, ok := ErrorForCode(uint8(c))
		if !ok {
			if c < len(errCodes) {
				t.Fatalf("code %d unknown", c)
			}
			continue
		}
		if ErrorCode(e) != uint8(c) || errToCode(e) != uint8(c) {
			t.Fatalf("code %d: %v does not round-trip", c, e)
		}
	}
	if got := ErrorCode(fmt.Errorf("context: %w", ErrWrongKind)); got != errToCode(ErrWrongKind) {
		t.Fatalf("wrapped: %d", got)
	}
	if got := ErrorCode(errors.New("other")); got != 255 {
		t.Fatalf("foreign error: %d", got)
	}
}
