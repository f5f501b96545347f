package tool

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
)

func TestEffective(t *testing.T) {
	idem := desc(func(d *connectorpb.ToolDescriptor) { d.Idempotent = true })
	notIdem := desc(func(d *connectorpb.ToolDescriptor) { d.Idempotent = false })
	noTimeout := desc(func(d *connectorpb.ToolDescriptor) { d.DefaultTimeoutS = 0; d.Idempotent = true })
	needsWT := desc(func(d *connectorpb.ToolDescriptor) { d.NeedsWorktree = true })

	tests := []struct {
		name   string
		policy *toolpb.ExecutionPolicy
		d      *connectorpb.ToolDescriptor
		want   Policy
		err    string // substring of a VALIDATION_ERROR
	}{
		{"nil policy, no descriptor timeout: all defaults", nil, noTimeout,
			Policy{Timeout: DefaultTimeout, Network: NetworkDenyAll, Privilege: PrivilegeMinimal}, ""},
		{"descriptor default timeout", &toolpb.ExecutionPolicy{}, idem,
			Policy{Timeout: 30 * time.Second, Network: NetworkDenyAll, Privilege: PrivilegeMinimal}, ""},
		{"policy timeout wins", &toolpb.ExecutionPolicy{Timeout: durationpb.New(5 * time.Second)}, idem,
			Policy{Timeout: 5 * time.Second, Network: NetworkDenyAll, Privilege: PrivilegeMinimal}, ""},
		{"zero policy timeout falls back", &toolpb.ExecutionPolicy{Timeout: durationpb.New(0)}, idem,
			Policy{Timeout: 30 * time.Second, Network: NetworkDenyAll, Privilege: PrivilegeMinimal}, ""},
		{"negative timeout", &toolpb.ExecutionPolicy{Timeout: durationpb.New(-time.Second)}, idem, Policy{}, "timeout -1s is negative"},
		{"malformed timeout", &toolpb.ExecutionPolicy{Timeout: &durationpb.Duration{Seconds: 1, Nanos: -1}}, idem, Policy{}, "not a valid duration"},
		{"timeout too long", &toolpb.ExecutionPolicy{Timeout: durationpb.New(25 * time.Hour)}, idem, Policy{}, "more than 24h0m0s"},
		{"budgets", &toolpb.ExecutionPolicy{BudgetWallMs: 1500, BudgetCpuMs: 200}, idem,
			Policy{Timeout: 30 * time.Second, BudgetWall: 1500 * time.Millisecond, BudgetCPU: 200 * time.Millisecond, Network: NetworkDenyAll, Privilege: PrivilegeMinimal}, ""},
		{"wall budget too large", &toolpb.ExecutionPolicy{BudgetWallMs: 86_400_001}, idem, Policy{}, "budget_wall_ms 86400001"},
		{"cpu budget too large", &toolpb.ExecutionPolicy{BudgetCpuMs: 86_400_001}, idem, Policy{}, "budget_cpu_ms 86400001"},
		{"network egress restricted", &toolpb.ExecutionPolicy{NetworkPolicy: "EGRESS_RESTRICTED"}, idem,
			Policy{Timeout: 30 * time.Second, Network: NetworkEgressRestricted, Privilege: PrivilegeMinimal}, ""},
		{"network case-insensitive", &toolpb.ExecutionPolicy{NetworkPolicy: " egress_unrestricted "}, idem,
			Policy{Timeout: 30 * time.Second, Network: NetworkEgressUnrestricted, Privilege: PrivilegeMinimal}, ""},
		{"network full access", &toolpb.ExecutionPolicy{NetworkPolicy: "FULL_ACCESS"}, idem,
			Policy{Timeout: 30 * time.Second, Network: NetworkFullAccess, Privilege: PrivilegeMinimal}, ""},
		{"network unknown", &toolpb.ExecutionPolicy{NetworkPolicy: "ALLOW_ALL"}, idem, Policy{}, `network_policy "ALLOW_ALL" is not one of`},
		{"privilege default", &toolpb.ExecutionPolicy{PrivilegeLevel: "DEFAULT"}, idem,
			Policy{Timeout: 30 * time.Second, Network: NetworkDenyAll, Privilege: PrivilegeDefault}, ""},
		{"privilege full access", &toolpb.ExecutionPolicy{PrivilegeLevel: "full_access"}, idem,
			Policy{Timeout: 30 * time.Second, Network: NetworkDenyAll, Privilege: PrivilegeFullAccess}, ""},
		{"privilege unknown", &toolpb.ExecutionPolicy{PrivilegeLevel: "ROOT"}, idem, Policy{}, `privilege_level "ROOT" is not one of`},
		{"worktree from policy", &toolpb.ExecutionPolicy{WorktreeRequired: true}, idem,
			Policy{Timeout: 30 * time.Second, Network: NetworkDenyAll, Privilege: PrivilegeMinimal, WorktreeRequired: true}, ""},
		{"worktree from descriptor", nil, needsWT,
			Policy{Timeout: 30 * time.Second, Network: NetworkDenyAll, Privilege: PrivilegeMinimal, WorktreeRequired: true}, ""},
		{"retries for idempotent, exponential default", &toolpb.ExecutionPolicy{MaxRetries: 3}, idem,
			Policy{Timeout: 30 * time.Second, Network: NetworkDenyAll, Privilege: PrivilegeMinimal, MaxRetries: 3, Backoff: BackoffExponential}, ""},
		{"retries fixed backoff", &toolpb.ExecutionPolicy{MaxRetries: 2, Backoff: "Fixed"}, idem,
			Policy{Timeout: 30 * time.Second, Network: NetworkDenyAll, Privilege: PrivilegeMinimal, MaxRetries: 2, Backoff: BackoffFixed}, ""},
		{"backoff without retries is dropped", &toolpb.ExecutionPolicy{Backoff: "fixed"}, idem,
			Policy{Timeout: 30 * time.Second, Network: NetworkDenyAll, Privilege: PrivilegeMinimal}, ""},
		{"non-idempotent never retried", &toolpb.ExecutionPolicy{MaxRetries: 3, Backoff: "exponential"}, notIdem,
			Policy{Timeout: 30 * time.Second, Network: NetworkDenyAll, Privilege: PrivilegeMinimal,
				Notes: []string{`max_retries 3 ignored: tool "read_file" is not idempotent and is never retried (§18.3)`}}, ""},
		{"too many retries", &toolpb.ExecutionPolicy{MaxRetries: MaxRetries + 1}, idem, Policy{}, "max_retries 11 is more than 10"},
		{"unknown backoff", &toolpb.ExecutionPolicy{MaxRetries: 1, Backoff: "linear"}, idem, Policy{}, `backoff "linear" is not one of`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Effective(tt.policy, tt.d)
			if tt.err != "" {
				if err == nil || CodeOf(err) != CodeValidation || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want VALIDATION_ERROR containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Effective =\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
}

func TestApprovalAndEscalation(t *testing.T) {
	tests := []struct {
		level              string
		approval, escalate bool
	}{
		{"", false, false},
		{"MINIMAL", false, false},
		{"DEFAULT", false, false},
		{"ELEVATED", false, true},
		{"PRIVILEGED", true, true},
		{"FULL_ACCESS", true, true},
	}
	for _, tt := range tests {
		p, err := Effective(&toolpb.ExecutionPolicy{PrivilegeLevel: tt.level}, desc(nil))
		if err != nil {
			t.Fatalf("%s: %v", tt.level, err)
		}
		if p.NeedsApproval() != tt.approval || p.Escalated() != tt.escalate {
			t.Errorf("%q: NeedsApproval=%v Escalated=%v, want %v %v", tt.level, p.NeedsApproval(), p.Escalated(), tt.approval, tt.escalate)
		}
	}
}

func TestPrivilegeLevelString(t *testing.T) {
	var names []string
	for _, l := range PrivilegeLevels() {
		names = append(names, l.String())
	}
	if strings.Join(names, ",") != "MINIMAL,DEFAULT,ELEVATED,PRIVILEGED,FULL_ACCESS" {
		t.Errorf("levels = %v", names)
	}
	if got := PrivilegeLevel(0).String(); got != "PrivilegeLevel(0)" {
		t.Errorf("zero level = %q", got)
	}
}

func TestDeadlineAndRetryShape(t *testing.T) {
	tests := []struct {
		name     string
		p        Policy
		wantD    time.Duration
		wantCode Code
	}{
		{"no wall budget", Policy{Timeout: 10 * time.Second}, 10 * time.Second, CodeToolTimeout},
		{"wall budget shorter", Policy{Timeout: 10 * time.Second, BudgetWall: 2 * time.Second}, 2 * time.Second, CodeWallTimeout},
		{"wall budget equal", Policy{Timeout: 2 * time.Second, BudgetWall: 2 * time.Second}, 2 * time.Second, CodeWallTimeout},
		{"wall budget longer", Policy{Timeout: 2 * time.Second, BudgetWall: 9 * time.Second}, 2 * time.Second, CodeToolTimeout},
	}
	for _, tt := range tests {
		d, c := tt.p.Deadline()
		if d != tt.wantD || c != tt.wantCode {
			t.Errorf("%s: Deadline = %s %s, want %s %s", tt.name, d, c, tt.wantD, tt.wantCode)
		}
	}
	if p := (Policy{MaxRetries: 3, Backoff: BackoffExponential}); p.MaximumAttempts() != 4 || p.BackoffCoefficient() != 2 {
		t.Errorf("exponential: attempts %d coefficient %v", p.MaximumAttempts(), p.BackoffCoefficient())
	}
	if p := (Policy{MaxRetries: 1, Backoff: BackoffFixed}); p.BackoffCoefficient() != 1 {
		t.Errorf("fixed coefficient %v", p.BackoffCoefficient())
	}
	if p := (Policy{}); p.MaximumAttempts() != 1 {
		t.Errorf("no retries: attempts %d", p.MaximumAttempts())
	}
}
