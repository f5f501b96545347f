package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// unavailable wraps err with store.ErrUnavailable when it says the database could not be
// reached or went away — a retry may then succeed — and returns it unchanged otherwise (a
// refusal of the statement or its data, or the caller's own cancellation).
func unavailable(err error) error {
	if err == nil || !isUnavailable(err) {
		return err
	}
	return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
}

// isUnavailable reports whether err is a failure of the connection or the server rather
// than of the statement.
func isUnavailable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08: connection exception; class 57: operator intervention (admin_shutdown,
		// crash_shutdown, cannot_connect_now); 53300: too_many_connections.
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57") || pgErr.Code == "53300"
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connErr) || errors.As(err, &netErr) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded)
}
