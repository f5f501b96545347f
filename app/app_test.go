package app_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sw4rm/sw4rm-temporal/app"
)

// TestCheckStore: one role alone needs PostgreSQL; both roles in one process may use memory.
func TestCheckStore(t *testing.T) {
	memory, pg := app.DefaultConfig(), app.DefaultConfig()
	pg.DatabaseURL = "postgres://db/sw4rm"
	server, worker, dev := app.Roles{Server: true}, app.Roles{Worker: true}, app.Roles{Server: true, Worker: true}
	assert.NoError(t, app.CheckStore(memory, dev))
	assert.NoError(t, app.CheckStore(pg, dev))
	assert.NoError(t, app.CheckStore(pg, server))
	assert.NoError(t, app.CheckStore(pg, worker))
	assert.ErrorContains(t, app.CheckStore(memory, server), "`sw4rm server` needs SW4RM_DATABASE_URL")
	assert.ErrorContains(t, app.CheckStore(memory, worker), "`sw4rm worker` needs SW4RM_DATABASE_URL")
}
