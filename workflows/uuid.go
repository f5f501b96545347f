package workflows

import "github.com/google/uuid"

// newUUID is called only inside workflow.SideEffect, whose recorded result keeps replay
// deterministic.
func newUUID() string { return uuid.NewString() }
