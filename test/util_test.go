package test

import "go.temporal.io/api/workflowservice/v1"

// listRequest builds a visibility query in the default namespace.
func listRequest(query string) *workflowservice.ListWorkflowExecutionsRequest {
	return &workflowservice.ListWorkflowExecutionsRequest{Namespace: "default", Query: query}
}
