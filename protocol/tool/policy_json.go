package tool

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sw4rm/sw4rm-temporal/protocol/jsonform"
)

// A policy travels in a tool call's workflow input, which the Temporal UI shows: its JSON
// names the privilege level ("PRIVILEGED", not 4) and writes durations as text ("5m0s", not
// 300000000000). The decoders also read the numbers that encoding/json wrote before, which
// recorded histories and the outbox's pending entries hold.

// MarshalJSON writes the level's name (§18.5.3); a level without a name stays a number.
func (p PrivilegeLevel) MarshalJSON() ([]byte, error) {
	if p < PrivilegeMinimal || p > PrivilegeFullAccess {
		return json.Marshal(int(p))
	}
	return jsonform.MarshalEnum(p.String())
}

// UnmarshalJSON reads a level by name or by number.
func (p *PrivilegeLevel) UnmarshalJSON(data []byte) error {
	values := make(map[string]int32, len(privilegeNames))
	for i, n := range privilegeNames {
		if n != "" {
			values[n] = int32(i)
		}
	}
	n, err := jsonform.UnmarshalEnum(data, values)
	if err != nil {
		return fmt.Errorf("privilege level: %w", err)
	}
	*p = PrivilegeLevel(n)
	return nil
}

// MarshalJSON writes Timeout, BudgetWall and BudgetCPU as text.
func (p Policy) MarshalJSON() ([]byte, error) {
	type plain Policy
	// The outer fields hide the embedded ones (encoding/json takes the shallower field).
	return json.Marshal(struct {
		plain
		Timeout    jsonform.Duration
		BudgetWall jsonform.Duration
		BudgetCPU  jsonform.Duration
	}{plain(p), jsonform.Duration(p.Timeout), jsonform.Duration(p.BudgetWall), jsonform.Duration(p.BudgetCPU)})
}

// UnmarshalJSON reads the durations as text or as nanoseconds.
func (p *Policy) UnmarshalJSON(data []byte) error {
	type plain Policy
	v := struct {
		*plain
		Timeout    jsonform.Duration
		BudgetWall jsonform.Duration
		BudgetCPU  jsonform.Duration
	}{plain: (*plain)(p)}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	p.Timeout, p.BudgetWall, p.BudgetCPU = time.Duration(v.Timeout), time.Duration(v.BudgetWall), time.Duration(v.BudgetCPU)
	return nil
}
