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

// formatVersion renders info, which may be nil when the binary carries no
// build information. platform is GOOS/GOARCH of the running binary. Every
// line is always present, with "unknown" for a missing fact, so that scripts
// can parse the output of any build.
func formatVersion(info *debug.BuildInfo, platform string) string {
	version, goVersion := unknown, runtime.Version()
	revision, modified := unknown, unknown
	if info != nil {
		if info.Main.Version != "" {
			version = info.Main.Version
		}
		if info.GoVersion != "" {
			goVersion = info.GoVersion
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "baton %s\n", version)
	fmt.Fprintf(&b, "revision: %s\n", revision)
	fmt.Fprintf(&b, "modified: %s\n", modified)
	fmt.Fprintf(&b, "go: %s %s\n", goVersion, platform)
	return b.String()
}
