package metrics

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// promqlWords are PromQL's keywords and modifiers: identifiers that are never metric names.
var promqlWords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true,
	// Aggregations, which may be followed by a by or without clause before their "(".
	"sum": true, "min": true, "max": true, "avg": true, "count": true, "stddev": true, "stdvar": true, "group": true,
	"topk": true, "bottomk": true, "quantile": true, "count_values": true, "limitk": true, "limit_ratio": true,
}

// QueryNames returns the metric names a PromQL expression selects, histogram series
// (_bucket, _sum, _count) under their own names. It is a lexer, not a parser, enough for
// the dashboards in deploy/: identifiers followed by "(" are functions, label matchers
// ({…}), ranges ([…]), strings and the label lists of by/without/on/ignoring/group_* are
// skipped.
func QueryNames(expr string) []string {
	var names []string
	skipList := false // the next (…) is a label list
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' {
					j++
				}
				j++
			}
			i = j + 1
		case c == '{' || c == '[':
			end := map[byte]byte{'{': '}', '[': ']'}[c]
			for i < len(expr) && expr[i] != end {
				i++
			}
			i++
		case c == '(' && skipList:
			for i < len(expr) && expr[i] != ')' {
				i++
			}
			i++
			skipList = false
		case isIdentStart(c):
			j := i
			for j < len(expr) && (isIdentStart(expr[j]) || (expr[j] >= '0' && expr[j] <= '9') || expr[j] == ':') {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && expr[k] == ' ' {
				k++
			}
			lower := strings.ToLower(word)
			switch {
			case lower == "by" || lower == "without" || lower == "on" || lower == "ignoring" || lower == "group_left" || lower == "group_right":
				skipList = true
			case promqlWords[lower], k < len(expr) && expr[k] == '(':
				// a keyword, or a function or aggregation
			case strings.HasPrefix(word, "$"):
			default:
				names = append(names, word)
			}
			i = j
		case c == '$': // a Grafana variable: $__rate_interval, $agent
			j := i + 1
			for j < len(expr) && (isIdentStart(expr[j]) || (expr[j] >= '0' && expr[j] <= '9')) {
				j++
			}
			i = j
		case c >= '0' && c <= '9':
			// a number, or a duration such as 5m or 1e3
			for i < len(expr) && (isIdentStart(expr[i]) || (expr[i] >= '0' && expr[i] <= '9') || expr[i] == '.') {
				i++
			}
		default:
			i++
		}
	}
	return names
}

func isIdentStart(c byte) bool { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }

// DashboardQueries returns every PromQL expression ("expr" of a target) in a Grafana
// dashboard's JSON, panels in rows included.
func DashboardQueries(dashboard []byte) ([]string, error) {
	var d struct {
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(dashboard, &d); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	var out []string
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				if t.Expr != "" {
					out = append(out, t.Expr)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out, nil
}

type dashboardPanel struct {
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"`
}

// Described returns the names of the metric families this process's Prometheus collectors
// describe — every series they may ever expose, a histogram as its _bucket, _sum and
// _count series — whether or not a series has been recorded yet. The Temporal SDK's
// metrics are not among them: they exist once the SDK records them (TemporalHandler).
func (m *Router) Described() []string {
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range m.collectors {
			c.Describe(ch)
		}
		close(ch)
	}()
	set := map[string]bool{}
	for d := range ch {
		// Desc's String is `Desc{fqName: "name", help: …}`.
		s := d.String()
		_, rest, ok := strings.Cut(s, `fqName: "`)
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, `"`)
		set[name] = true
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			set[name+suffix] = true
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
