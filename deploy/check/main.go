// Command check checks SW4RM's deploy files without a Docker engine or a Kubernetes cluster,
// and without the network:
//
//   - docker-compose.yml through the compose specification's own loader (compose-go), which
//     validates it against the compose JSON schema and checks that what its services name
//     (other services, volumes, networks, profiles) exists;
//   - every manifest deploy/k8s/kustomization.yaml lists, decoded strictly into the
//     Kubernetes API's Go types (an unknown or repeated field is refused) and validated
//     against the API's OpenAPI v3 schemas where client-go ships them (core, apps and batch:
//     required fields, types), then checked for what a schema cannot see (selectors that
//     select, probes on declared ports, references to ConfigMaps and Secrets that exist);
//   - the SW4RM_* variables of both against the settings table (`sw4rm settings --names`):
//     each must be a setting, and every sw4rm server and worker must be given the ones a
//     deployment cannot do without.
//
// It is a module of its own so that the main module does not depend on compose-go and
// client-go. `make check-deploy` runs its tests, which check the repository's files.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	root := flag.String("root", "../..", "the repository's root")
	settingsFile := flag.String("settings", "", "file of the settings' variables, one a line (`sw4rm settings --names`); empty runs that command in -root")
	flag.Parse()
	settings, err := loadSettings(*root, *settingsFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "check:", err)
		os.Exit(2)
	}
	problems := Check(*root, settings)
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
	fmt.Println("deploy files: docker-compose.yml and deploy/k8s are valid and in step with the settings table")
}

// Check checks the deploy files of the repository at root and returns every problem found.
func Check(root string, settings Settings) []error {
	problems := CheckCompose(filepath.Join(root, "docker-compose.yml"), settings)
	return append(problems, CheckKubernetes(filepath.Join(root, "deploy", "k8s"), settings)...)
}

// Settings is the set of the settings' variables (SW4RM_*).
type Settings map[string]bool

// Required are the settings every sw4rm server and worker of a deployment must be given, each
// with why.
var Required = map[string]string{
	"SW4RM_TEMPORAL_ADDRESS":       "the default, 127.0.0.1:7233, is no cluster's",
	"SW4RM_NAMESPACE":              "the deployment creates its own namespace; the default one does not exist on a new cluster",
	"SW4RM_DATABASE_URL":           "sw4rm server and sw4rm worker refuse to start without it",
	"SW4RM_HTTP_ADDR":              "the health checks and /metrics are served there",
	"SW4RM_AUTH":                   "a deployment states its authentication mode (docs/security.md)",
	"SW4RM_HITL_DECISION_KEY_FILE": "servers and workers refuse operators without it (docs/hitl.md)",
}

// ParseSettings reads the output of `sw4rm settings --names`.
func ParseSettings(text string) (Settings, error) {
	s := Settings{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		name := strings.TrimSpace(sc.Text())
		if name == "" {
			continue
		}
		if !strings.HasPrefix(name, "SW4RM_") {
			return nil, fmt.Errorf("settings list: %q is no SW4RM_* variable", name)
		}
		s[name] = true
	}
	for name := range Required {
		if !s[name] {
			return nil, fmt.Errorf("settings list: the required %s is no setting any more; update Required", name)
		}
	}
	return s, sc.Err()
}

// loadSettings reads the settings list from file, or runs `go run ./cmd/sw4rm settings
// --names` in root when file is empty.
func loadSettings(root, file string) (Settings, error) {
	var out []byte
	var err error
	if file != "" {
		out, err = os.ReadFile(file)
	} else {
		cmd := exec.Command("go", "run", "./cmd/sw4rm", "settings", "--names")
		cmd.Dir = root
		cmd.Stderr = os.Stderr
		out, err = cmd.Output()
		if err != nil {
			err = fmt.Errorf("go run ./cmd/sw4rm settings --names: %w", err)
		}
	}
	if err != nil {
		return nil, err
	}
	return ParseSettings(string(out))
}

// checkVariables checks the SW4RM_* variables one sw4rm process (or any container, with
// sw4rm false) is given: each must be a setting; a sw4rm process must have every required
// one. where names the process in the problems.
func checkVariables(where string, env map[string]bool, sw4rm bool, settings Settings) []error {
	var problems []error
	for name := range env {
		if strings.HasPrefix(name, "SW4RM_") && !settings[name] {
			problems = append(problems, fmt.Errorf("%s: %s is no setting (sw4rm settings lists them; README.md, \"Configuration\")", where, name))
		}
	}
	if sw4rm {
		for name, why := range Required {
			if !env[name] {
				problems = append(problems, fmt.Errorf("%s: %s is not set: %s", where, name, why))
			}
		}
	}
	return sorted(problems)
}
