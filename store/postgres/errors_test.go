package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/store"
)

func TestUnavailableClassifiesOutagesOnly(t *testing.T) {
	for _, err := range []error{
		&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"},
		&pgconn.PgError{Code: "08006"},
		fmt.Errorf("read: %w", io.ErrUnexpectedEOF),
		context.DeadlineExceeded,
	} {
		require.ErrorIs(t, unavailable(err), store.ErrUnavailable, "%v is an outage", err)
	}
	for _, err := range []error{
		&pgconn.PgError{Code: "22021", Message: "invalid byte sequence for encoding UTF8"},
		&pgconn.PgError{Code: "23505"},
		context.Canceled,
		errors.New("marshal details"),
	} {
		require.NotErrorIs(t, unavailable(err), store.ErrUnavailable, "%v is not an outage", err)
	}
	require.NoError(t, unavailable(nil))
}
