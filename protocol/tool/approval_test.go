package tool

import (
	"strings"
	"testing"
)

// TestApprovalReasons: ELEVATED and above (§18.5.3) and network FULL_ACCESS (§18.5.2) need
// an operator's approval; DEFAULT and MINIMAL with any other network policy do not.
func TestApprovalReasons(t *testing.T) {
	for _, tt := range []struct {
		privilege PrivilegeLevel
		network   NetworkPolicy
		want      string
	}{
		{PrivilegeMinimal, NetworkDenyAll, ""},
		{PrivilegeDefault, NetworkEgressUnrestricted, ""},
		{PrivilegeDefault, NetworkEgressRestricted, ""},
		{PrivilegeElevated, NetworkDenyAll, "privilege_level ELEVATED"},
		{PrivilegePrivileged, NetworkDenyAll, "privilege_level PRIVILEGED"},
		{PrivilegeFullAccess, NetworkDenyAll, "privilege_level FULL_ACCESS"},
		{PrivilegeDefault, NetworkFullAccess, "network_policy FULL_ACCESS (the host's network, inbound and outbound)"},
		{PrivilegeElevated, NetworkFullAccess, "privilege_level ELEVATED; network_policy FULL_ACCESS (the host's network, inbound and outbound)"},
	} {
		p := Policy{Privilege: tt.privilege, Network: tt.network}
		if got := strings.Join(p.ApprovalReasons(), "; "); got != tt.want {
			t.Errorf("%s/%s: reasons %q, want %q", tt.privilege, tt.network, got, tt.want)
		}
	}
}
