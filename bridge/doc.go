// Package bridge is the bridge from the message plane and the outbox to Temporal.
//
// The router (package router) admits messages and applies their ACKs in the store; the
// scheduler and the patterns keep their state in Temporal workflows. What crosses from one
// to the other crosses here, in every sw4rm process (frontend and worker alike, since any of
// them may apply an ACK, time a message out or relay another process's outbox entries):
//
//   - the messages agents address to the scheduler, taken by the dispatch table Scheduler
//     gives the router (router.SchedulerHandlers): non-preemptible sections (§7.2),
//     provider agents' answers to tool calls (§18.2) and the HITL agent's decisions (§15.2);
//   - the outbox entries the router writes with its own steps, built from its notices
//     (router.Notice): the ACKs of the scheduler's CONTROL messages, the beginning and end of
//     an agent's wait on a response (004 §2) and the events messages deliver to DAG runs
//     (§17.7);
//   - the handlers the outbox relay runs to deliver every kind of entry to its workflow
//     (RegisterOutboxHandlers), and NewOutboxEntry, which builds the entries the frontend's
//     services write with their own store writes.
//
// The router depends only on interfaces it defines; this package implements them, so the
// message plane never imports Temporal (docs/architecture.md, "The outbox").
package bridge
