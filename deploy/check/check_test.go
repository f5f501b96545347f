package main

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// root is the repository's root, seen from this package.
const root = "../.."

// settingsOnce holds the settings list, read once from `go run ./cmd/sw4rm settings --names`.
var settingsOnce = sync.OnceValues(func() (Settings, error) { return loadSettings(root, "") })

func settingsList(t *testing.T) Settings {
	t.Helper()
	s, err := settingsOnce()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRepositoryDeployFiles: docker-compose.yml and deploy/k8s are valid, and every SW4RM_*
// variable they set is a setting, every required one set for each sw4rm process.
func TestRepositoryDeployFiles(t *testing.T) {
	for _, p := range Check(root, settingsList(t)) {
		t.Error(p)
	}
}

// copyDeploy copies the deploy files into a directory of their own, with edit applied to the
// file named rel (relative to the root), and returns that directory.
func copyDeploy(t *testing.T, rel, old, replacement string) string {
	t.Helper()
	dir := t.TempDir()
	files := []string{"docker-compose.yml"}
	k8s, err := filepath.Glob(filepath.Join(root, "deploy", "k8s", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range k8s {
		files = append(files, filepath.Join("deploy", "k8s", filepath.Base(f)))
	}
	found := false
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		if f == rel {
			if !strings.Contains(text, old) {
				t.Fatalf("%s does not hold %q", rel, old)
			}
			text = strings.Replace(text, old, replacement, 1)
			found = true
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if !found && rel != "" {
		t.Fatalf("no file %s", rel)
	}
	return dir
}

// TestCheckRefuses: each mistake below is a problem the check reports, naming what is wrong.
func TestCheckRefuses(t *testing.T) {
	compose := "docker-compose.yml"
	config := filepath.Join("deploy", "k8s", "config.yaml")
	secret := filepath.Join("deploy", "k8s", "secret.yaml")
	server := filepath.Join("deploy", "k8s", "server.yaml")
	worker := filepath.Join("deploy", "k8s", "worker.yaml")
	kust := filepath.Join("deploy", "k8s", "kustomization.yaml")
	for _, c := range []struct {
		name, file, old, replacement, want string
	}{
		{"compose: a misspelt variable", compose, "SW4RM_TEMPORAL_ADDRESS: temporal:7233", "SW4RM_TEMPORAL_ADRESS: temporal:7233",
			"SW4RM_TEMPORAL_ADRESS is no setting"},
		{"compose: a required variable missing", compose, "  SW4RM_DATABASE_URL: postgres://", "  NOT_SW4RM_DATABASE_URL: postgres://",
			"service sw4rm-worker: SW4RM_DATABASE_URL is not set"},
		{"compose: a field the compose schema does not know", compose, "    restart: unless-stopped\n    depends_on:\n      temporal-schema:",
			"    restrat: unless-stopped\n    depends_on:\n      temporal-schema:", "restrat"},
		{"compose: a dependency on no service", compose, "      temporal-schema:\n        condition: service_completed_successfully",
			"      temporal-schemas:\n        condition: service_completed_successfully", "temporal-schemas"},
		{"k8s: a misspelt variable in the ConfigMap", config, "SW4RM_TASK_QUEUE: sw4rm", "SW4RM_TASKQUEUE: sw4rm",
			"SW4RM_TASKQUEUE is no setting"},
		{"k8s: a required variable missing", secret, "  SW4RM_DATABASE_URL: postgres://", "  DATABASE_URL: postgres://",
			"SW4RM_DATABASE_URL is not set"},
		{"k8s: an unknown field", server, "  replicas: 2\n", "  replica: 2\n", `unknown field "spec.replica"`},
		{"k8s: a field of the wrong type", worker, "  replicas: 3\n", "  replicas: three\n", "replicas"},
		{"k8s: a required field missing (the OpenAPI schema)", worker, "        - name: sw4rm\n          image:", "        - image:",
			"missing property 'name'"},
		{"k8s: a selector that selects nothing", server, "  minAvailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: sw4rm",
			"  minAvailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: sw4rn", "selects the pods of no Deployment"},
		{"k8s: a probe on an undeclared port", worker, "            httpGet:\n              path: /healthz\n              port: http",
			"            httpGet:\n              path: /healthz\n              port: metrics", "port metrics is not one of the container's ports"},
		{"k8s: an unlisted file", kust, "  - worker.yaml\n", "", "worker.yaml is not listed in resources"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDeploy(t, c.file, c.old, c.replacement)
			problems := Check(dir, settingsList(t))
			var all []string
			for _, p := range problems {
				if strings.Contains(p.Error(), c.want) {
					return
				}
				all = append(all, p.Error())
			}
			t.Fatalf("no problem says %q; got %d:\n%s", c.want, len(all), strings.Join(all, "\n"))
		})
	}
}

// TestUnchangedCopyPasses: the copies TestCheckRefuses edits pass unedited, so each refusal
// there is the edit's.
func TestUnchangedCopyPasses(t *testing.T) {
	for _, p := range Check(copyDeploy(t, "", "", ""), settingsList(t)) {
		t.Error(p)
	}
}

// TestParseSettings: the list must name SW4RM_* variables and hold every required one.
func TestParseSettings(t *testing.T) {
	if _, err := ParseSettings("SW4RM_TEMPORAL_ADDRESS\nPATH\n"); err == nil {
		t.Error("a variable that is no SW4RM_* one was taken")
	}
	if _, err := ParseSettings("SW4RM_TEMPORAL_ADDRESS\n"); err == nil {
		t.Error("a list without the required settings was taken")
	}
}
