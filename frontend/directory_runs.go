package frontend

import (
	"context"
	"strings"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/acl"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// dagRunsScanMax bounds how many executions one ListDAGRuns reads from Temporal's
// visibility while it looks for the runs an agent may see.
const dagRunsScanMax = 10 * protocol.MaxListLimit

// ListDAGRuns lists the runs of DAG workflows (§17.7) through Temporal's visibility: a run
// lives only in Temporal (its workflow dag/<workflow_id>), and visibility is what lists
// workflows. Executions that continued as new are left out — their latest execution stands
// for the run. The order is visibility's: open runs first, then closed ones, most recently
// closed first. An operator, or an anonymous caller that authentication off or optional
// lets through, sees every run; an agent the runs of the workflows whose definitions it
// created (a run has no other owner: §17.7 assigns its nodes to many agents) and, with an
// ACL file, of the workflows a rule grants it (scope dag:<workflow_id>). Visibility cannot
// filter by grant, so the runs are filtered after listing, reading at most dagRunsScanMax
// executions: a page may then hold fewer runs than the limit.
func (d *directoryService) ListDAGRuns(ctx context.Context, req *directorypb.ListDAGRunsRequest) (*directorypb.ListDAGRunsResponse, error) {
	if perr := protocol.ValidateListDAGRuns(req); perr != nil {
		return nil, perr
	}
	p := auth.FromContext(ctx)
	limit := protocol.ListLimit(req.GetLimit())
	// The filters are of the id charset and a fixed list of states (ValidateListDAGRuns),
	// so quoting them in the query needs no escaping.
	q := "SW4RMKind = '" + workflows.KindDAG + "' AND ExecutionStatus != 'ContinuedAsNew'"
	if pre := req.GetWorkflowIdPrefix(); pre != "" {
		q += " AND WorkflowId STARTS_WITH '" + workflows.DAGWorkflowID(pre) + "'"
	}
	if st := req.GetState(); st != "" {
		q += " AND " + workflows.DAGStateKey.GetName() + " = '" + st + "'"
	}
	mine := map[string]bool{} // workflow_id → whether the agent may list its runs
	out := &directorypb.ListDAGRunsResponse{}
	var token []byte
	for scanned := 0; len(out.Runs) < limit && scanned < dagRunsScanMax; {
		resp, err := d.s.temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: q, PageSize: int32(limit - len(out.Runs)), NextPageToken: token})
		if err != nil {
			return nil, temporalUnavailable("list the DAG runs", err)
		}
		for _, ex := range resp.GetExecutions() {
			scanned++
			id, _ := strings.CutPrefix(ex.GetExecution().GetWorkflowId(), workflows.DAGWorkflowID(""))
			if p.Operator == "" && p.Agent != "" {
				ok, known := mine[id]
				if !known {
					if ok, err = d.mayList(ctx, p, id); err != nil {
						return nil, err
					}
					mine[id] = ok
				}
				if !ok {
					continue
				}
			}
			run := &directorypb.DAGRun{WorkflowId: id, RunId: ex.GetExecution().GetRunId(), ExecutionStatus: ex.GetStatus().String(), // "Running", "Completed", … as the UI spells it
				StartedAt: ex.GetStartTime(), ClosedAt: ex.GetCloseTime()}
			if v, ok := ex.GetSearchAttributes().GetIndexedFields()[workflows.DAGStateKey.GetName()]; ok {
				_ = converter.GetDefaultDataConverter().FromPayload(v, &run.State) // a keyword; unreadable leaves it empty
			}
			if out.Runs = append(out.Runs, run); len(out.Runs) == limit {
				break
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	return out, nil
}

// createdBy reports whether principal created any stored version of the workflow's
// definition.
func (d *directoryService) createdBy(ctx context.Context, workflowID, principal string) (bool, error) {
	recs, err := d.s.store.Definitions().ListDefinitions(ctx, workflowID)
	if err != nil {
		return false, failed("definition lookup", err)
	}
	for _, r := range recs {
		if r.CreatedBy == principal {
			return true, nil
		}
	}
	return false, nil
}

// mayList reports whether agent principal p may list the runs of workflowID: it created a
// version of the definition, or the ACL grants it dag:<workflow_id>. A grant is an allowed
// access decision of the access log, once per workflow and listing; a run the agent may not
// see is left out of the page, not refused, so it writes no access.refused row.
func (d *directoryService) mayList(ctx context.Context, p auth.Principal, workflowID string) (bool, error) {
	ok, err := d.createdBy(ctx, workflowID, p.String())
	if err != nil || ok || d.s.cfg.ACL == nil {
		return ok, err
	}
	caps, err := d.s.capabilities(ctx, p.Agent)
	if err != nil {
		return false, failed("reading the capabilities of "+p.Agent, err)
	}
	scope := acl.DAGScope(workflowID)
	dec := d.s.cfg.ACL.Decide(acl.Request{Agent: p.Agent, Capabilities: caps, Action: acl.AccessScope, Scope: scope})
	if dec.Allowed {
		d.s.record(ctx, p, p.Agent, workflowID, decision{allowed: true, decidedBy: decidedByACL, acl: dec, reason: dec.Reason},
			map[string]any{"action": string(acl.AccessScope), "scope": scope, "verb": "list the runs of"})
	}
	return dec.Allowed, nil
}
