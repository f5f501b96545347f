package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
)

// defaultTick is sleep's tick when tick_ms is absent.
const defaultTick = 100 * time.Millisecond

// echo answers its arguments unchanged: the cheapest possible call, for measuring what the
// call machinery itself costs.
func (p *Provider) echo(_ context.Context, req tools.Request, _ tools.Emit) (tools.Result, error) {
	args := bytes.TrimSpace(req.Args)
	if len(args) == 0 {
		args = []byte("{}")
	}
	if !json.Valid(args) {
		return tools.Result{}, tool.Errorf(tool.CodeValidation, "tool %q: the arguments are not JSON", req.ToolName)
	}
	return tools.Result{ContentType: ContentTypeJSON, Data: bytes.Clone(args)}, nil
}

type sleepArgs struct {
	MS     *int64 `json:"ms"`
	TickMS int64  `json:"tick_ms"`
}

type sleepTick struct {
	ElapsedMS int64 `json:"elapsed_ms"`
}

type sleepResult struct {
	SleptMS int64 `json:"slept_ms"`
}

// sleep waits ms milliseconds, emitting {"elapsed_ms": n} every tick, and ends early with
// CANCELLED or TOOL_TIMEOUT when ctx ends: a tool whose timing tests control, for
// cancellation, timeouts and worker crashes.
func (p *Provider) sleep(ctx context.Context, req tools.Request, emit tools.Emit) (tools.Result, error) {
	var a sleepArgs
	if err := decodeArgs(req, &a); err != nil {
		return tools.Result{}, err
	}
	if a.MS == nil || *a.MS < 0 {
		return tools.Result{}, tool.Errorf(tool.CodeValidation, "tool %q: ms must be a number of milliseconds, 0 or more", req.ToolName)
	}
	tick := defaultTick
	if a.TickMS != 0 {
		if a.TickMS < 10 {
			// A tick is a stored frame; a flood of them is refused as the schema refuses it.
			return tools.Result{}, tool.Errorf(tool.CodeValidation, "tool %q: tick_ms must be at least 10", req.ToolName)
		}
		tick = time.Duration(a.TickMS) * time.Millisecond
	}
	start := time.Now()
	done := time.NewTimer(time.Duration(*a.MS) * time.Millisecond)
	defer done.Stop()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return tools.Result{}, ctxError(ctx, req.ToolName)
		case <-done.C:
			return jsonResult(req.ToolName, sleepResult{SleptMS: time.Since(start).Milliseconds()})
		case <-ticker.C:
			b, err := json.Marshal(sleepTick{ElapsedMS: time.Since(start).Milliseconds()})
			if err != nil {
				return tools.Result{}, tool.Errorf(tool.CodeInternal, "tool %q: %v", req.ToolName, err)
			}
			if err := emit(ctx, ContentTypeJSON, b); err != nil {
				if ctx.Err() != nil {
					return tools.Result{}, ctxError(ctx, req.ToolName)
				}
				// Emit fails when the call can take no more frames: it was cancelled.
				return tools.Result{}, tool.Errorf(tool.CodeCancelled, "tool %q: the call takes no more frames: %v", req.ToolName, err)
			}
		}
	}
}
