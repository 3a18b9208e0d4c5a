package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// unknown stands for a build fact the binary does not carry.
const unknown = "unknown"

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, VCS revision and Go version of this binary",
		Long: `Print what the binary knows about its own build, from the build information
the Go toolchain embeds (the same as "baton --version"):

  baton VERSION
  revision: REVISION
  modified: true|false
  go: GOVERSION OS/ARCH

VERSION is the module version: a tag or pseudo-version when baton was built
as a dependency or from a git checkout, "(devel)" otherwise. REVISION is the
commit and "modified" whether the checkout had uncommitted changes; both are
"unknown" when the binary was built without VCS stamping (-buildvcs=false, a
source tree without .git, or a test binary).`,
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(cmd.OutOrStdout(), versionText())
			return err
		}),
	}
}

// versionText is the output of "baton version" for this binary.
func versionText() string {
	info, _ := debug.ReadBuildInfo() // nil without build information
	return formatVersion(info, runtime.GOOS+"/"+runtime.GOARCH)
}

// versionSummary is what versionText says on one line, for doctor's first
// row.
func versionSummary() string {
	info, _ := debug.ReadBuildInfo() // nil without build information
	return readBuild(info, runtime.GOOS+"/"+runtime.GOARCH).summary()
}

// build is what a binary knows about its own build; a missing fact is
// "unknown".
type build struct {
	version, revision, modified, goVersion, platform string
}

// readBuild reads info, which may be nil when the binary carries no build
// information. platform is GOOS/GOARCH of the running binary.
func readBuild(info *debug.BuildInfo, platform string) build {
	b := build{unknown, unknown, unknown, runtime.Version(), platform}
	if info == nil {
		return b
	}
	if info.Main.Version != "" {
		b.version = info.Main.Version
	}
	if info.GoVersion != "" {
		b.goVersion = info.GoVersion
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.revision = s.Value
		case "vcs.modified":
			b.modified = s.Value
		}
	}
	return b
}

// summary is "VERSION, revision REVISION[ (modified)], GOVERSION OS/ARCH",
// without the revision when it is unknown.
func (b build) summary() string {
	s := b.version
	if b.revision != unknown {
		s += ", revision " + b.revision
		if b.modified == "true" {
			s += " (modified)"
		}
	}
	return s + ", " + b.goVersion + " " + b.platform
}

// formatVersion renders info, which may be nil when the binary carries no
// build information. platform is GOOS/GOARCH of the running binary. Every
// line is always present, with "unknown" for a missing fact, so that scripts
// can parse the output of any build.
func formatVersion(info *debug.BuildInfo, platform string) string {
	b := readBuild(info, platform)
	var w strings.Builder
	fmt.Fprintf(&w, "baton %s\n", b.version)
	fmt.Fprintf(&w, "revision: %s\n", b.revision)
	fmt.Fprintf(&w, "modified: %s\n", b.modified)
	fmt.Fprintf(&w, "go: %s %s\n", b.goVersion, b.platform)
	return w.String()
}
