package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// CheckCompose loads the compose file at path as `docker compose config` does, every
// profile enabled and no variable set in the environment, and checks the SW4RM_* variables
// of its services.
func CheckCompose(path string, settings Settings) []error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return []error{err}
	}
	project, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  filepath.Dir(abs),
		ConfigFiles: []types.ConfigFile{{Filename: abs}},
		// Empty, not the environment of the check: ${VAR:-default} must hold on any machine.
		Environment: types.Mapping{},
	}, func(o *loader.Options) {
		o.SetProjectName("sw4rm", true)
		o.Profiles = []string{"*"}
	})
	if err != nil {
		return []error{fmt.Errorf("%s: %w", path, err)}
	}
	var problems []error
	names := slices.Sorted(func(yield func(string) bool) {
		for name := range project.Services {
			if !yield(name) {
				return
			}
		}
	})
	for _, name := range names {
		svc := project.Services[name]
		env := map[string]bool{}
		for k := range svc.Environment {
			env[k] = true
		}
		where := fmt.Sprintf("%s: service %s", path, name)
		problems = append(problems, checkVariables(where, env, isSW4RMProcess(svc), settings)...)
	}
	return problems
}

// isSW4RMProcess reports whether a compose service runs `sw4rm server` or `sw4rm worker`:
// the image is built from the repository, or named sw4rm, and its command is server or
// worker.
func isSW4RMProcess(svc types.ServiceConfig) bool {
	ours := svc.Build != nil || strings.HasPrefix(svc.Image, "sw4rm") || strings.Contains(svc.Image, "/sw4rm")
	return ours && len(svc.Command) > 0 && (svc.Command[0] == "server" || svc.Command[0] == "worker")
}

// sorted orders problems by their text, so that a run's output is stable.
func sorted(problems []error) []error {
	sort.Slice(problems, func(i, j int) bool { return problems[i].Error() < problems[j].Error() })
	return problems
}
