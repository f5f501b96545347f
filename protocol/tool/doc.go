// Package tool holds the pure rules of tool calling (§18): descriptor validation (§18.1, §22),
// argument validation against a tool's input schema (§18.2), the effective execution policy
// with its defaults and the retry rule (§18.3, §18.5), the structured error codes of a
// TOOL_ERROR (§18.3, §18.6) and call_id rules (§18.2). Nothing here does I/O, reads the clock
// or generates randomness, so workflow code may call it.
package tool
