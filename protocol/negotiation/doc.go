// Package negotiation holds the rules of scheduler-mediated negotiations (§17, §17.2, §17.3;
// Advanced Patterns §3.11.0): the intensity guardrails, the derivation of the effective
// policy, the validation of drafts with JSON Schema and executable examples, the structural
// delta between versions, the blended score, the stop rules and the tie-break.
//
// Everything here is pure and deterministic: no I/O, no clock, no randomness, and no result
// depends on Go's map iteration order. Temporal workflow code calls it directly; workflowcheck
// accepts it (the calls into encoding/json, protojson and the JSON Schema library, and the
// map walks whose results are sorted, carry justified //workflowcheck:ignore comments).
// docs/negotiation.md describes the same rules for readers of the protocol.
//
// # Intensity guardrails
//
// §17 requires intensity levels to map to "guardrails including round limits, time limits,
// and score thresholds". Each cell is min–max (default); the default policy of an intensity
// is the defaults, which sit at the permissive end of each range so that agent preferences
// can only tighten them:
//
//	knob                    LOWEST            LOW                MEDIUM               HIGH                  HIGHEST
//	max_rounds              1–2 (2)           1–4 (4)            2–6 (6)              2–9 (9)               3–12 (12)
//	score_threshold         0.6–0.8 (0.6)     0.65–0.85 (0.7)    0.7–0.9 (0.75)       0.75–0.95 (0.8)       0.8–1 (0.9)
//	diff_tolerance          0.2–0.5 (0.5)     0.15–0.4 (0.4)     0.1–0.3 (0.3)        0.05–0.2 (0.2)        0.02–0.15 (0.1)
//	round timeout           5s–30s (30s)      10s–1m (1m)        15s–3m (2m)          30s–5m (5m)           1m–10m (10m)
//	debate timeout          30s–2m (1m)       1m–8m (4m)         2m–30m (12m)         5m–90m (45m)          10m–4h (2h)
//	token_budget_per_round  256–4096 (2048)   512–8192 (4096)    1024–16384 (8192)    2048–32768 (16384)    4096–65536 (32768)
//	total_token_budget      1024–8192 (4096)  2048–32768 (16384) 4096–131072 (49152)  8192–524288 (147456)  16384–1048576 (393216)
//	oscillation_limit       1–1 (1)           1–2 (1)            1–2 (2)              1–3 (2)               1–3 (3)
//	hitl.mode               None              None               None                 PauseOnFinalAccept    PauseBetweenRounds
//	require_schema_valid    false             true               true                 true                  true
//	require_examples_pass   false             false              true                 true                  true
//	llm_weight              0.3               0.3                0.3                  0.3                   0.3
//
// The default debate timeout is the default rounds times the default round timeout, and the
// default total token budget the default rounds times the default per-round budget. hitl and
// scoring are defaults only, not bounded: a base or profile policy may replace them.
package negotiation
