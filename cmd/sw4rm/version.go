package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// temporalCLIVersion is the Temporal CLI (and so the dev server) version `make` pins, set by
// the Makefile's build with -ldflags "-X main.temporalCLIVersion=…"; empty in other builds.
var temporalCLIVersion string

// versionText is what `sw4rm --version` prints: the module's version and the commit it was
// built from (from the build information Go records), the Go version, the Temporal Go SDK
// the binary was built with, and the pinned Temporal CLI when the Makefile built it.
func versionText(info *debug.BuildInfo, ok bool) string {
	version, commit, sdk := "unknown", "unknown", "unknown"
	if ok {
		version = info.Main.Version
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					commit += " (modified)"
				}
			}
		}
		for _, d := range info.Deps {
			if d.Path == "go.temporal.io/sdk" {
				sdk = d.Version
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "sw4rm %s\n", version)
	fmt.Fprintf(&b, "commit: %s\n", commit)
	fmt.Fprintf(&b, "go: %s\n", runtime.Version())
	fmt.Fprintf(&b, "temporal go sdk: %s\n", sdk)
	if temporalCLIVersion != "" {
		fmt.Fprintf(&b, "temporal cli (make dev's server): %s\n", temporalCLIVersion)
	}
	return b.String()
}
