package cli

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFormatVersion(t *testing.T) {
	stamped := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/baton-go/baton", Version: "v0.3.0"},
		Settings: []debug.BuildSetting{
			{Key: "-trimpath", Value: "true"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "6d875f6c1c0fd2b0a3e0a3f1ddc4b2b5f3a1c9e7"},
			{Key: "vcs.time", Value: "2026-12-01T14:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	unstamped := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/baton-go/baton", Version: "(devel)"},
	}
	for _, tc := range []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"vcs stamped", stamped, "baton v0.3.0\n" +
			"revision: 6d875f6c1c0fd2b0a3e0a3f1ddc4b2b5f3a1c9e7\n" +
			"modified: true\n" +
			"go: go1.26.8 linux/arm64\n"},
		{"no vcs", unstamped, "baton (devel)\n" +
			"revision: unknown\n" +
			"modified: unknown\n" +
			"go: go1.26.8 linux/arm64\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := formatVersion(tc.info, "linux/arm64"); got != tc.want {
				t.Errorf("formatVersion:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestFormatVersionWithoutBuildInfo(t *testing.T) {
	got := formatVersion(nil, "linux/amd64")
	want := "baton unknown\nrevision: unknown\nmodified: unknown\ngo: " + runtime.Version() + " linux/amd64\n"
	if got != want {
		t.Errorf("formatVersion(nil):\n got %q\nwant %q", got, want)
	}
}

func TestVersionSummary(t *testing.T) {
	info := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/baton-go/baton/cmd/baton", Version: "v0.9.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "945d1f69e0285533f62281a930dfa17bad865117"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	for _, tc := range []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"vcs stamped", info, "v0.9.0, revision 945d1f69e0285533f62281a930dfa17bad865117 (modified), go1.26.8 linux/arm64"},
		{"go install", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.9.0"}}, "v0.9.0, go1.26.8 linux/arm64"},
		{"no build information", nil, "unknown, " + runtime.Version() + " linux/arm64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := readBuild(tc.info, "linux/arm64").summary(); got != tc.want {
				t.Errorf("summary:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}
