// Package buildinfo says which build a binary of ours is: its version, git revision and Go version, which
// `kubectl mcs version` prints and the controller exports as mcs_controller_build_info.
package buildinfo

import "runtime/debug"

// version and revision, when set with -ldflags -X (build/images/build.sh does), win over the build info: the
// images are built from a checkout, where the module version is "(devel)", and under GOFLAGS=-buildvcs=false,
// which leaves the vcs settings out.
var version, revision string

// Info is a binary's build.
type Info struct {
	// Version is the module version: a tag for `go install ...@vX`, "(devel)" when built from a checkout, or the
	// version the image build set.
	Version string
	// Revision is the git commit, when the build recorded it; Modified says the tree had uncommitted changes.
	Revision  string
	Modified  bool
	GoVersion string
}

// Read returns this binary's build.
func Read() Info { return From(debug.ReadBuildInfo()) }

// From reads a build from the results of debug.ReadBuildInfo: the module version and the vcs settings that go
// build records from a git checkout, overridden by the values set at link time.
func From(bi *debug.BuildInfo, ok bool) Info {
	i := Info{Version: "unknown", GoVersion: "unknown"}
	if ok {
		i.Version, i.GoVersion = bi.Main.Version, bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				i.Revision = s.Value
			case "vcs.modified":
				i.Modified = s.Value == "true"
			}
		}
	}
	if version != "" {
		i.Version = version
	}
	if revision != "" {
		i.Revision = revision
	}
	return i
}
