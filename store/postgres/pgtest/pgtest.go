// Package pgtest gives tests a fresh, empty PostgreSQL database of their own.
//
// The server is found through the admin URL in SW4RM_TEST_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). When it is unreachable the
// test is skipped, except under CI (CI=true), where the test fails: CI must run the PostgreSQL
// tests, not silently skip them.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names the environment variable holding the admin connection URL.
const EnvURL = "SW4RM_TEST_DATABASE_URL"

// DefaultURL is the admin URL used when EnvURL is not set: the local trust-auth server that
// the Makefile and CI start.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// AdminURL returns the admin connection URL from the environment, or DefaultURL.
func AdminURL() string {
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	return DefaultURL
}

// NewDatabase creates a database named sw4rm_test_<random> and returns its URL. The database
// is dropped (WITH (FORCE), so leftover connections do not block it) when the test and all its
// subtests finish; close whatever you opened on it with t.Cleanup registered after this call,
// so it runs first.
func NewDatabase(t testing.TB) string {
	t.Helper()
	admin := AdminURL()
	if err := knownUnreachable(admin); err != nil {
		unavailable(t, admin, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		rememberUnreachable(admin, err)
		unavailable(t, admin, err)
	}
	defer conn.Close(context.Background())

	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "sw4rm_test_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("pgtest: drop database %s: connect: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})

	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("pgtest: parse %s: %v", EnvURL, err)
	}
	u.Path = "/" + name
	return u.String()
}

// unreachable remembers, per admin URL, why the server could not be reached, so a suite of
// many tests skips at once instead of waiting for a connect timeout in every test.
var unreachable sync.Map // admin URL -> error

func knownUnreachable(admin string) error {
	if err, ok := unreachable.Load(admin); ok {
		return err.(error)
	}
	return nil
}

func rememberUnreachable(admin string, err error) {
	unreachable.LoadOrStore(admin, err)
}

// unavailable skips the test, or fails it under CI, because PostgreSQL cannot be reached.
func unavailable(t testing.TB, admin string, err error) {
	t.Helper()
	msg := "pgtest: PostgreSQL is unreachable at " + redact(admin) + " (set " + EnvURL + "): " + err.Error()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + "; CI must run the PostgreSQL tests")
	}
	t.Skip(msg)
}

// redact hides a password in the URL before it is logged.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<" + EnvURL + ">"
	}
	return u.Redacted()
}
