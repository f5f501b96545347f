package workflows

// TracedSignals are the signals whose spans a workflow takes (telemetry.TakeSignalSpan) to
// join the trace of the work they bring: a long-lived workflow such as an agent's lifecycle
// would otherwise put everything it does in one trace for its whole life. Every other
// signal's span still joins its sender's trace, as the Temporal tracing interceptor does.
var TracedSignals = []string{AgentTaskEnqueueSignal}
