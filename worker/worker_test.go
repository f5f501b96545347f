package worker

import (
	"errors"
	"fmt"
	"testing"

	"go.temporal.io/api/serviceerror"
)

// Search-attribute registration retries what a starting or busy server answers, and gives up
// at once on what retrying cannot change.
func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{serviceerror.NewUnavailable("starting"), true},
		{serviceerror.NewInternal("GetNamespace operation failed. Error interrupted (9)"), true},
		{serviceerror.NewDeadlineExceeded("slow"), true},
		{fmt.Errorf("list search attributes: %w", serviceerror.NewUnavailable("wrapped")), true},
		{serviceerror.NewPermissionDenied("no", ""), false},
		{serviceerror.NewInvalidArgument("bad name"), false},
		{errors.New("plain"), false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
